// Data movement and indexing: Transpose, Concat, Split, Slice, Gather*, Scatter*, Expand,
// Tile, Trilu, Range, Pad. Any dtype; bytes are moved, not interpreted.
#pragma once

#include "npuforge/kernels/tensor.h"

namespace nf::kernels {

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);
Tensor concat(const std::vector<const Tensor*>& xs, int64_t axis);
// Shape of the concatenation (validates inputs), and Concat into memory the caller owns:
// a KV-cache output written once, straight into the tensor handed back to the runner.
Dims concat_shape(const std::vector<const Tensor*>& xs, int64_t axis);
void concat_into(const std::vector<const Tensor*>& xs, int64_t axis, Tensor& out);
std::vector<Tensor> split(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes);
// ONNX Slice: per listed axis, start/end clamped like Python with steps (may be negative).
Tensor slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
             const std::vector<int64_t>& axes, const std::vector<int64_t>& steps);
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis);
Tensor gather_elements(const Tensor& x, const Tensor& indices, int64_t axis);
// ONNX OneHot: `values` = [off, on]; a new axis of `depth` at `axis`; negative indices
// count from depth, out-of-range ones give an all-off row.
Tensor one_hot(const Tensor& indices, int64_t depth, const Tensor& values, int64_t axis);
enum class ScatterReduce { None, Add, Mul, Max, Min };
Tensor scatter_elements(const Tensor& x, const Tensor& indices, const Tensor& updates, int64_t axis,
                        ScatterReduce reduction);
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, ScatterReduce reduction);
Tensor expand(const Tensor& x, const Dims& shape);
Tensor tile(const Tensor& x, const std::vector<int64_t>& repeats);
// Keeps the upper (or lower) triangle of the last two dims, shifted by diagonal k.
Tensor trilu(const Tensor& x, int64_t k, bool upper);
Tensor range(const Tensor& start, const Tensor& limit, const Tensor& delta);
// Constant-mode Pad with ONNX pads layout [begin..., end...] (negative pads crop).
Tensor pad_constant(const Tensor& x, const std::vector<int64_t>& pads, const Tensor* value);

}  // namespace nf::kernels
