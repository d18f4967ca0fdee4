// What each linear layer of a decoder graph does, read from the dataflow and not from node
// names or node order: the projections that feed an attention core's query, key and value
// (or several of them, fused), the one that reads its output, the MLP's input and down
// projections, and the LM head; with the transformer block each belongs to.
//
// An attention core is a score MatMul of two computed operands that reaches a Softmax
// through scaling, masking and casts, with the MatMul that reads the probabilities (or one
// fused attention op: ONNX Runtime's GroupQueryAttention / MultiHeadAttention, ONNX's
// Attention). A linear is a MatMul / Gemm whose weight is an initializer (or a Transpose of
// one: a tied head), or a MatMulNBits.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <string>

namespace nf::graph {

// `other`: a linear outside the attention / MLP pattern (an MoE router, EAGLE's fc).
enum class LinearRole { query, key, value, fused_qkv, attention_output, ffn_input, ffn_down, lm_head, other };
const char* role_name(LinearRole r);

struct LinearUse {
  LinearRole role = LinearRole::other;
  // 0-based transformer block: the KV cache layer (past_key_values.N) its attention reads,
  // else that attention's depth in the graph (per-head cores of one layer share it); -1 for
  // the LM head and for graphs without attention.
  int64_t block = -1;
};

// Every linear node of `g`, keyed by its output value (unique, unlike node names).
std::map<std::string, LinearUse> linear_roles(Graph g);

}  // namespace nf::graph
