#include <npuforge/kernels/movement.h>

#include "test_util.h"

using namespace nf::kernels;
using namespace nf::kernels::test;

namespace {
Tensor iota(Dims d) {
  std::vector<float> v(numel(d));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  return Tensor::from(NF_DTYPE_FLOAT32, d, v);
}
}  // namespace

TEST(Movement, TransposeMatchesNaive) {
  Tensor x = iota({2, 3, 4});
  Tensor y = transpose(x, {2, 0, 1});
  ASSERT_EQ(y.dims(), (Dims{4, 2, 3}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(y.data<float>()[(c * 2 + a) * 3 + b], x.data<float>()[(a * 3 + b) * 4 + c]);
}

TEST(Movement, ConcatSplitRoundTrip) {
  Tensor a = iota({2, 3}), b = iota({2, 1});
  Tensor c = concat({&a, &b}, 1);
  EXPECT_EQ(values(c), (std::vector<float>{0, 1, 2, 0, 3, 4, 5, 1}));
  auto parts = split(c, 1, {3, 1});
  EXPECT_EQ(values(parts[0]), values(a));
  EXPECT_EQ(values(parts[1]), values(b));
}

TEST(Movement, SliceWithNegativeStepsAndClamping) {
  Tensor x = iota({10});
  EXPECT_EQ(values(slice(x, {-3}, {1000}, {0}, {1})), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(values(slice(x, {8}, {2}, {0}, {-2})), (std::vector<float>{8, 6, 4}));
  EXPECT_EQ(slice(x, {5}, {2}, {0}, {1}).numel(), 0);
}

TEST(Movement, GatherAndElements) {
  Tensor x = iota({3, 2});
  Tensor idx = Tensor::from(NF_DTYPE_INT64, {2}, std::vector<int64_t>{2, -3});
  EXPECT_EQ(values(gather(x, idx, 0)), (std::vector<float>{4, 5, 0, 1}));
  Tensor ie = Tensor::from(NF_DTYPE_INT64, {3, 1}, std::vector<int64_t>{1, 0, 1});
  EXPECT_EQ(values(gather_elements(x, ie, 1)), (std::vector<float>{1, 2, 5}));
  EXPECT_THROW(gather(x, Tensor::from(NF_DTYPE_INT64, {1}, std::vector<int64_t>{3}), 0), KernelError);
}

TEST(Movement, ScatterAndExpandTileTrilu) {
  Tensor x = Tensor::zeros(NF_DTYPE_FLOAT32, {4});
  Tensor idx = Tensor::from(NF_DTYPE_INT64, {2, 1}, std::vector<int64_t>{1, 3});
  Tensor upd = Tensor::from(NF_DTYPE_FLOAT32, {2}, std::vector<float>{5, 6});
  EXPECT_EQ(values(scatter_nd(x, idx, upd, ScatterReduce::None)), (std::vector<float>{0, 5, 0, 6}));
  EXPECT_EQ(expand(iota({2, 1}), {2, 3}).dims(), (Dims{2, 3}));
  EXPECT_EQ(values(expand(iota({2, 1}), {2, 3})), (std::vector<float>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(values(tile(iota({2}), {3})), (std::vector<float>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(values(trilu(iota({2, 2}), 0, false)), (std::vector<float>{0, 0, 2, 3}));
  Tensor r = range(Tensor::scalar(NF_DTYPE_INT64, int64_t{1}), Tensor::scalar(NF_DTYPE_INT64, int64_t{8}),
                   Tensor::scalar(NF_DTYPE_INT64, int64_t{3}));
  EXPECT_EQ(r.to_int64s(), (std::vector<int64_t>{1, 4, 7}));
}
