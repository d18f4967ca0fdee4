// Some tools write a model's weights as Constant nodes instead of initializers (graph
// surgery and rewriting tools, exporters run without their constant lifting). The stages
// find weights as the initializers a MatMul or Gather reads (the quant recipes encode them,
// the backends pack them, the size estimate counts them), so on load every Constant node
// holding a float tensor of rank 2 or more that a MatMul, Gemm, Gather or Transpose reads
// becomes the initializer of its output's name: the same graph, the same values. Other
// constants (masks, rotary tables, ALiBi buffers) stay nodes.
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace nf::host {

// Lifts them in g's top level; returns how many.
size_t lift_constant_weights(ir::Graph& g);

}  // namespace nf::host
