// The residual stream of a decoder: the embedding output, Casts of it and every residual Add
// of it with a linear layer's output (o_proj, down_proj: the stream's writers), with a sum of
// such outputs (parallel attention and MLP: Phi-2, GPT-NeoX, Falcon, Cohere), with a norm of
// one (Gemma-2/3, OLMo-2) or with a row of a position table (GPT-2's learned positions).
#pragma once

#include <set>

#include "spinquant/graph_walk.h"

namespace spinquant {

// A norm between a writer and its residual Add (Gemma-2/3, OLMo-2): it normalizes the
// writer's output in the unrotated basis, so R1 goes online after it (plugin.cpp) and the
// writer keeps its weights.
struct PostNorm {
  RmsNorm norm;
  Linear writer;
  std::string added;       // the value the residual Add reads: the norm's output, or a Cast of it
  std::string add_output;  // that Add's output
};

struct ResidualStream {
  std::set<std::string> values;
  std::vector<Linear> writers;      // in graph order
  std::vector<std::string> tables;  // 2-D position tables whose rows are added to the stream
  std::vector<PostNorm> post_norms;
  std::vector<Linear> readers;      // linear layers reading the stream with no norm between (OLMo-2)
};

// Throws, naming the node, when the stream reaches a graph output, is added to something that
// is not one of those, or feeds an op that does not commute with a rotation.
// `norms`: the model's RMSNorms, for the post-norms among them.
ResidualStream find_residual_stream(const GraphView& gv, const std::string& embedding_output,
                                    const std::vector<RmsNorm>& norms);

// The writers (post-normed ones included) whose input is the product of an elementwise Mul
// (SwiGLU's gate * up): the MLP down projections.
std::vector<Linear> down_projections(const GraphView& gv, const ResidualStream& stream);

}  // namespace spinquant
