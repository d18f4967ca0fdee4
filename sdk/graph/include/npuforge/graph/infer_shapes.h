// Static shape inference: output types of a node from its input types (and the values of
// its constant inputs, e.g. a Reshape's shape), and a pass that types a whole graph.
#pragma once

#include <npuforge/kernels/tensor.h>
#include <npuforge/plugin.hpp>

#include <map>
#include <string>
#include <vector>

#include "npuforge/graph/value_types.h"

namespace nf::graph {

// One entry per node output; unknown outputs keep dtype UNDEFINED / no dims.
// `values[i]` is the value of input i when it is constant, else null.
std::vector<TensorType> infer_node_types(const Node& n, const std::vector<TensorType>& inputs,
                                         const std::vector<const kernels::Tensor*>& values);

struct InferShapesResult {
  size_t typed = 0;                     // node outputs with a fully static type
  std::vector<std::string> not_static;  // node outputs whose type stays unknown or partial
};
// Types every node output from the graph inputs' types and the initializers, in
// topological order, and records the types in the graph.
InferShapesResult infer_shapes(Graph g);

}  // namespace nf::graph
