#include <npuforge/kernels/matmul.h>

#include "test_util.h"

using namespace nf::kernels;
using namespace nf::kernels::test;

namespace {
std::vector<float> naive(const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool tb) {
  std::vector<float> y(M * N, 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(a[m * K + k]) * b[tb ? n * K + k : k * N + n];
      y[m * N + n] = float(s);
    }
  return y;
}
}  // namespace

TEST(MatMul, BatchedBroadcastMatchesNaive) {
  Tensor a = ftensor({2, 3, 5, 7}, 1), b = ftensor({3, 7, 4}, 2);
  Tensor y = matmul(a, b);
  ASSERT_EQ(y.dims(), (Dims{2, 3, 5, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      auto ref = naive(a.data<float>() + (i * 3 + j) * 35, b.data<float>() + j * 28, 5, 4, 7, false);
      std::vector<float> got(y.data<float>() + (i * 3 + j) * 20, y.data<float>() + (i * 3 + j + 1) * 20);
      EXPECT_TRUE(near(got, ref));
    }
}

TEST(MatMul, TransposedBAndVectors) {
  Tensor a = ftensor({4, 6}, 3), bt = ftensor({5, 6}, 4);
  Tensor y = matmul(a, bt, true);
  EXPECT_TRUE(near(values(y), naive(a.data<float>(), bt.data<float>(), 4, 5, 6, true)));
  Tensor v = ftensor({6}, 5), m = ftensor({6, 3}, 6);
  EXPECT_EQ(matmul(v, m).dims(), (Dims{3}));
  EXPECT_EQ(matmul(m.reshaped({3, 6}), v).dims(), (Dims{3}));
  EXPECT_THROW(matmul(a, a), KernelError);
}

TEST(Gemm, AlphaBetaTransposesAndBias) {
  Tensor a = ftensor({6, 4}, 7), b = ftensor({5, 6}, 8), c = ftensor({5}, 9);
  Tensor y = gemm(a, b, &c, 0.5f, 2.f, true, true);
  ASSERT_EQ(y.dims(), (Dims{4, 5}));
  std::vector<float> at(24);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) at[j * 6 + i] = a.data<float>()[i * 4 + j];
  auto ref = naive(at.data(), b.data<float>(), 4, 5, 6, true);
  for (int m = 0; m < 4; ++m)
    for (int n = 0; n < 5; ++n) ref[m * 5 + n] = 0.5f * ref[m * 5 + n] + 2.f * c.data<float>()[n];
  EXPECT_TRUE(near(values(y), ref));
}
