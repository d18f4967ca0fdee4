// Integer-dot GEMV for int8 and int4 weights (AVX-512 VNNI). Converting every weight byte
// to fp32 for an FMA costs more instructions than memory bandwidth allows; vpdpbusd
// multiplies 64 weight bytes with 64 activation bytes and sums them in fours into 16 int32
// lanes in one instruction. The activations are quantized once per GEMV to 16 bits per
// group of 32 inputs, split into a high and a low signed byte (x16 = 256 * hi + lo), so a
// 64-input chunk of a row costs two vpdpbusd and the result is that of 16-bit activations
// (relative error 2^-16 of the group's largest value; the device's W8A16 is no finer).
//
// vpdpbusd takes unsigned bytes on one side: weights are used as u = q + offset (int8:
// q ^ 0x80 = q + 128; int4: the stored nibble, q + 8). Each lane's accumulator starts at
// -offset * (its four activations' sum), so the int32 lanes hold sum(q * x16) exactly.
// GCC 12 flags the "undefined" source of several AVX-512 intrinsics used here (conversions,
// inserts) as uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "gemv.h"
#include "hsum.h"

#define NF_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace nf::kernels::detail {
namespace {

constexpr int64_t kGroup = kX16Group;   // inputs sharing one activation scale
constexpr int64_t kChunk = 64;          // inputs per vpdpbusd
constexpr int64_t kAheadBytes = 8192;   // prefetch distance in each streamed row

// 64 weight bytes of row `n`, chunk `c`, as unsigned u = q + offset. int4 expands the 32
// packed bytes as their low nibbles, then their high nibbles: inputs 0-7, 16-23, 32-39,
// 48-55, then 8-15, 24-31, 40-47, 56-63 of the chunk (see the packing in linear.h).
template <bool kInt4>
NF_VNNI inline __m512i weight_bytes(const PackedWeight& w, int64_t n, int64_t c) {
  if constexpr (kInt4) {
    const uint8_t* p = w.q4.data() + n * w.row_bytes + c * 32;
    _mm_prefetch(reinterpret_cast<const char*>(p + kAheadBytes), _MM_HINT_T0);
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i both = _mm512_mask_blend_epi64(0xf0, v, _mm512_srli_epi16(v, 4));
    return _mm512_and_si512(both, _mm512_set1_epi8(15));
  } else {
    const int8_t* p = w.q8.data() + n * w.K + c * kChunk;
    _mm_prefetch(reinterpret_cast<const char*>(p + kAheadBytes), _MM_HINT_T0);
    return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
}

// One chunk of the quantized x, as the kernel reads it.
struct Chunk {
  __m512i hi, lo, init_hi, init_lo;
  __m512 scale;
};
NF_VNNI inline Chunk load_chunk(const DotActivation& a, int64_t m, int64_t c) {
  const int64_t i = m * a.chunks + c;
  return {_mm512_loadu_si512(a.hi.data() + i * kChunk), _mm512_loadu_si512(a.lo.data() + i * kChunk),
          _mm512_loadu_si512(a.init_hi.data() + i * 16), _mm512_loadu_si512(a.init_lo.data() + i * 16),
          _mm512_loadu_ps(a.lane_scale.data() + i * 16)};
}

// Per int32 lane: sum of its four q * x16, exact (|lane| < 2^25, so the fp32 convert of
// the caller rounds it by at most one part in 2^24).
NF_VNNI inline __m512i chunk_dot(__m512i u, const Chunk& x) {
  const __m512i h = _mm512_dpbusd_epi32(x.init_hi, u, x.hi);
  return _mm512_add_epi32(_mm512_slli_epi32(h, 8), _mm512_dpbusd_epi32(x.init_lo, u, x.lo));
}

// R consecutive rows from n against row m of the quantized x: sum_k q[k] * x[k] * scale of
// k's block, without zero points. Blocks are whole chunks, or (kBlock32) each chunk holds
// two 32-input blocks: a lane's block is its group.
template <int R, bool kInt4, bool kBlock32>
NF_VNNI void rows_dot(const DotActivation& a, int64_t m, const PackedWeight& w, int64_t n, float* out) {
  const int64_t chunks = a.chunks, nb = w.n_blocks;
  const float* sc = w.scales.data() + n * nb;
  __m512 tot[R];
  for (int r = 0; r < R; ++r) tot[r] = _mm512_setzero_ps();
  if constexpr (kBlock32) {
    const __m512i block_of_lane = _mm512_maskz_mov_epi32(a.odd_lanes, _mm512_set1_epi32(1));
    for (int64_t c = 0; c < chunks; ++c) {
      const Chunk x = load_chunk(a, m, c);
      for (int r = 0; r < R; ++r) {
        const __m512i dot = chunk_dot(weight_bytes<kInt4>(w, n + r, c), x);
        const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(sc + r * nb + 2 * c)));
        const __m512 block_scale = _mm512_permutexvar_ps(block_of_lane, _mm512_castps128_ps512(two));
        tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(x.scale, block_scale), tot[r]);
      }
    }
  } else {
    const int64_t per_block = w.block_size / kChunk;
    for (int64_t c = 0, b = 0, left = per_block; c < chunks; ++c) {
      const Chunk x = load_chunk(a, m, c);
      for (int r = 0; r < R; ++r) {
        const __m512 scale = _mm512_mul_ps(x.scale, _mm512_set1_ps(sc[r * nb + b]));
        tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(chunk_dot(weight_bytes<kInt4>(w, n + r, c), x)), scale, tot[r]);
      }
      if (--left == 0) ++b, left = per_block;
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(tot[r]);
}

