// Layout-independent kernels for integer simulation: each output is a function of its own
// inputs only, computed by exact integer sums, so it does not depend on the buffer layout
// (row slot, M of the call, order of the reduction axis, thread split). This is how an
// integer NPU behaves (int32 accumulators) and what lets a speculative decoder's tree rows
// reproduce plain decoding bit for bit. Float values on a quantization grid enter as their
// integer codes: code = value / scale, exactly an integer.
#pragma once

#include "npuforge/kernels/linear.h"
#include "npuforge/kernels/tensor.h"

namespace nf::kernels {

// y[M, N] = a_scale * sum_b scale[n,b] * sum_{k in b} a[m,k] * (q[n,k] + zero[n,b]) + bias,
// with a[] integer activation codes (|a| < 2^16) and the packed integer weight's codes
// (Int8 or Int4): block sums are exact in integers, blocks are combined in a fixed order
// in double, then rounded to float once. bias may be null.
void linear_exact(const int32_t* a, int64_t M, const PackedWeight& w, double a_scale, const float* bias, float* y,
                  int threads);
// x [..., K] on a grid of step `a_scale` -> [..., N].
Tensor linear_exact(const Tensor& x, float a_scale, const PackedWeight& w, const float* bias, int threads);

// MatMul (numpy broadcasting; b read as [.., N, K] when trans_b) where b lies on a grid of
// step `b_scale` (|code| < 2^24). Each row of a (its K values) is turned into fixed point
// with 24 bits below its largest magnitude, a choice that depends on the row's values only;
// the products are summed in int64 (checked against overflow).
Tensor matmul_fixed(const Tensor& a, const Tensor& b, bool trans_b, float b_scale);

// Softmax whose denominator is summed in fixed point (2^-40 units of the largest term, in
// int64), so it does not depend on the order of the elements along the axis.
Tensor softmax_fixed(const Tensor& x, int64_t axis);

}  // namespace nf::kernels
