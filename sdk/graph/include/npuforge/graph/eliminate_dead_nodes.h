// Removes nodes none of whose outputs reach a graph output, then initializers nothing
// reads any more.
#pragma once

#include <npuforge/plugin.hpp>

#include <cstddef>

namespace nf::graph {

struct DeadNodeResult {
  size_t nodes = 0;
  size_t initializers = 0;
};

DeadNodeResult eliminate_dead_nodes(Graph g);

}  // namespace nf::graph
