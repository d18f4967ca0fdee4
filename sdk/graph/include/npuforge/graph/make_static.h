// The static-shape pipeline transforms run after fixing input shapes: fold constants,
// drop dead nodes, type every value. Fails naming the first value that stays dynamic.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>

#include "npuforge/graph/fold_constants.h"

namespace nf::graph {

struct MakeStaticResult {
  size_t folded_nodes = 0;
  size_t dead_nodes = 0;
};

// The graph inputs must already carry static types. Throws nf::Error when a value keeps
// an unknown shape or a Shape node survives; `what` prefixes the message.
MakeStaticResult make_static(Graph g, const std::string& what, const FoldOptions& opts = {});

}  // namespace nf::graph
