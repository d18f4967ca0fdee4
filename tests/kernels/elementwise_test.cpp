#include <npuforge/kernels/elementwise.h>

#include <cmath>

#include "test_util.h"

using namespace nf::kernels;
using namespace nf::kernels::test;

TEST(Elementwise, BroadcastAddMatchesNaive) {
  Tensor a = ftensor({2, 3, 4}, 1), b = ftensor({3, 1}, 2);
  Tensor y = binary(Binary::Add, a, b);
  ASSERT_EQ(y.dims(), (Dims{2, 3, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(y.data<float>()[(i * 3 + j) * 4 + k], a.data<float>()[(i * 3 + j) * 4 + k] + b.data<float>()[j]);
}

TEST(Elementwise, ScalarOnEitherSide) {
  Tensor a = ftensor({5}, 3), s = Tensor::scalar(NF_DTYPE_FLOAT32, 2.f);
  Tensor y1 = binary(Binary::Sub, a, s), y2 = binary(Binary::Sub, s, a);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(y1.data<float>()[i], a.data<float>()[i] - 2.f);
    EXPECT_EQ(y2.data<float>()[i], 2.f - a.data<float>()[i]);
  }
}

// A scalar exponent of 2 squares (the exact, correctly rounded x * x); others go to pow.
TEST(Elementwise, PowSquaresAndFallsBackToPow) {
  Tensor a = ftensor({7}, 5);
  Tensor sq = binary(Binary::Pow, a, Tensor::scalar(NF_DTYPE_FLOAT32, 2.f));
  Tensor cube = binary(Binary::Pow, a, Tensor::scalar(NF_DTYPE_FLOAT32, 3.f));
  Tensor two = binary(Binary::Pow, Tensor::scalar(NF_DTYPE_FLOAT32, 2.f), a);  // 2 ** a, not a ** 2
  for (int i = 0; i < 7; ++i) {
    const float x = a.data<float>()[i];
    EXPECT_EQ(sq.data<float>()[i], x * x);
    EXPECT_EQ(cube.data<float>()[i], std::pow(x, 3.f));
    EXPECT_EQ(two.data<float>()[i], std::pow(2.f, x));
  }
}

TEST(Elementwise, ComparisonsGiveBool) {
  Tensor a = Tensor::from(NF_DTYPE_INT64, {3}, std::vector<int64_t>{1, 5, 3});
  Tensor b = Tensor::scalar(NF_DTYPE_INT64, int64_t{3});
  Tensor y = binary(Binary::LessOrEqual, a, b);
  EXPECT_EQ(y.dtype(), NF_DTYPE_BOOL);
  EXPECT_EQ(std::vector<bool>(y.data<bool>(), y.data<bool>() + 3), (std::vector<bool>{true, false, true}));
  EXPECT_THROW(binary(Binary::Add, a, Tensor::scalar(NF_DTYPE_FLOAT32, 1.f)), KernelError);
}

TEST(Elementwise, UnaryMath) {
  Tensor x = ftensor({16}, 4);
  Tensor s = unary(Unary::Sigmoid, x), e = unary(Unary::Erf, x), n = unary(Unary::Neg, x);
  for (int i = 0; i < 16; ++i) {
    float v = x.data<float>()[i];
    EXPECT_NEAR(s.data<float>()[i], 1.f / (1.f + std::exp(-v)), 1e-6);
    EXPECT_NEAR(e.data<float>()[i], std::erf(v), 1e-6);
    EXPECT_EQ(n.data<float>()[i], -v);
  }
}

// log(1 + e^v) written as such overflows to inf past v = 88 in float32; softplus(v) is v there.
TEST(Elementwise, SoftplusStaysFiniteForLargeInputs) {
  Tensor x = Tensor::from(NF_DTYPE_FLOAT32, {5}, std::vector<float>{-100.f, -1.f, 0.f, 1.f, 100.f});
  std::vector<float> y = values(unary(Unary::Softplus, x));
  EXPECT_NEAR(y[0], 0.f, 1e-30);
  EXPECT_NEAR(y[1], std::log1p(std::exp(-1.f)), 1e-6);
  EXPECT_NEAR(y[2], std::log(2.f), 1e-6);
  EXPECT_NEAR(y[3], 1.f + std::log1p(std::exp(-1.f)), 1e-6);
  EXPECT_EQ(y[4], 100.f);
}

// Gelu (opset 20) at x = -1, 0, 1: the ONNX definition's values, to 8 digits.
TEST(Elementwise, GeluExactAndTanh) {
  Tensor x = Tensor::from(NF_DTYPE_FLOAT32, {3}, std::vector<float>{-1.f, 0.f, 1.f});
  std::vector<float> exact = values(gelu(x, false)), approx = values(gelu(x, true));
  const float want_exact[] = {-0.15865526f, 0.f, 0.84134474f}, want_tanh[] = {-0.15880801f, 0.f, 0.84119199f};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(exact[i], want_exact[i], 1e-6) << i;
    EXPECT_NEAR(approx[i], want_tanh[i], 1e-6) << i;
  }
  EXPECT_THROW(gelu(Tensor::from(NF_DTYPE_INT64, {1}, std::vector<int64_t>{1}), false), KernelError);
}

TEST(Elementwise, WhereBroadcasts) {
  Tensor c = Tensor::from(NF_DTYPE_BOOL, {2, 1}, std::vector<uint8_t>{1, 0});
  Tensor x = Tensor::from(NF_DTYPE_FLOAT32, {3}, std::vector<float>{1, 2, 3});
  Tensor y = Tensor::scalar(NF_DTYPE_FLOAT32, -1.f);
  Tensor r = where(c, x, y);
  EXPECT_EQ(values(r), (std::vector<float>{1, 2, 3, -1, -1, -1}));
}

TEST(Elementwise, CastRoundTripsHalfAndSaturates) {
  Tensor x = Tensor::from(NF_DTYPE_FLOAT32, {4}, std::vector<float>{1.5f, -2.25f, 65504.f, 1e-8f});
  Tensor h = cast(x, NF_DTYPE_FLOAT16), back = cast(h, NF_DTYPE_FLOAT32);
  EXPECT_EQ(back.data<float>()[0], 1.5f);
  EXPECT_EQ(back.data<float>()[1], -2.25f);
  EXPECT_EQ(back.data<float>()[2], 65504.f);
  Tensor big = Tensor::from(NF_DTYPE_FLOAT32, {2}, std::vector<float>{1e20f, -3.7f});
  Tensor i = cast(big, NF_DTYPE_INT32);
  EXPECT_EQ(i.data<int32_t>()[0], INT32_MAX);
  EXPECT_EQ(i.data<int32_t>()[1], -3);
}
