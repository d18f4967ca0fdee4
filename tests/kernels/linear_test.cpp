// Packed linear weights: fp32 / int8 / int4 GEMV and the prefill GEMM path against fp32
// math over the dequantized weights, on both the AVX2 and the scalar kernels.
#include <npuforge/kernels/linear.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "test_util.h"

using namespace nf::kernels;
using namespace nf::kernels::test;

namespace {

std::vector<float> reference(const std::vector<float>& x, int64_t M, const std::vector<float>& w, int64_t K, int64_t N,
                             const float* bias) {
  std::vector<float> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * w[k * N + n];
      y[m * N + n] = float(s);
    }
  return y;
}

struct Case {
  int64_t M, K, N;
};

class Linear : public ::testing::TestWithParam<Simd> {  // param: the widest kernels allowed
 protected:
  void SetUp() override { limit_simd(GetParam()); }
  void TearDown() override { limit_simd(Simd::kAvx512); }

  // Runs the packed weight on x and checks against fp32 math over dequantize(p). The
  // integer-dot kernel rounds x to 16 bits per group of 32 inputs: each output may then
  // also be off by sum_k |w[k]| * (half a step of k's group), and by no more.
  void check(const PackedWeight& p, int64_t M, uint32_t seed, int threads) {
    auto x = randn(M * p.K, seed);
    auto bias = randn(p.N, seed + 1);
    std::vector<float> y(M * p.N);
    linear(x.data(), M, p, bias.data(), y.data(), threads);
    const std::vector<float> w = dequantize(p), want = reference(x, M, w, p.K, p.N, bias.data());
    const bool rounds_x = M <= 4 && std::string(gemv_kernel(p)).find("integer dot") == 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < p.N; ++n) {
        double bound = 1e-4 + 1e-4 * std::fabs(want[m * p.N + n]);
        for (int64_t k = 0; rounds_x && k < p.K; ++k) {
          float amax = 0;
          for (int64_t j = k / 32 * 32; j < k / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(x[m * p.K + j]));
          bound += std::fabs(w[k * p.N + n]) * 0.5 * amax / 32639;
        }
        ASSERT_LE(std::fabs(y[m * p.N + n] - want[m * p.N + n]), bound)
            << "m=" << m << " n=" << n << " M=" << M << " K=" << p.K << " N=" << p.N << " threads=" << threads
            << " kernel " << gemv_kernel(p);
      }
  }
};

// Includes N not a multiple of the 4-row kernels, K with / without a 16- or 32-aligned tail,
// and K a multiple of 32 or 64 with M <= 4 (the integer-dot kernels' shapes).
// Prefill (M > 4): {70, 1100, 23} crosses the GEMM's 64-row blocks of x and 1024-input chunks
// of K, with a tail of rows, of w's 6- and 3-row tiles and of the vector width.
const Case kCases[] = {{1, 64, 48},  {1, 100, 37}, {3, 96, 17}, {1, 1000, 65}, {7, 128, 70}, {33, 160, 300},
                       {1, 768, 67}, {4, 520, 33}, {2, 1030, 9}, {2, 256, 41}, {4, 192, 13}, {70, 1100, 23},
                       {5, 7, 5}};

}  // namespace

TEST_P(Linear, F32MatchesNaive) {
  for (auto [M, K, N] : kCases) {
    auto w = randn(K * N, 11);
    PackedWeight p = pack_f32(w.data(), K, N);
    EXPECT_EQ(dequantize(p), w);
    for (int t : {1, 2}) check(p, M, 5, t);
    // The [N, K] layout packs to the same rows.
    std::vector<float> wt(K * N);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) wt[n * K + k] = w[k * N + n];
    EXPECT_EQ(dequantize(pack_f32(wt.data(), K, N, true)), w);
  }
}

