// Finds top-k routed expert blocks by what they compute: router MatMul -> Softmax -> TopK,
// then one term Mul(expert_e(x), weight_e) per expert summed by Adds, where weight_e is
// computed from the TopK outputs alone and equals expert e's top-k probability (optionally
// renormalised) when e is chosen and 0 otherwise. How the export writes weight_e (slice of
// a one-hot sum, one-hot product, scatter + gather) does not matter: it is checked by
// evaluating the routing on probe inputs.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <string>
#include <vector>

namespace moe {

struct Expert {
  int64_t index = 0;
  std::string output;              // expert_e(x)
  std::string weight;              // weight_e, computed from the TopK outputs
  std::string term;                // Mul(expert_e(x), weight_e)
  std::vector<std::string> nodes;  // the expert's own nodes (names), x excluded
};

struct MoeBlock {
  int64_t layer = -1;     // the decoder layer (the KV cache its input reads), else the block's ordinal
  std::string x;          // the block input (router and experts read it)
  std::string logits;     // router logits (the Softmax input)
  std::string softmax;    // Softmax node name
  std::string probs;      // TopK input
  std::string topk;       // TopK node name
  std::string top_values; // TopK output 0
  int64_t k = 0, experts = 0;
  bool renormalize = false;
  std::vector<Expert> expert_terms;
};

// Throws nf::Error naming the node when a TopK looks like routing but the rest does not fit.
std::vector<MoeBlock> find_moe_blocks(const nf::graph::GraphView& view);

}  // namespace moe
