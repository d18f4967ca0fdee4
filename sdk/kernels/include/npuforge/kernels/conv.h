// 1-D and 2-D convolution (NCHW) through im2col + OpenBLAS; 1x1 stride-1 convs skip im2col.
#pragma once

#include "npuforge/kernels/tensor.h"

namespace nf::kernels {

struct ConvParams {
  std::vector<int64_t> strides, dilations;  // per spatial dim (default 1)
  std::vector<int64_t> pads;                // [begin..., end...] (default 0)
  int64_t group = 1;
};

// x [N, C, spatial...], w [M, C/group, kernel...], bias [M] or null.
Tensor conv(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvParams& p);
// Resolves auto_pad SAME_UPPER / SAME_LOWER / VALID into explicit pads.
std::vector<int64_t> conv_auto_pads(const std::string& auto_pad, const Dims& in_spatial, const Dims& kernel,
                                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations);

}  // namespace nf::kernels