// One-pass sessions use fp32 weights where they are stored: [K, N] (view_f32_kn) and [N, K]
// with release_rows, read in row blocks that are each handed back exactly once.
TEST_P(Linear, F32ViewsInPlace) {
  for (auto [M, K, N] : kCases) {
    auto w = randn(K * N, 13);
    PackedWeight kn = view_f32_kn(w.data(), K, N, nullptr);
    EXPECT_EQ(dequantize(kn), w);
    check(kn, M, 7, 2);
  }
  // A tall [N, K] table, 9000 rows of 1024 floats: a 32 MiB block of 8192 rows, then the rest.
  const int64_t K = 1024, N = 9000, M = 5;
  auto w = randn(K * N, 17);
  std::vector<float> wt(K * N);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) wt[n * K + k] = w[k * N + n];
  PackedWeight nk = view_f32_nk(wt.data(), K, N, nullptr);
  std::vector<std::pair<size_t, size_t>> released;
  nk.release_rows = [&](size_t offset, size_t bytes) { released.push_back({offset, bytes}); };
  check(nk, M, 9, 2);
  ASSERT_EQ(released.size(), 2u);
  size_t next = 0;
  for (auto [offset, bytes] : released) {
    EXPECT_EQ(offset, next);
    next = offset + bytes;
  }
  EXPECT_EQ(next, static_cast<size_t>(K * N) * 4);
}

// A streamed [K, N] weight larger than four 64 MiB blocks (an untied LM head) is multiplied by
// column blocks copied out of it, each group of rows handed back as it is read: the same bits as
// one sgemm over the whole weight, and after each block the whole weight is handed back.
TEST(LinearStreaming, WideKnViewByColumnBlocksEqualsOneGemm) {
  const int64_t K = 256, N = 300000, M = 3;  // 307 MB: five blocks of 65536 columns
  auto w = randn(K * N, 19);
  auto x = randn(M * K, 20);
  std::vector<float> expect(M * N), got(M * N);
  linear(x.data(), M, view_f32_kn(w.data(), K, N, nullptr), nullptr, expect.data(), 2);
  PackedWeight streamed = view_f32_kn(w.data(), K, N, nullptr);
  const size_t row_bytes = static_cast<size_t>(N) * 4, all = row_bytes * K;
  std::vector<int> times_released(K, 0);
  int whole = 0;
  streamed.release_rows = [&](size_t offset, size_t bytes) {
    ASSERT_LE(offset + bytes, all);
    if (offset == 0 && bytes == all) return void(++whole);
    ASSERT_EQ(offset % row_bytes, 0u);
    for (size_t k = offset / row_bytes; k < (offset + bytes) / row_bytes; ++k) ++times_released[k];
  };
  linear(x.data(), M, streamed, nullptr, got.data(), 2);
  EXPECT_TRUE(got == expect) << "the streamed product differs from one sgemm";
  EXPECT_EQ(whole, 5);
  for (int64_t k = 0; k < K; ++k) ASSERT_EQ(times_released[k], 5) << "row " << k;
}

TEST_P(Linear, Int8PerChannelAndBlockwise) {
  for (auto [M, K, N] : kCases) {
    auto w = randn(K * N, 12);
    for (int64_t bs : {int64_t(0), int64_t(32)}) {
      PackedWeight p = quantize_int8(w.data(), K, N, bs);
      EXPECT_EQ(p.format, WeightFormat::Int8);
      // Quantization error is bounded by half a step.
      auto dq = dequantize(p);
      for (int64_t i = 0; i < K * N; ++i) {
        int64_t n = i % N, k = i / N;
        EXPECT_LE(std::fabs(dq[i] - w[i]), 0.5f * p.scales[n * p.n_blocks + k / p.block_size] + 1e-6f);
      }
      for (int t : {1, 2}) check(p, M, 6, t);
    }
  }
}

TEST_P(Linear, Int4Blockwise) {
  for (auto [M, K, N] : kCases)
    for (int64_t bs : {16, 32, 64}) {
      auto w = randn(K * N, 13);
      PackedWeight p = quantize_int4(w.data(), K, N, bs);
      EXPECT_EQ(p.format, WeightFormat::Int4);
      EXPECT_EQ(p.n_blocks, (K + std::min(bs, K) - 1) / std::min(bs, K));
      for (int t : {1, 2}) check(p, M, 7, t);
    }
}