template <bool kInt4, bool kBlock32>
void gemv_dot_rows(const DotActivation& a, int64_t M, const PackedWeight& w, const float* bias, float* y, int64_t n0,
                   int64_t n1) {
  gemv_row_tiles(M, w, a.block_sum.data(), bias, y, n0, n1, [&](auto rows, int64_t m, int64_t n, float* out) {
    rows_dot<decltype(rows)::value, kInt4, kBlock32>(a, m, w, n, out);
  });
}

// Stores 16 activation bytes (inputs 16 j .. 16 j + 15 of a chunk) where the kernel reads them.
NF_VNNI inline void store16(__m128i v, bool int4, int64_t j, int8_t* chunk) {
  if (!int4) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(chunk + 16 * j), v);
    return;
  }
  _mm_storel_epi64(reinterpret_cast<__m128i*>(chunk + 8 * j), v);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(chunk + 32 + 8 * j), _mm_unpackhi_epi64(v, v));
}

}  // namespace

bool cpu_has_avx512_vnni() {
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  return has;
}

bool uses_integer_dot(const PackedWeight& w, bool simd) {
  if (w.format != WeightFormat::Int8 && w.format != WeightFormat::Int4) return false;
  return simd && simd_level() == Simd::kAvx512 && cpu_has_avx512_vnni() && w.K % kChunk == 0 &&
         (w.block_size % kChunk == 0 || w.block_size == kGroup);
}

NF_VNNI void quantize_activation(const float* x, int64_t M, const PackedWeight& w, DotActivation& a) {
  const int64_t K = w.K, nb = w.n_blocks, groups_per_block = w.block_size / kGroup;
  const bool int4 = w.format == WeightFormat::Int4;
  a.chunks = K / kChunk;
  a.hi.resize(static_cast<size_t>(M * K));
  a.lo.resize(a.hi.size());
  a.lane_scale.resize(static_cast<size_t>(M * a.chunks * 16));
  a.init_hi.resize(a.lane_scale.size());
  a.init_lo.resize(a.lane_scale.size());
  a.block_sum.assign(static_cast<size_t>(M * nb), 0.f);
  // Lanes of a chunk that sum inputs of its second group (see weight_bytes for int4's order).
  a.odd_lanes = int4 ? 0xf0f0 : 0xff00;
  const __m512i b128 = _mm512_set1_epi32(128), b255 = _mm512_set1_epi32(255), ones = _mm512_set1_epi8(1);
  const __m512i minus_offset = _mm512_set1_epi32(int4 ? -8 : -128);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < a.chunks; ++c) {
      const int64_t i = m * a.chunks + c;
      int8_t* hi = a.hi.data() + i * kChunk;
      int8_t* lo = a.lo.data() + i * kChunk;
      float scale[2];
      for (int64_t g = 0; g < 2; ++g) {
        const float* xg = x + m * K + c * kChunk + g * kGroup;
        const __m512 x0 = _mm512_loadu_ps(xg), x1 = _mm512_loadu_ps(xg + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        scale[g] = amax / kX16Max;
        const __m512 inv = _mm512_set1_ps(amax > 0 ? kX16Max / amax : 0.f);
        __m512i sum = _mm512_setzero_si512();
        for (int64_t h = 0; h < 2; ++h) {
          // Rounds to nearest even, as nearbyint; |x * inv| <= kX16Max by construction.
          const __m512i x16 = _mm512_cvtps_epi32(_mm512_mul_ps(h ? x1 : x0, inv));
          const __m512i l = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(x16, b128), b255), b128);
          store16(_mm512_cvtepi32_epi8(l), int4, 2 * g + h, lo);
          store16(_mm512_cvtepi32_epi8(_mm512_srai_epi32(_mm512_sub_epi32(x16, l), 8)), int4, 2 * g + h, hi);
          sum = _mm512_add_epi32(sum, x16);
        }
        a.block_sum[static_cast<size_t>(m * nb + (2 * c + g) / groups_per_block)] +=
            scale[g] * static_cast<float>(_mm512_reduce_add_epi32(sum));
      }
      _mm512_storeu_ps(a.lane_scale.data() + i * 16,
                       _mm512_mask_blend_ps(a.odd_lanes, _mm512_set1_ps(scale[0]), _mm512_set1_ps(scale[1])));
      const __m512i sum_hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(hi));
      const __m512i sum_lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(lo));
      _mm512_storeu_si512(a.init_hi.data() + i * 16, _mm512_mullo_epi32(sum_hi, minus_offset));
      _mm512_storeu_si512(a.init_lo.data() + i * 16, _mm512_mullo_epi32(sum_lo, minus_offset));
    }
}

void gemv_integer_dot(const DotActivation& a, int64_t M, const PackedWeight& w, const float* bias, float* y,
                      int64_t n0, int64_t n1) {
  const bool int4 = w.format == WeightFormat::Int4, block32 = w.block_size == kGroup;
  if (int4 && block32) gemv_dot_rows<true, true>(a, M, w, bias, y, n0, n1);
  else if (int4) gemv_dot_rows<true, false>(a, M, w, bias, y, n0, n1);
  else if (block32) gemv_dot_rows<false, true>(a, M, w, bias, y, n0, n1);
  else gemv_dot_rows<false, false>(a, M, w, bias, y, n0, n1);
}

}  // namespace nf::kernels::detail
