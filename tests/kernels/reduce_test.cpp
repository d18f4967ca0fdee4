#include <npuforge/kernels/reduce.h>

#include <cmath>

#include "test_util.h"

using namespace nf::kernels;
using namespace nf::kernels::test;

TEST(Reduce, MeanOverMiddleAxisMatchesNaive) {
  Tensor x = ftensor({2, 3, 4}, 1);
  Tensor y = reduce(Reduce::Mean, x, {1}, true);
  ASSERT_EQ(y.dims(), (Dims{2, 1, 4}));
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      float s = 0;
      for (int j = 0; j < 3; ++j) s += x.data<float>()[(i * 3 + j) * 4 + k];
      EXPECT_NEAR(y.data<float>()[i * 4 + k], s / 3, 1e-6);
    }
  EXPECT_EQ(reduce(Reduce::Sum, x, {}, false).dims(), Dims{});
  EXPECT_EQ(reduce(Reduce::Max, x, {-1, 0}, false).dims(), (Dims{3}));
}

TEST(Reduce, SoftmaxRowsSumToOne) {
  Tensor x = ftensor({3, 5}, 2);
  for (int64_t axis : {0, 1}) {
    Tensor y = softmax(x, axis);
    for (int r = 0; r < (axis ? 3 : 5); ++r) {
      float s = 0;
      for (int c = 0; c < (axis ? 5 : 3); ++c) s += y.data<float>()[axis ? r * 5 + c : c * 5 + r];
      EXPECT_NEAR(s, 1.f, 1e-6);
    }
  }
}

TEST(Reduce, LayerNormMatchesNaive) {
  Tensor x = ftensor({4, 8}, 3), g = ftensor({8}, 4), b = ftensor({8}, 5);
  LayerNormResult r = layer_norm(x, g, &b, -1, 1e-5f);
  for (int i = 0; i < 4; ++i) {
    double m = 0, v = 0;
    for (int j = 0; j < 8; ++j) m += x.data<float>()[i * 8 + j];
    m /= 8;
    for (int j = 0; j < 8; ++j) v += std::pow(x.data<float>()[i * 8 + j] - m, 2);
    v /= 8;
    for (int j = 0; j < 8; ++j)
      EXPECT_NEAR(r.y.data<float>()[i * 8 + j],
                  (x.data<float>()[i * 8 + j] - m) / std::sqrt(v + 1e-5) * g.data<float>()[j] + b.data<float>()[j], 1e-5);
    EXPECT_NEAR(r.mean.data<float>()[i], m, 1e-6);
  }
}

TEST(Reduce, CumSumAndTopK) {
  Tensor x = Tensor::from(NF_DTYPE_FLOAT32, {5}, std::vector<float>{3, 1, 4, 1, 5});
  EXPECT_EQ(values(cumsum(x, 0, false, false)), (std::vector<float>{3, 4, 8, 9, 14}));
  EXPECT_EQ(values(cumsum(x, 0, true, true)), (std::vector<float>{11, 10, 6, 5, 0}));
  auto [v, i] = topk(x, 3, 0, true, true);
  EXPECT_EQ(values(v), (std::vector<float>{5, 4, 3}));
  EXPECT_EQ(i.to_int64s(), (std::vector<int64_t>{4, 2, 0}));
  auto [sv, si] = topk(x, 2, 0, false, true);
  EXPECT_EQ(si.to_int64s(), (std::vector<int64_t>{1, 3}));  // ties: lower index first
}
