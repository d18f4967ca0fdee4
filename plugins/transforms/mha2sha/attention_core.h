// Finds attention blocks by structure: Softmax between a score MatMul (Q x K^T) and a value
// MatMul, and traces Q, K and V back to the linear projections that pack the heads. Every
// value between a projection and the attention keeps heads on axis 1 ([1, heads, rows,
// head_dim]), which is what lets mha2sha copy those nodes once per head.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/value_types.h>

#include <optional>
#include <string>
#include <vector>

#include "graph_edit.h"
#include "head_weights.h"

namespace mha2sha {

// A linear projection whose output is cut into heads:
// MatMul(x, W [in, heads*head_dim]) [+ bias] -> Reshape [1, rows, heads, head_dim]
// [-> nodes within each head's head_dim values] -> Transpose(0, 2, 1, 3), then head-wise
// nodes (RoPE, scaling) up to `end`. A fused projection (Phi-3's qkv_proj) has a Slice or
// Split of W's columns before the Reshape: the branch then owns columns [first_column,
// first_column + heads*head_dim) of W. Nodes between the Reshape and the Transpose (Qwen-3's
// q_norm / k_norm, an RMSNorm of each head) reduce or broadcast along the last axis only, so
// they work the same on one head's [1, 1, rows, head_dim]. A normalization over all heads
// between the MatMul and the Reshape (OLMo-2) keeps the projection whole (shared_out).
struct HeadBranch {
  std::string x;            // projection input [1, rows, in]
  std::string weight;       // 2-D initializer [in, weight_columns]
  std::string bias;         // 1-D initializer [weight_columns] or ""
  bool bias_first = false;  // Add(bias, MatMul) rather than Add(MatMul, bias)
  std::string proj_out;     // the MatMul's output [1, rows, weight_columns]
  std::string biased_out;   // the bias Add's output, or ""
  int64_t weight_columns = 0, first_column = 0;
  // Columns from one head's first to the next's in W: head_dim, or more when each head's q, k
  // and v sit side by side and a cut of the head view's last axis takes this branch's part
  // (GPT-NeoX's [rows, heads, 3 * head_dim] view); first_column is then within a head.
  int64_t head_stride = 0;
  // Heads in groups (InternLM2's wqkv: each KV group's query heads, then its key and value):
  // `group_heads` heads a group, `group_stride` columns from one group to the next.
  int64_t group_heads = 0, group_stride = 0;
  HeadColumns columns() const { return {first_column, head_dim, head_stride, group_heads, group_stride}; }
  // When a normalization over all heads follows the projection: its output [1, rows,
  // heads*head_dim], kept whole; each head's copy starts from its columns of it.
  std::string shared_out;
  std::string split_out;    // Reshape output [1, rows, heads, head_dim]
  std::vector<nf_node*> split_region;  // nodes from split_out to the Transpose's input, in graph order
  std::string split_end;    // the Transpose's input (split_out when split_region is empty)
  // The region works on each head's [1, rows, 1, ...] (per-row operands, cuts and reshapes of
  // the axes after the heads: GPT-J's rotary) rather than within its last axis only.
  bool split_row_layout = false;
  std::string heads_out;    // Transpose output [1, heads, rows, head_dim]
  std::vector<nf_node*> region;  // nodes from heads_out to end, in graph order
  std::string end;          // [1, heads, rows, head_dim]
  int64_t heads = 0, head_dim = 0, rows = 0;
};

// The cache a K or V branch is appended to: Concat(past, new) along the rows, or
// Concat(past, prefix, new) with a constant KV prefix between them (arcl's kv_prefix rows).
struct PastCache {
  std::string input;   // the graph input
  Dims perm;           // hf view [1, n_kv, T, head_dim] = Transpose(input, perm); identity if none
  bool past_first = true;
  Dims input_dims;
  std::string prefix;  // initializer [1, n_kv, P, head_dim], or ""
};

struct AttentionCore {
  nf_node* score = nullptr;  // MatMul(q, K^T)
  nf_node* value = nullptr;  // MatMul(probabilities, V)
  nf_node* softmax = nullptr;
  std::vector<nf_node*> score_chain;  // from score's output to value's first input, in order
  // Operands of the chain with one entry per query head on the head axis (ALiBi's bias
  // [heads, 1, T]); every other operand is shared by the heads (mask, scale).
  std::vector<std::pair<std::string, int64_t>> per_head_operands;  // (value, its head axis)
  // Scalar Mul/Div on K (torch's SDPA export scales K^T) and on V: each head applies them to
  // its scores and to its output instead, which is the same product.
  std::vector<nf_node*> key_scales, value_scales;
  HeadBranch q, k, v;
  std::optional<PastCache> k_past, v_past;
  // Nodes that turn the new K/V rows into graph outputs (present.N.*): Identity or Transpose.
  std::vector<nf_node*> k_outputs, v_outputs;
  std::string label;  // for messages: the Softmax's name
};

// Every attention block whose Softmax is found in `g`; the Softmaxes that do not fit the
// pattern are listed with the reason.
struct Rejection {
  std::string softmax, why;
  bool attention = false;  // a [1, heads, rows, T] Softmax over T (a MoE router's is not)
};
struct CoreSearch {
  std::vector<AttentionCore> cores;
  std::vector<Rejection> rejected;
};
CoreSearch find_attention_cores(const nf::graph::GraphView& view);

// The core a start point names (its Softmax or one of its two MatMuls), or null.
const AttentionCore* core_of_node(const std::vector<AttentionCore>& cores, const std::string& node_name);

}  // namespace mha2sha
