// Threads for the kernels: a small fixed pool with a per-call thread count, so a session's
// `threads` option holds without touching global state. 0 means all cores.
#pragma once

#include <cstdint>
#include <functional>

namespace nf::kernels {

int hardware_threads();
// Resolves a requested count (0 = all cores) to at least 1.
int resolve_threads(int requested);
// Sets the thread count OpenBLAS uses for fp32 GEMM (global to the process).
void set_blas_threads(int n);

// Splits [0, n) into `threads` contiguous chunks of at least `grain` items and runs
// fn(begin, end) on each; runs inline when one chunk suffices.
void parallel_for(int64_t n, int threads, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace nf::kernels
