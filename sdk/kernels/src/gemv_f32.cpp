// fp32 GEMV over weights packed [N, K]: one dot product per output channel.
#include <immintrin.h>

#include "gemv.h"

namespace nf::kernels::detail {
namespace {

float dot_scalar(const float* a, const float* b, int64_t k) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1], s2 += a[i + 2] * b[i + 2], s3 += a[i + 3] * b[i + 3];
  for (; i < k; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t k) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= k; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < k; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void gemv_f32(const float* x, int64_t M, const PackedWeight& w, const float* bias, float* y, int64_t n0, int64_t n1,
              bool simd) {
  const int64_t K = w.K, N = w.N;
  for (int64_t n = n0; n < n1; ++n) {
    const float* row = w.f32.data() + n * K;
    for (int64_t m = 0; m < M; ++m) {
      float s = simd ? dot_avx2(x + m * K, row, K) : dot_scalar(x + m * K, row, K);
      y[m * N + n] = s + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace nf::kernels::detail
