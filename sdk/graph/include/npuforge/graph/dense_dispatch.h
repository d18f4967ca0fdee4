// HF's per-expert dispatch loop, made dense (modeling_mixtral and the MoE models copied from it).
#pragma once

#include <npuforge/plugin.hpp>

#include <cstddef>

namespace nf::graph {

// Each expert of HF's loop runs on the rows that chose it: NonZero of its one-hot mask M
// [k, rows] gives the rows T, the expert reads Gather(x, T), its output times the gathered
// routing weight goes back by ScatterElements into zeros (index_add_; or with reduction add
// into the sum). Rewritten to every row: the expert reads x, its weight is
// ReduceSum(Transpose(M) * routing_weights, -1) [rows, 1] (the row's routing weight when it
// chose the expert, else 0), and the sum adds the product: the same numbers, static shapes.
// The routing that remains is the dense form the moe transform recognises and spinquant
// rotates (both call this first). Returns how many experts it rewrote.
size_t densify_dispatch(nf::Graph g);

// Whether `n` is a ConstantOfShape of float zeros: where HF's loop starts its sum.
bool fills_zeros(const nf::Node& n);

}  // namespace nf::graph
