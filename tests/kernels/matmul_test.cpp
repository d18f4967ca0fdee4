#include <npuforge/kernels/matmul.h>
#include <npuforge/kernels/parallel.h>

#include <atomic>
#include <tuple>

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

// At 2 threads: many small products (attention heads, the batch broadcast from b) split
// over the pool by batch entry, and single large ones by columns or by rows, each part one
// single-threaded OpenBLAS call; every result is the naive product.
TEST(MatMul, SplitOverThePoolMatchesNaive) {
  set_blas_threads(2);
  Tensor a = ftensor({4, 12, 9, 64}, 21), b = ftensor({12, 64, 40}, 22);  // 48 products of 23k MACs
  Tensor y = matmul(a, b);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 12; ++j) {
      auto ref = naive(a.data<float>() + (i * 12 + j) * 576, b.data<float>() + j * 2560, 9, 40, 64, false);
      std::vector<float> got(y.data<float>() + (i * 12 + j) * 360, y.data<float>() + (i * 12 + j + 1) * 360);
      ASSERT_TRUE(near(got, ref)) << i << "," << j;
    }
  for (auto [M, N, tb] : {std::tuple{30, 300, false}, std::tuple{300, 30, true}}) {  // wide, then tall
    Tensor p = ftensor({M, 96}, 23), q = tb ? ftensor({N, 96}, 24) : ftensor({96, N}, 24);
    EXPECT_TRUE(near(values(matmul(p, q, tb)), naive(p.data<float>(), q.data<float>(), M, N, 96, tb)));
  }
  set_blas_threads(0);
}

// A parallel_for inside another's chunk runs inline on that thread (it used to wait for the
// pool it was occupying), and a chunk holds at least `grain` items.
TEST(Parallel, NestedRunsInlineAndChunksHoldWholeGrains) {
  std::atomic<int64_t> inner{0};
  std::atomic<int> chunks{0};
  parallel_for(4, 2, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel_for(100, 2, 1, [&](int64_t x, int64_t y) { inner += y - x; });
  });
  EXPECT_EQ(inner.load(), 400);
  parallel_for(256, 2, 252, [&](int64_t b, int64_t e) {
    ++chunks;
    EXPECT_EQ(e - b, 256);
  });
  EXPECT_EQ(chunks.load(), 1);
  parallel_for(600, 2, 252, [&](int64_t, int64_t) { ++chunks; });
  EXPECT_EQ(chunks.load(), 3);
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
