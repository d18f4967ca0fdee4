// Constant folding: evaluates every node whose inputs are all constant (initializers,
// Constant nodes, Shape of a value with a static type, results of earlier folds) and
// replaces it by initializers. Shape inference runs alongside so that Shape nodes fold as
// soon as their input's shape is known, which removes the Shape/Gather/Concat/Reshape
// subgraphs of torch exports once the graph inputs have static shapes.
#pragma once

#include <npuforge/plugin.hpp>

#include <cstddef>

namespace nf::graph {

struct FoldOptions {
  // Nodes whose results are bigger stay (folding a weight transpose would duplicate the
  // weight); shape subgraphs are tiny.
  size_t max_result_bytes = size_t{16} << 20;
};

struct FoldResult {
  size_t folded_nodes = 0;
};

FoldResult fold_constants(Graph g, const FoldOptions& opts = {});

}  // namespace nf::graph
