// int4 weight-only GEMV: weights packed two per byte in 32-element chunks (see linear.h),
// blockwise scales along K. A 16-byte load yields 32 weights: low nibbles are elements
// 0..15 of the chunk, high nibbles 16..31, so unpacking is two masks and a shift.
#include <immintrin.h>

#include <algorithm>

#include "gemv.h"

namespace nf::kernels::detail {
namespace {

// Value of element k of a packed row.
inline int q4_at(const uint8_t* row, int64_t k) {
  int64_t c = k / 32, j = k % 32;
  uint8_t b = row[c * 16 + (j & 15)];
  return (j < 16 ? (b & 15) : (b >> 4)) - 8;
}

float dot_scalar(const float* x, const uint8_t* row, int64_t k0, int64_t len) {
  float s = 0;
  int64_t k = k0, end = k0 + len;
  // Whole aligned chunks: both nibbles of each byte at once.
  for (; k % 32 == 0 && k + 32 <= end; k += 32) {
    const uint8_t* c = row + k / 2;
    for (int j = 0; j < 16; ++j) s += x[k + j] * ((c[j] & 15) - 8) + x[k + 16 + j] * ((c[j] >> 4) - 8);
  }
  for (; k < end; ++k) s += x[k] * q4_at(row, k);
  return s;
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A whole row when blocks are multiples of 32: block sums stay in vector registers and
// are scaled there, so there is one horizontal add per row, not per block.
__attribute__((target("avx2,fma"))) float row_avx2(const float* x, const uint8_t* row, const float* sc,
                                                    const float* zp, const float* xs, int64_t K, int64_t bs,
                                                    int64_t nb) {
  const __m128i mask = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
  __m256 total = _mm256_setzero_ps();
  float extra = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t k = b * bs, end = std::min(k + bs, K);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (; k + 32 <= end; k += 32) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2));
      __m128i lo = _mm_sub_epi8(_mm_and_si128(v, mask), eight);
      __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), mask), eight);
      const float* xk = x + k;
      a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(xk), a0);
      a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(xk + 8), a1);
      a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(xk + 16), a0);
      a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(xk + 24), a1);
    }
    float rest = k < end ? dot_scalar(x, row, k, end - k) : 0.f;
    if (zp) rest += zp[b] * xs[b];
    total = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(sc[b]), total);
    extra += sc[b] * rest;
  }
  return hsum(total) + extra;
}

}  // namespace

void gemv_int4(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd) {
  const int64_t K = w.K, N = w.N, bs = w.block_size, nb = w.n_blocks;
  const bool has_zero = !w.zeros.empty();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w.q4.data() + n * w.row_bytes;
    const float* sc = w.scales.data() + n * nb;
    const float* zp = has_zero ? w.zeros.data() + n * nb : nullptr;
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * K;  // the dot functions index x by absolute k
      if (simd && bs % 32 == 0) {
        y[m * N + n] = row_avx2(xm, row, sc, zp, zp ? xsum + m * nb : nullptr, K, bs, nb) + (bias ? bias[n] : 0.f);
        continue;
      }
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        int64_t k0 = b * bs, len = std::min(bs, K - k0);
        float d = dot_scalar(xm, row, k0, len);
        if (zp) d += zp[b] * xsum[m * nb + b];
        acc += sc[b] * d;
      }
      y[m * N + n] = acc + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace nf::kernels::detail
