// int4 weight-only GEMV: weights packed two per byte in 16-element chunks (see linear.h),
// blockwise scales along K. Nibbles are used unsigned (q + 8); the 8 * sum(x) of each block
// is subtracted once per block, so the inner loop is load, mask or shift, convert, FMA.
// GCC 12 flags _mm512_reduce_add_ps's internal _mm256_undefined_pd() as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "gemv.h"

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

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
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

// R rows against one x, when block_size and K are multiples of 32. `xp` is x with each
// 32-group reordered to [0..7, 16..23, 8..15, 24..31]: then the 16 bytes of two packed
// chunks, zero-extended to 16 dwords, give with one mask the weights of xp[k..k+16) and
// with one shift those of xp[k+16..k+32) — one load, two converts, two FMAs per 32 weights
// and row, the activation loads shared by the R rows. Block sums are scaled in vectors;
// the nibble offset (+8) and zeros are removed per block with the block sums of x.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void rows_avx512(const float* xp, const uint8_t* q,
                                                                      int64_t row_bytes, int64_t K, int64_t bs,
                                                                      int64_t nb, const float* sc, float* out) {
  const __m512i mask = _mm512_set1_epi32(15);
  __m512 tot[R];
  for (int r = 0; r < R; ++r) tot[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t k1 = std::min(K, (b + 1) * bs);
    __m512 a[R][2];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (int64_t k = b * bs; k < k1; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(xp + k), x1 = _mm512_loadu_ps(xp + k + 16);
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = q + r * row_bytes + k / 2;
        _mm_prefetch(reinterpret_cast<const char*>(p + 512), _MM_HINT_T0);
        const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        a[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(d, mask)), x0, a[r][0]);
        a[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 4)), x1, a[r][1]);
      }
    }
    for (int r = 0; r < R; ++r)
      tot[r] = _mm512_fmadd_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_set1_ps(sc[r * nb + b]), tot[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(tot[r]);
}

}  // namespace

void permute_x_int4(const float* x, int64_t K, float* xp) {
  for (int64_t k = 0; k + 32 <= K; k += 32)
    for (int j = 0; j < 8; ++j) {
      xp[k + j] = x[k + j];
      xp[k + 8 + j] = x[k + 16 + j];
      xp[k + 16 + j] = x[k + 8 + j];
      xp[k + 24 + j] = x[k + 24 + j];
    }
}

bool int4_uses_permuted_x(const PackedWeight& w, bool simd) {
  return simd && cpu_has_avx512() && w.block_size % 32 == 0 && w.K % 32 == 0;
}

void gemv_int4(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd, const float* xp) {
  const int64_t K = w.K, N = w.N, bs = w.block_size, nb = w.n_blocks;
  const bool has_zero = !w.zeros.empty();
  if (xp) {  // int4_uses_permuted_x
    auto finish = [&](int64_t m, int64_t n, float s) {
      const float* sc = w.scales.data() + n * nb;
      const float* zp = has_zero ? w.zeros.data() + n * nb : nullptr;
      const float* xs = xsum + m * nb;
      for (int64_t b = 0; b < nb; ++b) s += sc[b] * ((zp ? zp[b] : 0.f) - 8.f) * xs[b];
      y[m * N + n] = s + (bias ? bias[n] : 0.f);
    };
    int64_t n = n0;
    float s[4];
    for (; n + 4 <= n1; n += 4)
      for (int64_t m = 0; m < M; ++m) {
        rows_avx512<4>(xp + m * K, w.q4.data() + n * w.row_bytes, w.row_bytes, K, bs, nb, w.scales.data() + n * nb, s);
        for (int r = 0; r < 4; ++r) finish(m, n + r, s[r]);
      }
    for (; n < n1; ++n)
      for (int64_t m = 0; m < M; ++m) {
        rows_avx512<1>(xp + m * K, w.q4.data() + n * w.row_bytes, w.row_bytes, K, bs, nb, w.scales.data() + n * nb, s);
        finish(m, n, s[0]);
      }
    return;
  }
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
