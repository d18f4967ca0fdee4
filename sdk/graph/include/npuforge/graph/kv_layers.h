// Which decoder layer a value belongs to, read from the dataflow: the highest N whose KV
// cache input (past_key_values.N.key / .value, the optimum layout arcl keeps) the value is
// computed from. A layer's attention, MLP and residual Adds all read its own cache and no
// later layer's, whatever the names or the order of the nodes.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <map>
#include <optional>
#include <string>

namespace nf::graph {

// Every value computed from some KV cache input through data (not through the shapes it
// borrows), with its layer (in dataflow order: the graph need not be sorted).
std::map<std::string, int64_t> kv_layer_of_values(const GraphView& view);

// Where the residual stream begins when the embedding is normalized first (Bloom's
// word_embeddings_layernorm; spinquant then projects it): the operand of the first layer's
// residual Add that is computed from the embedding and no cache, when a LayerNorm (or a mean)
// lies between. Nothing when the embedding output (or its constant scaling) is the stream.
// `kv_layer` is kv_layer_of_values(view).
std::optional<std::string> normalized_embedding(const GraphView& view, const std::string& embedding,
                                                const std::map<std::string, int64_t>& kv_layer);

}  // namespace nf::graph
