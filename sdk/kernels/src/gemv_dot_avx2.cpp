// Integer-dot GEMV for int8 and int4 weights on AVX2 CPUs without VNNI. Converting each
// weight to fp32 for an FMA (8 products an instruction) leaves these kernels compute-bound
// far below the memory bound; vpmaddwd multiplies 16 int16 pairs and sums them in twos, so
// a 32-input group of a row costs two vpmaddwd and one fp32 conversion. x is quantized
// once per GEMV to 16 bits per group of 32 inputs, the rounding of gemv_dot.cpp (relative
// error 2^-16 of the group's largest value); the int32 sums of q * x16 are exact.
//
// int4 rows give their 32 nibbles of a group as low nibbles (inputs 0-7, 16-23), then high
// nibbles (8-15, 24-31) (packing in linear.h); x16 is stored in that order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "gemv.h"
#include "hsum.h"

#define NF_AVX2 __attribute__((target("avx2,fma")))

namespace nf::kernels::detail {
namespace {

constexpr int64_t kGroup = kX16Group;  // inputs sharing one activation scale
constexpr int64_t kAheadBytes = 8192;  // prefetch distance in each streamed row

// Group g of row n as two vectors of 16 int16 weights, in x16's order.
template <bool kInt4>
NF_AVX2 inline void group_weights(const PackedWeight& w, int64_t n, int64_t g, __m256i& w0, __m256i& w1) {
  if constexpr (kInt4) {
    const uint8_t* p = w.q4.data() + n * w.row_bytes + g * 16;
    if (g % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + kAheadBytes), _MM_HINT_T0);  // once a line
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), nib = _mm_set1_epi8(15);
    const __m256i eight = _mm256_set1_epi16(8);  // nibbles hold q + 8
    w0 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(v, nib)), eight);
    w1 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), nib)), eight);
  } else {
    const int8_t* p = w.q8.data() + n * w.K + g * kGroup;
    if (g % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + kAheadBytes), _MM_HINT_T0);  // once a line
    w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
}

// R consecutive rows from n against row m of x16: sum_k q[k] * x[k] * scale of k's block,
// without zero points.
template <int R, bool kInt4>
NF_AVX2 void rows_dot(const X16Activation& a, int64_t m, const PackedWeight& w, int64_t n, float* out) {
  const int64_t groups = w.K / kGroup, per_block = w.block_size / kGroup, nb = w.n_blocks;
  const int16_t* x = a.x16.data() + m * w.K;
  const float* xs = a.group_scale.data() + m * groups;
  const float* sc = w.scales.data() + n * nb;
  __m256 tot[R], blk[R];
  for (int r = 0; r < R; ++r) tot[r] = blk[r] = _mm256_setzero_ps();
  int64_t b = 0, left = per_block;
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i x0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + g * kGroup));
    const __m256i x1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + g * kGroup + 16));
    const __m256 scale = _mm256_set1_ps(xs[g]);
    for (int r = 0; r < R; ++r) {
      __m256i w0, w1;
      group_weights<kInt4>(w, n + r, g, w0, w1);
      const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
      blk[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, blk[r]);
    }
    if (--left == 0) {  // block done: its weight scale
      for (int r = 0; r < R; ++r) {
        tot[r] = _mm256_fmadd_ps(blk[r], _mm256_set1_ps(sc[r * nb + b]), tot[r]);
        blk[r] = _mm256_setzero_ps();
      }
      ++b, left = per_block;
    }
  }
  if (left != per_block)  // a last block shorter than the others (K not a multiple of it)
    for (int r = 0; r < R; ++r) tot[r] = _mm256_fmadd_ps(blk[r], _mm256_set1_ps(sc[r * nb + b]), tot[r]);
  for (int r = 0; r < R; ++r) out[r] = hsum(tot[r]);
}

template <bool kInt4>
void gemv_rows(const X16Activation& a, int64_t M, const PackedWeight& w, const float* bias, float* y, int64_t n0,
               int64_t n1) {
  gemv_row_tiles(M, w, a.block_sum.data(), bias, y, n0, n1, [&](auto rows, int64_t m, int64_t n, float* out) {
    rows_dot<decltype(rows)::value, kInt4>(a, m, w, n, out);
  });
}

}  // namespace

bool uses_integer_dot_avx2(const PackedWeight& w, bool simd) {
  if (w.format != WeightFormat::Int8 && w.format != WeightFormat::Int4) return false;
  return simd && w.K % kGroup == 0 && w.block_size % kGroup == 0;
}

void quantize_activation_x16(const float* x, int64_t M, const PackedWeight& w, X16Activation& a) {
  const int64_t K = w.K, groups = K / kGroup, nb = w.n_blocks;
  const bool int4 = w.format == WeightFormat::Int4;
  a.x16.resize(static_cast<size_t>(M * K));
  a.group_scale.resize(static_cast<size_t>(M * groups));
  a.block_sum.assign(static_cast<size_t>(M * nb), 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + m * K + g * kGroup;
      float amax = 0;
      for (int64_t i = 0; i < kGroup; ++i) amax = std::max(amax, std::fabs(xg[i]));
      const float scale = amax / kX16Max, inv = amax > 0 ? kX16Max / amax : 0.f;
      int16_t* out = a.x16.data() + m * K + g * kGroup;
      int32_t sum = 0;
      for (int64_t i = 0; i < kGroup; ++i) {
        const int16_t q = static_cast<int16_t>(std::nearbyint(xg[i] * inv));  // |q| <= kX16Max
        // int4: position of input i among the group's low nibbles (0-7, 16-23), then high ones.
        const int64_t at = !int4 ? i : (i % 16 < 8 ? (i / 16) * 8 + i % 8 : 16 + (i / 16) * 8 + i % 8);
        out[at] = q;
        sum += q;
      }
      a.group_scale[static_cast<size_t>(m * groups + g)] = scale;
      a.block_sum[static_cast<size_t>(m * nb + g * kGroup / w.block_size)] += scale * static_cast<float>(sum);
    }
}

void gemv_integer_dot_avx2(const X16Activation& a, int64_t M, const PackedWeight& w, const float* bias, float* y,
                           int64_t n0, int64_t n1) {
  if (w.format == WeightFormat::Int4) gemv_rows<true>(a, M, w, bias, y, n0, n1);
  else gemv_rows<false>(a, M, w, bias, y, n0, n1);
}

}  // namespace nf::kernels::detail
