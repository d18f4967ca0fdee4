// Internal: the streaming GEMV kernels behind linear(). Each computes y[m, n] for all
// m < M and n in [n0, n1) and adds bias when given. `xsum` holds per-block sums of x
// ([M, n_blocks]) when the weight has zeros.
#pragma once

#include <functional>
#include <type_traits>

#include "npuforge/kernels/linear.h"

namespace nf::kernels::detail {

bool cpu_has_avx512();       // avx512f + bw + vl
bool cpu_has_avx512_vnni();  // and avx512vnni

void gemv_f32(const float* x, int64_t M, const PackedWeight& w, const float* bias, float* y, int64_t n0, int64_t n1,
              bool simd);
void gemv_int8(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd);
void gemv_int4(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd);

// Runs a dot kernel over output rows [n0, n1) four at a time (then one at a time), for each
// row m of x: y = dot + the zero points' share (scale * zero * x's block sum) + bias.
// dot(rows, m, n, out) writes `rows` (std::integral_constant 4 or 1) results from row n.
template <class Dot>
void gemv_row_tiles(int64_t M, const PackedWeight& w, const float* block_sum, const float* bias, float* y,
                    int64_t n0, int64_t n1, Dot dot) {
  const int64_t N = w.N, nb = w.n_blocks;
  auto finish = [&](int64_t m, int64_t n, float s) {
    if (!w.zeros.empty()) {
      const float* sc = w.scales.data() + n * nb;
      const float* zp = w.zeros.data() + n * nb;
      const float* xs = block_sum + m * nb;
      for (int64_t b = 0; b < nb; ++b) s += sc[b] * zp[b] * xs[b];
    }
    y[m * N + n] = s + (bias ? bias[n] : 0.f);
  };
  int64_t n = n0;
  float s[4];
  for (; n + 4 <= n1; n += 4)
    for (int64_t m = 0; m < M; ++m) {
      dot(std::integral_constant<int, 4>(), m, n, s);
      for (int r = 0; r < 4; ++r) finish(m, n + r, s[r]);
    }
  for (; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      dot(std::integral_constant<int, 1>(), m, n, s);
      finish(m, n, s[0]);
    }
}

// Both integer-dot kernels take x rounded alike: 16-bit codes x16 per group of 32 inputs,
// |x16| <= kX16Max (the largest value whose high and low bytes are both signed bytes).
constexpr int64_t kX16Group = 32;
constexpr float kX16Max = 127 * 256 + 127;

// The integer-dot kernels (gemv_dot.cpp): int8 / int4 weights against x quantized to 16
// bits per group of 32 inputs, when the CPU has AVX-512 VNNI, K is a multiple of 64 and
// the weight's blocks are 32 inputs or whole multiples of 64.
bool uses_integer_dot(const PackedWeight& w, bool simd);
// x quantized for one weight's GEMV: x16 = 256 * hi + lo per input, in the order the
// kernel reads the weight's bytes (int4: low nibbles, then high nibbles, of each 64 inputs).
struct DotActivation {
  int64_t chunks = 0;                  // K / 64
  aligned_vector<int8_t> hi, lo;       // [M, K]
  aligned_vector<float> lane_scale;    // [M, chunks, 16]: scale of the group each int32 lane sums
  aligned_vector<int32_t> init_hi, init_lo;  // [M, chunks, 16]: -offset * sum of each lane's 4 bytes
  std::vector<float> block_sum;        // [M, n_blocks]: sum of the quantized x over each block
  uint16_t odd_lanes = 0;              // lanes of a chunk summing its second group of 32
};
void quantize_activation(const float* x, int64_t M, const PackedWeight& w, DotActivation& a);
void gemv_integer_dot(const DotActivation& a, int64_t M, const PackedWeight& w, const float* bias, float* y,
                      int64_t n0, int64_t n1);

// The AVX2 integer-dot kernels (gemv_dot_avx2.cpp), for CPUs without VNNI: int8 / int4
// weights against x quantized as above, K and the weight's blocks multiples of 32.
bool uses_integer_dot_avx2(const PackedWeight& w, bool simd);
struct X16Activation {
  aligned_vector<int16_t> x16;   // [M, K], int4: each group of 32 in the kernel's order
  std::vector<float> group_scale;  // [M, K / 32]
  std::vector<float> block_sum;    // [M, n_blocks]: sum of the quantized x over each block
};
void quantize_activation_x16(const float* x, int64_t M, const PackedWeight& w, X16Activation& a);
void gemv_integer_dot_avx2(const X16Activation& a, int64_t M, const PackedWeight& w, const float* bias, float* y,
                           int64_t n0, int64_t n1);

// The prefill GEMM (gemm_nk.cpp): y[m, n] = dot(x[m, :], w[n, :]) for x [M, K] and w
// [N, K] rows, y's rows ldy apart; AVX-512 or AVX2 tiles, threads over w's rows.
enum class GemmIsa { kNone, kAvx2, kAvx512 };
GemmIsa gemm_nk_isa(bool simd);  // kNone: use OpenBLAS
// w's rows: stored ([N, K] at `rows`), or made a few at a time as the GEMM reaches them:
// fill(n, count, k0, k1, out) writes rows [n, n + count), inputs [k0, k1), to out [count, k1 - k0].
struct GemmRows {
  const float* rows = nullptr;
  std::function<void(int64_t n, int64_t count, int64_t k0, int64_t k1, float* out)> fill;
};
void gemm_nk(GemmIsa isa, const float* x, int64_t M, int64_t K, const GemmRows& w, int64_t N, float* y, int64_t ldy,
             int threads);

}  // namespace nf::kernels::detail
