#include <npuforge/kernels/tensor.h>

#include <utility>

#include "test_util.h"

using namespace nf::kernels;

TEST(Tensor, OwnedIsAlignedAndReshapeShares) {
  Tensor t(NF_DTYPE_FLOAT32, {2, 3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  EXPECT_EQ(t.nbytes(), 24u);
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.raw(), t.raw());
  EXPECT_THROW(t.reshaped({4}), KernelError);
}

TEST(Tensor, BorrowedIsReadOnly) {
  float data[4] = {1, 2, 3, 4};
  Tensor b = Tensor::borrow(NF_DTYPE_FLOAT32, {4}, data);
  EXPECT_EQ(std::as_const(b).data<float>()[2], 3.f);
  EXPECT_THROW(b.mut_raw(), KernelError);
  Tensor c = b.clone();
  c.mut<float>()[0] = 9;
  EXPECT_EQ(data[0], 1.f);
}

TEST(Tensor, Broadcasting) {
  EXPECT_EQ(broadcast_shape({2, 1, 4}, {3, 1}, "t"), (Dims{2, 3, 4}));
  EXPECT_EQ(broadcast_shape({}, {5}, "t"), (Dims{5}));
  EXPECT_THROW(broadcast_shape({2, 3}, {4}, "Add"), KernelError);
  EXPECT_EQ(broadcast_strides({3, 1}, {2, 3, 4}), (std::vector<int64_t>{0, 1, 0}));
}

TEST(Tensor, IntValues) {
  EXPECT_EQ(Tensor::from(NF_DTYPE_INT32, {2}, std::vector<int32_t>{-1, 7}).to_int64s(), (std::vector<int64_t>{-1, 7}));
  EXPECT_THROW(Tensor::scalar(NF_DTYPE_FLOAT32, 1.f).to_int64s(), KernelError);
}
