// Reductions and normalizations: Reduce*, Softmax, LayerNormalization, CumSum, TopK.
#pragma once

#include "npuforge/kernels/tensor.h"

namespace nf::kernels {

enum class Reduce { Sum, Mean, Max, Min, Prod, SumSquare, L2 };

// `axes` empty reduces every axis (callers handle noop_with_empty_axes).
Tensor reduce(Reduce op, const Tensor& x, std::vector<int64_t> axes, bool keepdims);
// Softmax / LogSoftmax along one axis (opset >= 13 semantics).
Tensor softmax(const Tensor& x, int64_t axis, bool log = false);
// LayerNormalization over axes [axis, rank); mean and inv_std_dev have the reduced axes as 1.
struct LayerNormResult {
  Tensor y, mean, inv_std_dev;
};
LayerNormResult layer_norm(const Tensor& x, const Tensor& scale, const Tensor* bias, int64_t axis, float epsilon);
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse);
// Values and int64 indices of the k largest (or smallest) along axis; ties keep the lower index.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest, bool sorted);
// ArgMax / ArgMin along an axis (first occurrence unless select_last_index).
Tensor arg_reduce(const Tensor& x, int64_t axis, bool keepdims, bool is_max, bool select_last_index);

}  // namespace nf::kernels
