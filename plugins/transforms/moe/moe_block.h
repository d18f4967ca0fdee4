// Finds top-k routed expert blocks by structure: router MatMul -> Softmax -> TopK, the
// top-k weights (optionally renormalised) spread over the experts through a one-hot of
// the TopK indices, and one term Mul(expert_e(x), weight_e) per expert summed by Adds.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <string>
#include <vector>

namespace moe {

struct Expert {
  int64_t index = 0;
  std::string output;              // expert_e(x)
  std::string term;                // Mul(expert_e(x), weight_e)
  std::vector<std::string> nodes;  // the expert's own nodes (names), x excluded
};

struct MoeBlock {
  int64_t layer = -1;     // from "layers.N" in the node names, else the block's ordinal
  std::string x;          // the block input (router and experts read it)
  std::string logits;     // router logits (the Softmax input)
  std::string softmax;    // Softmax node name
  std::string probs;      // TopK input
  std::string topk;       // TopK node name
  std::string top_values; // TopK output 0
  std::string dense;      // per-expert weights [.., E]: 0 for experts not chosen
  int64_t k = 0, experts = 0;
  bool renormalize = false;
  bool one_hot = true;    // dense is built from the TopK indices (not yet rewritten)
  std::vector<Expert> expert_terms;
};

// Throws nf::Error naming the node when a TopK looks like routing but the rest does not fit.
std::vector<MoeBlock> find_moe_blocks(const nf::graph::GraphView& view);

}  // namespace moe
