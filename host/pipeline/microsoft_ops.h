// ONNX Runtime GenAI's CPU decoders (its model builder, `-p fp32 -e cpu`) hold ONNX Runtime
// contrib operators: GroupQueryAttention, SimplifiedLayerNormalization and
// SkipSimplifiedLayerNormalization. On load the host rewrites them into the standard
// operators a torch export of the same layers holds, the same numbers (sdk
// graph/microsoft_ops.h does it), so every stage, backend and the runner read one form.
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace nf::host {

// Returns how many nodes it expanded (0: none). Throws std::runtime_error with one line for
// a form it does not expand.
size_t expand_microsoft_ops(ir::Graph& g);

}  // namespace nf::host
