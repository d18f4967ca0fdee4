// fp32 GEMV over weights packed [N, K]: one dot product per output channel. The AVX-512
// path streams 4 weight rows per pass (8 independent accumulators, one activation load
// shared by the 4 rows, software prefetch ahead of each row); AVX2 is the fallback.
#include <immintrin.h>

#include "gemv.h"
#include "hsum.h"

namespace nf::kernels::detail {
namespace {

float dot_scalar(const float* a, const float* b, int64_t k) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1], s2 += a[i + 2] * b[i + 2], s3 += a[i + 3] * b[i + 3];
  for (; i < k; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
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

constexpr int64_t kAhead = 512;  // floats (2 KiB) prefetched ahead of each streamed row

// R rows (stride K) against one x: out[r] = dot(x, w + r * K).
template <int R>
__attribute__((target("avx512f"))) void rows_avx512(const float* x, const float* w, int64_t K, float* out) {
  __m512 a[R][2];
  for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
    for (int r = 0; r < R; ++r) {
      const float* p = w + r * K + k;
      _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T0);
      a[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(p), x0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(p + 16), x1, a[r][1]);
    }
  }
  for (; k < K; k += 16) {
    const __mmask16 m = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1);
    const __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
    for (int r = 0; r < R; ++r) a[r][0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + r * K + k), x0, a[r][0]);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(_mm512_add_ps(a[r][0], a[r][1]));
}

}  // namespace

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

void gemv_f32(const float* x, int64_t M, const PackedWeight& w, const float* bias, float* y, int64_t n0, int64_t n1,
              bool simd) {
  const int64_t K = w.K, N = w.N;
  if (simd_level() == Simd::kAvx512) {
    int64_t n = n0;
    float s[4];
    for (; n + 4 <= n1; n += 4)
      for (int64_t m = 0; m < M; ++m) {
        rows_avx512<4>(x + m * K, w.f32_rows() + n * K, K, s);
        for (int r = 0; r < 4; ++r) y[m * N + n + r] = s[r] + (bias ? bias[n + r] : 0.f);
      }
    for (; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        rows_avx512<1>(x + m * K, w.f32_rows() + n * K, K, s);
        y[m * N + n] = s[0] + (bias ? bias[n] : 0.f);
      }
    return;
  }
  for (int64_t n = n0; n < n1; ++n) {
    const float* row = w.f32_rows() + n * K;
    for (int64_t m = 0; m < M; ++m) {
      float s = simd ? dot_avx2(x + m * K, row, K) : dot_scalar(x + m * K, row, K);
      y[m * N + n] = s + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace nf::kernels::detail
