// Threads for the kernels: a small fixed pool with a per-call thread count, so a session's
// `threads` option holds without touching global state. 0 means all cores.
#pragma once

#include <cstdint>
#include <functional>

namespace nf::kernels {

int hardware_threads();
// Resolves a requested count (0 = all cores) to at least 1.
int resolve_threads(int requested);
// Sets the thread count of the fp32 GEMMs that go through OpenBLAS (global to the process).
// OpenBLAS itself is kept single-threaded and its calls are split over this pool: one set
// of threads in the process. Its own workers spin-yield after each job, and next to this
// pool's they left 3 busy threads on 2 cores (tiny_llama int8 decode at 2 threads fell to
// 0.1x of 1 thread on a 2-core VM).
void set_blas_threads(int n);
int blas_threads();

// Splits [0, n) into `threads` contiguous chunks of at least `grain` items and runs
// fn(begin, end) on each; runs inline when one chunk suffices or when called from inside
// another parallel_for's fn.
void parallel_for(int64_t n, int threads, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace nf::kernels
