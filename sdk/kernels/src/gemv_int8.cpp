// int8 weight-only GEMV with fp32 activations, for CPUs (or shapes) the integer-dot kernels
// (gemv_dot.cpp, gemv_dot_avx2.cpp) do not take: weights [N, K] int8 with per-block scales.
// Each block's dot product is accumulated in fp32 (int8 -> fp32 converts are exact), then
// scaled:
//   y[n] = sum_b scale[n,b] * (dot(q[n, b], x[b]) + zero[n,b] * sum(x[b])).
#include <immintrin.h>

#include <algorithm>

#include "gemv.h"
#include "hsum.h"

namespace nf::kernels::detail {
namespace {

float dot_scalar(const float* x, const int8_t* q, int64_t k) {
  float s0 = 0, s1 = 0;
  int64_t i = 0;
  for (; i + 2 <= k; i += 2) s0 += x[i] * q[i], s1 += x[i + 1] * q[i + 1];
  for (; i < k; ++i) s0 += x[i] * q[i];
  return s0 + s1;
}

__attribute__((target("avx2,fma"))) inline __m256 load8(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* x, const int8_t* q, int64_t k) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    s0 = _mm256_fmadd_ps(load8(q + i), _mm256_loadu_ps(x + i), s0);
    s1 = _mm256_fmadd_ps(load8(q + i + 8), _mm256_loadu_ps(x + i + 8), s1);
    s2 = _mm256_fmadd_ps(load8(q + i + 16), _mm256_loadu_ps(x + i + 16), s2);
    s3 = _mm256_fmadd_ps(load8(q + i + 24), _mm256_loadu_ps(x + i + 24), s3);
  }
  for (; i + 8 <= k; i += 8) s0 = _mm256_fmadd_ps(load8(q + i), _mm256_loadu_ps(x + i), s0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < k; ++i) s += x[i] * q[i];
  return s;
}

}  // namespace

void gemv_int8(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd) {
  const int64_t K = w.K, N = w.N, bs = w.block_size, nb = w.n_blocks;
  const bool has_zero = !w.zeros.empty();
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* row = w.q8.data() + n * K;
    const float* sc = w.scales.data() + n * nb;
    const float* zp = has_zero ? w.zeros.data() + n * nb : nullptr;
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * K;
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        int64_t k0 = b * bs, len = std::min(bs, K - k0);
        float d = simd ? dot_avx2(xm + k0, row + k0, len) : dot_scalar(xm + k0, row + k0, len);
        if (zp) d += zp[b] * xsum[m * nb + b];
        acc += sc[b] * d;
      }
      y[m * N + n] = acc + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace nf::kernels::detail
