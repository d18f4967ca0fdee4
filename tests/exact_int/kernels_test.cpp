// The layout-independent kernels (npuforge/kernels/exact.h): a row's result does not depend
// on how many rows share the call, on the order of the reduction axis, or on masked terms;
// the values agree with the float kernels; SIMD and scalar paths give the same bits.
#include <gtest/gtest.h>
#include <npuforge/kernels/exact.h>
#include <npuforge/kernels/linear.h>
#include <npuforge/kernels/matmul.h>
#include <npuforge/kernels/reduce.h>

#include <cmath>
#include <iterator>
#include <cstring>
#include <numeric>
#include <random>

namespace k = nf::kernels;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Values rounded onto a grid of step `scale` (codes in [-qmax, qmax]).
std::vector<float> on_grid(std::vector<float> v, float scale, float qmax) {
  for (float& x : v) x = std::clamp(std::nearbyint(x / scale), -qmax, qmax) * scale;
  return v;
}

std::vector<float> values(const k::Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol * (1 + std::fabs(b[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

// An integer linear weight [K, N]: int8 per channel with zero points, or int4 in blocks of 32.
k::PackedWeight weight(int bits, int64_t K, int64_t N) {
  std::vector<float> w = randn(static_cast<size_t>(K * N), 7, 0.05f);
  const int64_t block = bits == 4 ? 32 : K, nb = (K + block - 1) / block;
  std::vector<float> scales(static_cast<size_t>(N * nb)), zeros(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = bits == 4 ? 0.02f : 0.001f * static_cast<float>(1 + i % 3);
    zeros[i] = bits == 4 ? 0.f : static_cast<float>(static_cast<int>(i % 5) - 2);
  }
  return k::quantize_with(w.data(), K, N, bits, block, scales.data(), zeros.data());
}

}  // namespace

class LinearExact : public ::testing::TestWithParam<int> {};

// Each row alone, the rows together and the scalar path: the same bits; and the value of
// fp32 math over the dequantized weight.
TEST_P(LinearExact, RowsAreIndependentOfTheCall) {
  const int64_t K = 200, N = 24, M = 7;
  const float a_scale = 0.0123f;
  k::PackedWeight w = weight(GetParam(), K, N);
  std::vector<float> x = on_grid(randn(static_cast<size_t>(M * K), 3, 1.f), a_scale, 255);
  std::vector<float> bias = randn(static_cast<size_t>(N), 5);
  k::Tensor xt = k::Tensor::from(NF_DTYPE_FLOAT32, {M, K}, x);
  std::vector<float> all = values(k::linear_exact(xt, a_scale, w, bias.data(), 2));
  for (int64_t m = 0; m < M; ++m) {
    k::Tensor row = k::Tensor::from(NF_DTYPE_FLOAT32, {1, K}, std::vector<float>(x.begin() + m * K, x.begin() + (m + 1) * K));
    std::vector<float> one = values(k::linear_exact(row, a_scale, w, bias.data(), 1));
    EXPECT_TRUE(same_bits(one, std::vector<float>(all.begin() + m * N, all.begin() + (m + 1) * N))) << "row " << m;
  }
  k::limit_simd(k::Simd::kScalar);
  std::vector<float> scalar = values(k::linear_exact(xt, a_scale, w, bias.data(), 1));
  k::limit_simd(k::Simd::kAvx512);
  EXPECT_TRUE(same_bits(scalar, all));
  std::vector<float> wf = k::dequantize(w), ref(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias[n];
      for (int64_t kk = 0; kk < K; ++kk) s += static_cast<double>(x[m * K + kk]) * wf[kk * N + n];
      ref[m * N + n] = static_cast<float>(s);
    }
  EXPECT_TRUE(near(all, ref, 1e-5f));
}

INSTANTIATE_TEST_SUITE_P(Bits, LinearExact, ::testing::Values(8, 4));

// Codes over the whole 16-bit range and beyond (|a| up to 65535, +-32768 and the byte
// boundaries), int8 and int4 weights, per-channel and blocks, with and without zeros: the
// SIMD path gives the bits of the plain loop (forced scalar).
TEST(LinearExact, WideCodesGiveThePlainLoopsBits) {
  const int64_t K = 384, N = 20, M = 3;
  std::vector<float> wv = randn(static_cast<size_t>(K * N), 9, 0.05f);
  std::vector<float> scales(static_cast<size_t>(N * 12), 0.003f), zeros(scales.size());
  for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = static_cast<float>(static_cast<int>(i % 9) - 4);
  const k::PackedWeight weights[] = {k::quantize_with(wv.data(), K, N, 8, K, scales.data(), zeros.data()),
                                     k::quantize_with(wv.data(), K, N, 8, 64, scales.data(), nullptr),
                                     k::quantize_with(wv.data(), K, N, 8, 40, scales.data(), zeros.data()),
                                     k::quantize_with(wv.data(), K, N, 4, 32, scales.data(), zeros.data()),
                                     k::quantize_with(wv.data(), K, N, 4, 128, scales.data(), nullptr)};
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> code(-65535, 65535);
  const int edges[] = {65535, -65535, 32768, -32768, 32767, -32767, 32640, 32639, 255, 256, -128, -129, 127, 128, 0};
  std::vector<float> x(static_cast<size_t>(M * K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i < std::size(edges) ? edges[i] : code(rng));
  const k::Tensor xt = k::Tensor::from(NF_DTYPE_FLOAT32, {M, K}, x);
  for (const k::PackedWeight& w : weights) {
    const std::vector<float> fast = values(k::linear_exact(xt, 1.f, w, nullptr, 2));
    k::limit_simd(k::Simd::kScalar);
    const std::vector<float> plain = values(k::linear_exact(xt, 1.f, w, nullptr, 1));
    k::limit_simd(k::Simd::kAvx512);
    EXPECT_TRUE(same_bits(fast, plain)) << (w.format == k::WeightFormat::Int4 ? "int4" : "int8") << " block "
                                        << w.block_size;
  }
}

TEST(LinearExact, RefusesFloatWeightsAndWideCodes) {
  std::vector<float> wv = randn(64, 1);
  k::PackedWeight f = k::pack_f32(wv.data(), 8, 8);
  k::Tensor x = k::Tensor::from(NF_DTYPE_FLOAT32, {1, 8}, std::vector<float>(8, 1.f));
  EXPECT_THROW(k::linear_exact(x, 1.f, f, nullptr, 1), k::KernelError);
  k::PackedWeight q = weight(8, 8, 8);
  k::Tensor big = k::Tensor::from(NF_DTYPE_FLOAT32, {1, 8}, std::vector<float>(8, 70000.f));
  EXPECT_THROW(k::linear_exact(big, 1.f, q, nullptr, 1), k::KernelError);
}

// Attention's P*V over keys in any order, with masked keys (p = 0) holding any values:
// the same bits; close to the float GEMM.
TEST(MatmulFixed, KeyOrderAndMaskedKeysDoNotMatter) {
  const int64_t M = 3, K = 40, N = 16;
  const float v_scale = 0.03f;
  std::vector<float> p = randn(static_cast<size_t>(M * K), 11);
  for (float& x : p) x = std::exp(x);
  std::vector<float> v = on_grid(randn(static_cast<size_t>(K * N), 12, 2.f), v_scale, 127);
  k::Tensor pt = k::Tensor::from(NF_DTYPE_FLOAT32, {M, K}, p), vt = k::Tensor::from(NF_DTYPE_FLOAT32, {K, N}, v);
  std::vector<float> ref = values(k::matmul_fixed(pt, vt, false, v_scale));
  EXPECT_TRUE(near(ref, values(k::matmul(pt, vt, false)), 1e-5f));
  // Keys reversed and 9 masked keys with arbitrary grid values interleaved.
  const int64_t K2 = K + 9;
  std::vector<float> p2(static_cast<size_t>(M * K2), 0.f), v2 = on_grid(randn(static_cast<size_t>(K2 * N), 13, 2.f), v_scale, 127);
  for (int64_t kk = 0; kk < K; ++kk) {
    int64_t at = K2 - 1 - kk - kk / 5;  // reversed, with gaps
    for (int64_t m = 0; m < M; ++m) p2[m * K2 + at] = p[m * K + kk];
    for (int64_t n = 0; n < N; ++n) v2[at * N + n] = v[kk * N + n];
  }
  k::Tensor p2t = k::Tensor::from(NF_DTYPE_FLOAT32, {M, K2}, p2), v2t = k::Tensor::from(NF_DTYPE_FLOAT32, {K2, N}, v2);
  EXPECT_TRUE(same_bits(values(k::matmul_fixed(p2t, v2t, false, v_scale)), ref));
  // B read transposed (Q*K^T form) gives the same.
  std::vector<float> vt_nk(static_cast<size_t>(K * N));
  for (int64_t kk = 0; kk < K; ++kk)
    for (int64_t n = 0; n < N; ++n) vt_nk[n * K + kk] = v[kk * N + n];
  EXPECT_TRUE(same_bits(values(k::matmul_fixed(pt, k::Tensor::from(NF_DTYPE_FLOAT32, {N, K}, vt_nk), true, v_scale)), ref));
}

// Rows of a batch (heads broadcast against one KV head) are independent of each other.
TEST(MatmulFixed, BatchedRowsMatchSingleRows) {
  const int64_t H = 2, M = 5, K = 16, N = 9;
  std::vector<float> q = randn(static_cast<size_t>(H * M * K), 21);
  std::vector<float> kv = on_grid(randn(static_cast<size_t>(N * K), 22), 0.05f, 127);
  k::Tensor kt = k::Tensor::from(NF_DTYPE_FLOAT32, {1, N, K}, kv);
  std::vector<float> all = values(k::matmul_fixed(k::Tensor::from(NF_DTYPE_FLOAT32, {H, M, K}, q), kt, true, 0.05f));
  for (int64_t r = 0; r < H * M; ++r) {
    k::Tensor one = k::Tensor::from(NF_DTYPE_FLOAT32, {1, 1, K}, std::vector<float>(q.begin() + r * K, q.begin() + (r + 1) * K));
    EXPECT_TRUE(same_bits(values(k::matmul_fixed(one, kt, true, 0.05f)), std::vector<float>(all.begin() + r * N, all.begin() + (r + 1) * N)));
  }
}

// Softmax over a permuted row with extra masked entries: the same bits per element; close
// to the float softmax.
TEST(SoftmaxFixed, OrderAndMaskedEntriesDoNotMatter) {
  const int64_t n = 300;
  std::vector<float> x = randn(static_cast<size_t>(n), 31, 3.f);
  std::vector<float> y = values(k::softmax_fixed(k::Tensor::from(NF_DTYPE_FLOAT32, {1, n}, x), -1));
  EXPECT_TRUE(near(y, values(k::softmax(k::Tensor::from(NF_DTYPE_FLOAT32, {1, n}, x), -1)), 1e-6f));
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
  std::vector<float> x2(static_cast<size_t>(n + 50), -65504.f);  // 50 masked entries at the front
  for (int64_t i = 0; i < n; ++i) x2[50 + i] = x[perm[i]];
  std::vector<float> y2 = values(k::softmax_fixed(k::Tensor::from(NF_DTYPE_FLOAT32, {1, n + 50}, x2), -1));
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(y2[i], 0.f);
  std::vector<float> back(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) back[perm[i]] = y2[50 + i];
  EXPECT_TRUE(same_bits(back, y));
}
