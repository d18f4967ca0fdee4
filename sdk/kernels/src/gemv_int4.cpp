// int4 weight-only GEMV with fp32 activations, for CPUs (or shapes) the integer-dot kernels
// (gemv_dot.cpp, gemv_dot_avx2.cpp) do not take: weights packed two per byte in 16-element
// chunks (see linear.h), blockwise scales along K. Nibbles are used unsigned (q + 8); the
// 8 * sum(x) of each block is subtracted once per block, so the inner loop is load, mask or
// shift, convert, FMA.
#include <immintrin.h>

#include <algorithm>

#include "gemv.h"
#include "hsum.h"

namespace nf::kernels::detail {
namespace {

// Stored nibble (q + 8) of element k of a packed row.
inline int nibble_at(const uint8_t* row, int64_t k) {
  uint8_t b = row[(k / 16) * 8 + (k % 8)];
  return (k % 16) < 8 ? (b & 15) : (b >> 4);
}

// sum x[k] * (q[k] + 8) over [k0, k0 + len): the +8 is removed with the block sum of x.
float dot_nibbles_scalar(const float* x, const uint8_t* row, int64_t k0, int64_t len) {
  float s = 0;
  int64_t k = k0, end = k0 + len;
  for (; k % 16 == 0 && k + 16 <= end; k += 16) {  // whole chunks: both nibbles of each byte
    const uint8_t* c = row + k / 2;
    for (int j = 0; j < 8; ++j) s += x[k + j] * (c[j] & 15) + x[k + 8 + j] * (c[j] >> 4);
  }
  for (; k < end; ++k) s += x[k] * nibble_at(row, k);
  return s;
}

// A whole row when blocks are multiples of 16: 8 bytes zero-extended to 8 dwords hold 16
// weights (low nibble, and >> 4 for the high one). Block sums stay in vector registers and
// are scaled there: one horizontal add per row.
__attribute__((target("avx2,fma"))) float row_avx2(const float* x, const uint8_t* row, const float* sc,
                                                    const float* zp, const float* xs, int64_t K, int64_t bs,
                                                    int64_t nb) {
  const __m256i mask = _mm256_set1_epi32(15);
  __m256 total = _mm256_setzero_ps();
  float extra = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t k = b * bs, end = std::min(k + bs, K);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; k + 32 <= end; k += 32) {
      __m256i d0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k / 2)));
      __m256i d1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k / 2 + 8)));
      a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(d0, mask)), _mm256_loadu_ps(x + k), a0);
      a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d0, 4)), _mm256_loadu_ps(x + k + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(d1, mask)), _mm256_loadu_ps(x + k + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d1, 4)), _mm256_loadu_ps(x + k + 24), a3);
    }
    for (; k + 16 <= end; k += 16) {
      __m256i d0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k / 2)));
      a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(d0, mask)), _mm256_loadu_ps(x + k), a0);
      a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(d0, 4)), _mm256_loadu_ps(x + k + 8), a1);
    }
    float rest = k < end ? dot_nibbles_scalar(x, row, k, end - k) : 0.f;
    rest += ((zp ? zp[b] : 0.f) - 8.f) * xs[b];
    total = _mm256_fmadd_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), _mm256_set1_ps(sc[b]), total);
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
      const float* xs = xsum + m * nb;
      float acc;
      if (simd && bs % 16 == 0) {
        acc = row_avx2(xm, row, sc, zp, xs, K, bs, nb);
      } else {
        acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          int64_t k0 = b * bs, len = std::min(bs, K - k0);
          acc += sc[b] * (dot_nibbles_scalar(xm, row, k0, len) + ((zp ? zp[b] : 0.f) - 8.f) * xs[b]);
        }
      }
      y[m * N + n] = acc + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace nf::kernels::detail
