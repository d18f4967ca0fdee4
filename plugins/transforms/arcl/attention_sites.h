// Finds, by graph structure rather than node names, the places arcl rewrites in each
// decoder layer: the Concat that appends the new key/value rows to the past ones, and the
// mask operand added to the attention scores before Softmax.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <set>
#include <string>
#include <vector>

#include "model_info.h"

namespace arcl {

// Concat(past, new) along the sequence axis whose output is the present.N.* graph output.
struct KvConcat {
  nf_node* concat = nullptr;
  size_t past_slot = 0;      // which Concat input reads the past cache
  std::string new_rows;      // the other operand: this pass's keys (after RoPE) or values
  std::string full;          // the Concat output (past + new)
};

// Add(scores, mask) feeding a Softmax; `mask_slot` is the mask operand's input index.
struct MaskUse {
  nf_node* add = nullptr;
  size_t mask_slot = 0;
};

struct LayerSites {
  KvConcat key, value;
  std::vector<MaskUse> masks;
  // Add(scores, bias) where the bias counts key positions from attention_mask (a CumSum over
  // it): ALiBi as Bloom computes it. In the static layout the positions come in key_positions.
  std::vector<MaskUse> position_biases;
  // Where(condition, fill, scores) with the condition from attention_mask and a large negative
  // fill: masked_fill of the scores (MPT). The static graph adds the mask input instead.
  std::vector<nf_node*> mask_fills;
  // Add(scores, bias) where the bias is constants cut to the key length (MPT's ALiBi buffer):
  // once static, it must be slopes times key positions (key_positions.h).
  std::vector<MaskUse> slot_biases;
  // Where(condition, scores, min) whose condition reads no input's data: the model's own
  // causal (GPT-2) or local-window (GPT-Neo) buffer, sliced by the cache length.
  // In the static layout a slot is not a position; the mask inputs carry causality and window.
  std::vector<nf_node*> slot_masks;
};

// Whether a value computed from `upstream` (its data upstream) counts positions along
// attention_mask (a CumSum over it), as ALiBi biases and mask-derived position ids do.
bool counts_positions(const nf::graph::GraphView& view, const std::set<std::string>& upstream,
                      const std::string& mask_input);

// One entry per layer. Throws nf::Error when a layer does not have the expected shape.
std::vector<LayerSites> find_attention_sites(const nf::graph::GraphView& view, const ModelInfo& info,
                                             const std::string& mask_input);

}  // namespace arcl
