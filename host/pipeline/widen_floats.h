// Most Hugging Face exports are float16 or bfloat16 (torch_dtype of the checkpoint). The
// pipeline, the quant recipes and the cpu engine compute in float32, as AIMET and the vendor
// flows calibrate in float32; the NPU backends narrow to their own formats when they compile.
// So a 16-bit model is widened once, right after loading: every 16-bit float initializer,
// constant, graph input/output, value type and Cast target becomes float32. The widened
// weights are new bytes (twice the source's); `keep` moves each one out of memory as it is
// made (WeightSpill), so the widening never holds more than one tensor.
#pragma once

#include <cstdint>
#include <functional>

#include "ir/ir.h"

namespace nf::host {

struct Widened {
  ir::DType from = NF_DTYPE_UNDEFINED;  // the source's 16-bit type (the first one seen)
  size_t weights = 0;                   // initializers widened
  uint64_t bytes = 0;                   // their float32 bytes
  size_t edits = 0;                     // types, Cast targets and constants rewritten
  bool any() const { return weights + edits > 0; }
};

Widened widen_16bit_floats(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep = {});

}  // namespace nf::host
