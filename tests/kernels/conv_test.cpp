#include <npuforge/kernels/conv.h>

#include "test_util.h"

using namespace nf::kernels;
using namespace nf::kernels::test;

namespace {
// Direct 2-D convolution loops.
std::vector<float> naive(const Tensor& x, const Tensor& w, const ConvParams& p) {
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), Cg = w.dim(1), KH = w.dim(2), KW = w.dim(3);
  int64_t s = p.strides[0], pad = p.pads[0], G = p.group;
  int64_t OH = (H + 2 * pad - KH) / s + 1, OW = (W + 2 * pad - KW) / s + 1;
  std::vector<float> y(N * M * OH * OW, 0.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          int64_t g = m / (M / G);
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * s - pad + kh, iw = ow * s - pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(x.data<float>()[((n * C + g * Cg + c) * H + ih) * W + iw]) *
                       w.data<float>()[((m * Cg + c) * KH + kh) * KW + kw];
              }
          y[((n * M + m) * OH + oh) * OW + ow] = float(acc);
        }
  return y;
}
}  // namespace

TEST(Conv, GeneralAndPointwiseMatchNaive) {
  struct {
    Dims x, w;
    int64_t stride, pad, group;
  } cases[] = {{{1, 4, 7, 6}, {6, 4, 3, 3}, 1, 1, 1}, {{2, 4, 8, 8}, {4, 2, 3, 3}, 2, 0, 2}, {{1, 8, 5, 5}, {3, 8, 1, 1}, 1, 0, 1}};
  for (auto& c : cases) {
    Tensor x = ftensor(c.x, 1), w = ftensor(c.w, 2);
    ConvParams p;
    p.strides = {c.stride, c.stride};
    p.pads = {c.pad, c.pad, c.pad, c.pad};
    p.group = c.group;
    EXPECT_TRUE(near(values(conv(x, w, nullptr, p)), naive(x, w, p), 1e-4f, 1e-4f));
  }
}

TEST(Conv, AutoPadSameUpper) {
  auto pads = conv_auto_pads("SAME_UPPER", {5, 5}, {3, 3}, {2, 2}, {});
  EXPECT_EQ(pads, (std::vector<int64_t>{1, 1, 1, 1}));
}
