// The residual stream of a decoder: the embedding output, Casts of it and every residual Add
// of it with a linear layer's output (o_proj, down_proj: the stream's writers), with a sum of
// such outputs (parallel attention and MLP: Phi-2, GPT-NeoX, Falcon, Cohere) or with a row
// of a position table (GPT-2's learned positions).
#pragma once

#include <set>

#include "spinquant/graph_walk.h"

namespace spinquant {

struct ResidualStream {
  std::set<std::string> values;
  std::vector<Linear> writers;      // in graph order
  std::vector<std::string> tables;  // 2-D position tables whose rows are added to the stream
};

// Throws, naming the node, when the stream reaches a graph output, is added to something that
// is not one of those, or feeds an op that does not commute with a rotation.
ResidualStream find_residual_stream(const GraphView& gv, const std::string& embedding_output);

// The writers whose input is the product of an elementwise Mul (SwiGLU's gate * up): the MLP
// down projections.
std::vector<Linear> down_projections(const GraphView& gv, const ResidualStream& stream);

}  // namespace spinquant
