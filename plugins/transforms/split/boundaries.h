// Where a decoder graph may be cut, found by structure: the embedding lookup's output and
// the end of every decoder layer (the residual-Add heuristic), or the outputs of nodes
// whose names match a user regex.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <string>
#include <vector>

namespace split {

// The output of the token-embedding lookup: a Gather of an initializer table at indices
// computed from input_ids. Throws nf::Error when there is not exactly one.
std::string find_embedding_output(const nf::graph::GraphView& view);

// The residual stream from `embedding` (the embedding output, or its normalization when the
// first layer's residual Add reads that, as Bloom's does): each step is an Add of the stream
// (through no-op Cast/Identity and constant scaling) and a branch computed from it.
// Decoder layer l ends at the last residual Add that reads layer l's KV cache
// (past_key_values.l.*) and no later layer's. Returns one value per layer; throws
// nf::Error naming the layer whose end was not found.
std::vector<std::string> residual_layer_ends(const nf::graph::GraphView& view, const std::string& embedding,
                                             int64_t layers);

// First outputs of the nodes whose name matches `regex` (std::regex_search), in graph
// order (the graph must be sorted). Throws nf::Error when nothing matches.
std::vector<std::string> regex_layer_ends(const nf::graph::GraphView& view, const std::string& regex);

}  // namespace split
