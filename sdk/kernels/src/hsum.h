// Internal: the horizontal sums the kernels reduce their vector accumulators with.
#pragma once

#include <immintrin.h>

namespace nf::kernels::detail {

__attribute__((target("avx2"), always_inline)) inline float hsum(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// The same tree of additions as _mm512_reduce_add_ps (so the same bits), in the zero-masked
// forms: the plain ones start from GCC 12's self-initialized "undefined" vector, which
// -Werror=uninitialized refuses once inlined.
__attribute__((target("avx512f"), always_inline)) inline float hsum(__m512 v) {
  const __m512 s = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xffff, v, v, 0x4e));  // lanes 0-7 + 8-15
  return hsum(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(s), 0)));
}

}  // namespace nf::kernels::detail
