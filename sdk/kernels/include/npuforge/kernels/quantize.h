// ONNX QuantizeLinear / DequantizeLinear: per-tensor (scalar scale) or per-axis (1-D scale
// along `axis`), int8 / uint8 / int32 integers. Rounding is half to even, then saturation.
#pragma once

#include "npuforge/kernels/tensor.h"

namespace nf::kernels {

// Output dtype is the zero point's, uint8 when there is none.
Tensor quantize_linear(const Tensor& x, const Tensor& scale, const Tensor* zero_point, int64_t axis);
Tensor dequantize_linear(const Tensor& x, const Tensor& scale, const Tensor* zero_point, int64_t axis);

}  // namespace nf::kernels