TEST_P(Linear, GivenScalesAndZerosAndNkLayout) {
  const int64_t K = 96, N = 20, bs = 32, nb = 3;
  auto w = randn(K * N, 14);
  std::vector<float> scales(N * nb), zeros(N * nb);
  for (int64_t i = 0; i < N * nb; ++i) scales[i] = 0.05f + 0.01f * float(i % 7), zeros[i] = float(i % 5) - 2.f;
  for (int bits : {4, 8}) {
    PackedWeight p = quantize_with(w.data(), K, N, bits, bs, scales.data(), zeros.data());
    EXPECT_FALSE(p.zeros.empty());
    check(p, 1, 8, 2);
    check(p, 9, 8, 2);
    // The same matrix given as [N, K] packs identically.
    std::vector<float> wt(K * N);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) wt[n * K + k] = w[k * N + n];
    PackedWeight q = quantize_with(wt.data(), K, N, bits, bs, scales.data(), zeros.data(), true);
    EXPECT_EQ(dequantize(p), dequantize(q));
  }
}

// int8 and int4 GEMVs with K and blocks multiples of 64 (AVX-512 VNNI) or of 32 (AVX2) run
// on integer dot products; activation values spanning 8 decades inside one group keep the
// 16-bit rounding bound of check().
TEST_P(Linear, IntegerDotKernelTakesDecodeShapes) {
  if (simd_level() == Simd::kScalar) GTEST_SKIP() << "scalar forced, or no AVX2 here";
  const char* dot = simd_level() == Simd::kAvx512 && __builtin_cpu_supports("avx512vnni")
                        ? "integer dot (AVX-512 VNNI)"
                        : "integer dot (AVX2)";
  const int64_t K = 512, N = 36;
  auto w = randn(K * N, 16);
  std::vector<PackedWeight> packed = {quantize_int8(w.data(), K, N, 0), quantize_int8(w.data(), K, N, 64),
                                      quantize_int8(w.data(), K, N, 32), quantize_int4(w.data(), K, N, 32),
                                      quantize_int4(w.data(), K, N, 128)};
  std::vector<float> scales(N * 8, 0.01f), zeros(N * 8);
  for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = float(i % 7) - 3.f;
  packed.push_back(quantize_with(w.data(), K, N, 4, 64, scales.data(), zeros.data()));
  packed.push_back(quantize_with(w.data(), K, N, 8, K, scales.data(), zeros.data()));  // per channel, zeros
  for (const PackedWeight& p : packed) {
    EXPECT_STREQ(gemv_kernel(p), dot) << "block " << p.block_size;
    for (int64_t M : {1, 3}) check(p, M, 17, 2);
  }
  EXPECT_STREQ(gemv_kernel(quantize_int4(w.data(), K, N, 16)), "AVX2");  // 16-input blocks: fp32 kernel
  EXPECT_STREQ(gemv_kernel(quantize_int8(w.data(), 80, 4)), "AVX2");      // K not a multiple of 32
  // One group holding 1e4 and 1e-4: the small inputs round to 0, within the bound.
  PackedWeight p = quantize_int8(w.data(), K, N, 0);
  std::vector<float> x(K, 1e-4f), y(N);
  x[5] = 1e4f;
  linear(x.data(), 1, p, nullptr, y.data(), 1);
  const std::vector<float> want = reference(x, 1, dequantize(p), K, N, nullptr);
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(y[n], want[n], 1e-5 * std::fabs(want[n]) + 0.05) << n;  // 511 * 1e-4 * mean abs(w) < 0.05
}

TEST_P(Linear, Int8StreamsQuarterOfFp32Bytes) {
  auto w = randn(256 * 256, 15);
  size_t f = pack_f32(w.data(), 256, 256).weight_bytes(), q8 = quantize_int8(w.data(), 256, 256).weight_bytes(),
         q4 = quantize_int4(w.data(), 256, 256, 32).weight_bytes();
  EXPECT_LT(q8 * 3, f);
  EXPECT_LT(q4 * 5, f);
}

// On a CPU without AVX-512 the Avx512 cases run the AVX2 kernels again.
INSTANTIATE_TEST_SUITE_P(Kernels, Linear, ::testing::Values(Simd::kAvx512, Simd::kAvx2, Simd::kScalar),
                         [](const ::testing::TestParamInfo<Simd>& i) { return std::string(simd_name(i.param)); });
