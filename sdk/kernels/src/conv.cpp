#include "npuforge/kernels/conv.h"

#include <algorithm>

#include "npuforge/kernels/matmul.h"

namespace nf::kernels {

std::vector<int64_t> conv_auto_pads(const std::string& auto_pad, const Dims& in, const Dims& k,
                                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dil) {
  size_t s = in.size();
  std::vector<int64_t> pads(2 * s, 0);
  if (auto_pad == "VALID" || auto_pad == "NOTSET" || auto_pad.empty()) return pads;
  for (size_t i = 0; i < s; ++i) {
    int64_t st = strides.empty() ? 1 : strides[i], d = dil.empty() ? 1 : dil[i];
    int64_t out = (in[i] + st - 1) / st;
    int64_t total = std::max<int64_t>(0, (out - 1) * st + (k[i] - 1) * d + 1 - in[i]);
    int64_t small = total / 2, big = total - small;
    pads[i] = auto_pad == "SAME_LOWER" ? big : small;
    pads[i + s] = auto_pad == "SAME_LOWER" ? small : big;
  }
  return pads;
}

Tensor conv(const Tensor& x_in, const Tensor& w_in, const Tensor* bias, const ConvParams& p) {
  if (x_in.dtype() != NF_DTYPE_FLOAT32 || w_in.dtype() != NF_DTYPE_FLOAT32) throw KernelError("Conv: only float32 is supported");
  if (x_in.rank() != 3 && x_in.rank() != 4) throw KernelError("Conv: only 1-D and 2-D convolution is supported");
  if (w_in.rank() != x_in.rank()) throw KernelError("Conv: weight rank differs from input rank");
  // 1-D as 2-D with height 1.
  bool one_d = x_in.rank() == 3;
  Tensor x = one_d ? x_in.reshaped({x_in.dim(0), x_in.dim(1), 1, x_in.dim(2)}) : x_in;
  Tensor w = one_d ? w_in.reshaped({w_in.dim(0), w_in.dim(1), 1, w_in.dim(2)}) : w_in;
  auto get = [&](const std::vector<int64_t>& v, size_t i, int64_t dflt) {
    if (v.empty()) return dflt;
    if (one_d) return i == 0 ? dflt : v[0];
    return v[i];
  };
  int64_t sh = get(p.strides, 0, 1), sw = get(p.strides, 1, 1), dh = get(p.dilations, 0, 1), dw = get(p.dilations, 1, 1);
  int64_t pt, pl, pb, pr;
  if (p.pads.empty()) pt = pl = pb = pr = 0;
  else if (one_d) pt = pb = 0, pl = p.pads[0], pr = p.pads[1];
  else pt = p.pads[0], pl = p.pads[1], pb = p.pads[2], pr = p.pads[3];
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t M = w.dim(0), G = p.group, Cg = w.dim(1), KH = w.dim(2), KW = w.dim(3);
  if (Cg * G != C || M % G) throw KernelError("Conv: channels " + std::to_string(C) + " do not match weight " + dims_str(w_in.dims()) + " with group " + std::to_string(G));
  const int64_t OH = (H + pt + pb - dh * (KH - 1) - 1) / sh + 1, OW = (W + pl + pr - dw * (KW - 1) - 1) / sw + 1;
  if (OH <= 0 || OW <= 0) throw KernelError("Conv: empty output");
  const int64_t Mg = M / G, KK = Cg * KH * KW, P = OH * OW;
  Tensor y(NF_DTYPE_FLOAT32, {N, M, OH, OW});
  const bool direct = KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && pb == 0 && pr == 0;
  std::vector<float> col(direct ? 0 : static_cast<size_t>(KK * P));
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  float* py = y.mut<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const float* xg = px + (n * C + g * Cg) * H * W;
      const float* src = xg;
      if (!direct) {
        // col[(c, kh, kw), (oh, ow)] = x[c, oh*sh - pt + kh*dh, ow*sw - pl + kw*dw] or 0.
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              float* row = col.data() + ((c * KH + kh) * KW + kw) * P;
              for (int64_t oh = 0; oh < OH; ++oh) {
                int64_t ih = oh * sh - pt + kh * dh;
                for (int64_t ow = 0; ow < OW; ++ow) {
                  int64_t iw = ow * sw - pl + kw * dw;
                  row[oh * OW + ow] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? xg[(c * H + ih) * W + iw] : 0.f;
                }
              }
            }
        src = col.data();
      }
      float* yg = py + (n * M + g * Mg) * P;
      sgemm(pw + g * Mg * KK, src, yg, Mg, P, KK, false);
      if (bias)
        for (int64_t m = 0; m < Mg; ++m) {
          float b = bias->data<float>()[g * Mg + m];
          for (int64_t i = 0; i < P; ++i) yg[m * P + i] += b;
        }
    }
  return one_d ? y.reshaped({N, M, OW}) : y;
}

}  // namespace nf::kernels
