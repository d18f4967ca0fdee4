// The draft as a graph of the model set (the build hook) and its IO names.
#pragma once

#include <npuforge/plugin.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace eaglet {

inline constexpr const char* kDraftGraph = "eaglet_draft";
inline constexpr const char* kFeatureInput = "target_hidden_states";  // f_i, the target's LM head input
inline constexpr const char* kFeatureOutput = "hidden_states";        // the draft's own features, in draft.onnx
// ... and in the model set, apart from the target's hidden_states output (which feeds it).
inline constexpr const char* kFeatureOutputInSet = "eaglet_draft/hidden_states";

// The tree a step drafts: `depth` draft passes, `branches` nodes expanded per depth and
// children per node. depth 0: no tree graph asked for.
struct TreeShape {
  int64_t depth = 0, branches = 0;
};

// Adds `dir`/draft.onnx to `ms` as graph kDraftGraph, role "draft" (graph_roles.hpp), its names
// apart from the target's; with draft_vocab > 0 its LM head keeps the first draft_vocab
// tokens of the token map; with a `tree` the role asks arcl for the depth loop as one graph
// (role draft_tree). Throws nf::Error and leaves `ms` as it was on a refusal.
void add_draft_graph(const std::string& dir, int64_t draft_vocab, const TreeShape& tree, nf::ModelSet ms);
std::vector<int32_t> keep_head_rows(const std::string& dir, int64_t rows, nf::Graph draft);

}  // namespace eaglet
