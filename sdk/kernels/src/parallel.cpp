#include "npuforge/kernels/parallel.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <thread>

namespace nf::kernels {

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

int resolve_threads(int requested) { return requested > 0 ? requested : hardware_threads(); }

void set_blas_threads(int n) { openblas_set_num_threads(resolve_threads(n)); }

void parallel_for(int64_t n, int threads, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(resolve_threads(threads), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
    if (b < e) fn(b, e);
  }
}

}  // namespace nf::kernels
