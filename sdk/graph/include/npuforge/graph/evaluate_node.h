// Computes one ONNX node on constant inputs with the reference kernels: what constant
// folding runs. A front for a graph's nodes over the operator table (operators.h).
#pragma once

#include <npuforge/kernels/tensor.h>
#include <npuforge/plugin.hpp>

#include <vector>

namespace nf::graph {

// True when evaluate_node knows the node's op (ai.onnx domain only).
bool can_evaluate(const Node& n);
// `inputs[i]` is null for an omitted optional input; `opset` is the graph's (0: the newest
// semantics). Throws kernels::KernelError or nf::Error with the node's name on bad input.
std::vector<kernels::Tensor> evaluate_node(const Node& n, const std::vector<const kernels::Tensor*>& inputs,
                                           int64_t opset = 0);

}  // namespace nf::graph
