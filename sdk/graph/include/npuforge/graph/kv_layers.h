// Which decoder layer a value belongs to, read from the dataflow: the highest N whose KV
// cache input (past_key_values.N.key / .value, the optimum layout arcl keeps) the value is
// computed from. A layer's attention, MLP and residual Adds all read its own cache and no
// later layer's, whatever the names or the order of the nodes.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <map>
#include <string>

namespace nf::graph {

// Every value computed from some KV cache input through data (not through the shapes it
// borrows), with its layer. The graph must be sorted.
std::map<std::string, int64_t> kv_layer_of_values(const GraphView& view);

}  // namespace nf::graph
