// ONNX Runtime's contrib operators that ONNX Runtime GenAI's model builder writes for a
// decoder, and the fused operators of ONNX opset 23 a torch export at that opset writes,
// expanded into the standard operators every stage reads, with the same numbers:
// GroupQueryAttention (its rotary, cache append and grouped heads), RotaryEmbedding (both
// domains), SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization,
// RMSNormalization and Attention. See microsoft_ops.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace nf::graph {

// Rewrites every such node of `g` (no-op when there is none) and returns how many. Throws
// nf::Error naming the node for a form it does not expand (head sinks, a node without the KV
// cache, a norm output beyond the normalized value and the sum, a causal flag in place of a
// mask).
size_t expand_microsoft_ops(nf::Graph g);

}  // namespace nf::graph
