// int8 weight-only GEMV: weights [N, K] int8 with per-block scales. Each block's integer
// dot product is accumulated in fp32 (int8 -> fp32 converts are exact), then scaled:
//   y[n] = sum_b scale[n,b] * (dot(q[n, b], x[b]) + zero[n,b] * sum(x[b])).
// GCC 12 flags _mm512_reduce_add_ps's internal _mm256_undefined_pd() as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "gemv.h"

namespace nf::kernels::detail {
namespace {

float dot_scalar(const float* x, const int8_t* q, int64_t k) {
  float s0 = 0, s1 = 0;
  int64_t i = 0;
  for (; i + 2 <= k; i += 2) s0 += x[i] * q[i], s1 += x[i + 1] * q[i + 1];
  for (; i < k; ++i) s0 += x[i] * q[i];
  return s0 + s1;
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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

// R rows of int8 weights (stride K) against one x, blockwise: each block's dot product is
// accumulated in fp32 vectors (int8 -> fp32 is exact) and scaled once per block. Needs
// block_size % 16 == 0 or a single block; the tail of K is masked.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void rows_avx512(const float* x, const int8_t* q, int64_t K,
                                                                      int64_t bs, int64_t nb, const float* sc,
                                                                      float* out) {
  __m512 tot[R];
  for (int r = 0; r < R; ++r) tot[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t k1 = std::min(K, (b + 1) * bs);
    __m512 a[R][2];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    int64_t k = b * bs;
    for (; k + 32 <= k1; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
      for (int r = 0; r < R; ++r) {
        const int8_t* p = q + r * K + k;
        _mm_prefetch(reinterpret_cast<const char*>(p + 1024), _MM_HINT_T0);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        a[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v))), x0, a[r][0]);
        a[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1))), x1, a[r][1]);
      }
    }
    for (; k < k1; k += 16) {
      const __mmask16 m = k1 - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k1 - k)) - 1);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
      for (int r = 0; r < R; ++r)
        a[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, q + r * K + k))), x0,
                                  a[r][0]);
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm512_fmadd_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_set1_ps(sc[r * nb + b]), tot[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(tot[r]);
}

}  // namespace

void gemv_int8(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd) {
  const int64_t K = w.K, N = w.N, bs = w.block_size, nb = w.n_blocks;
  const bool has_zero = !w.zeros.empty();
  if (simd && cpu_has_avx512() && (bs % 16 == 0 || nb == 1)) {
    auto finish = [&](int64_t m, int64_t n, float s) {
      if (has_zero)
        for (int64_t b = 0; b < nb; ++b) s += w.scales[n * nb + b] * w.zeros[n * nb + b] * xsum[m * nb + b];
      y[m * N + n] = s + (bias ? bias[n] : 0.f);
    };
    int64_t n = n0;
    float s[4];
    for (; n + 4 <= n1; n += 4)
      for (int64_t m = 0; m < M; ++m) {
        rows_avx512<4>(x + m * K, w.q8.data() + n * K, K, bs, nb, w.scales.data() + n * nb, s);
        for (int r = 0; r < 4; ++r) finish(m, n + r, s[r]);
      }
    for (; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        rows_avx512<1>(x + m * K, w.q8.data() + n * K, K, bs, nb, w.scales.data() + n * nb, s);
        finish(m, n, s[0]);
      }
    return;
  }
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
