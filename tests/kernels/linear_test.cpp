// Packed linear weights: fp32 / int8 / int4 GEMV and the prefill GEMM path against fp32
// math over the dequantized weights, on both the AVX2 and the scalar kernels.
#include <npuforge/kernels/linear.h>

#include <cmath>

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

class Linear : public ::testing::TestWithParam<bool> {  // param: force scalar kernels
 protected:
  void SetUp() override { force_scalar(GetParam()); }
  void TearDown() override { force_scalar(false); }

  // Runs the packed weight on x and checks against fp32 math over dequantize(p).
  void check(const PackedWeight& p, int64_t M, uint32_t seed, int threads) {
    auto x = randn(M * p.K, seed);
    auto bias = randn(p.N, seed + 1);
    std::vector<float> y(M * p.N);
    linear(x.data(), M, p, bias.data(), y.data(), threads);
    EXPECT_TRUE(near(y, reference(x, M, dequantize(p), p.K, p.N, bias.data()), 1e-4f, 1e-4f))
        << "M=" << M << " K=" << p.K << " N=" << p.N << " threads=" << threads;
  }
};

// Includes N not a multiple of the 4-row kernels and K with / without a 16- or 32-aligned tail.
const Case kCases[] = {{1, 64, 48}, {1, 100, 37}, {3, 96, 17}, {1, 1000, 65}, {7, 128, 70}, {33, 160, 300},
                       {1, 768, 67}, {4, 520, 33}, {2, 1030, 9}};

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

TEST_P(Linear, Int8StreamsQuarterOfFp32Bytes) {
  auto w = randn(256 * 256, 15);
  size_t f = pack_f32(w.data(), 256, 256).weight_bytes(), q8 = quantize_int8(w.data(), 256, 256).weight_bytes(),
         q4 = quantize_int4(w.data(), 256, 256, 32).weight_bytes();
  EXPECT_LT(q8 * 3, f);
  EXPECT_LT(q4 * 5, f);
}

INSTANTIATE_TEST_SUITE_P(Kernels, Linear, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Scalar" : "Simd"; });
