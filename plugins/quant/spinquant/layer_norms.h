// LayerNorm made rotatable (SliceGPT, Ashkboos et al. 2024; QuaRot). A LayerNorm's mean
// does not commute with a rotation, but once every contribution to the residual stream is
// centred (the embedding's rows, position tables, each writer's output columns and bias:
// rotate.h, WeightEdits::centre_*), the stream has zero mean per token. There a mean
// subtraction is the identity and LayerNorm(x) = RMSNorm(x) with the same gain, bias and eps;
// the bias then folds into the layers that read the norm, and the rotations apply as to an
// RMSNorm model.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "spinquant/graph_walk.h"

namespace spinquant {

// All of the below for a model with LayerNorms: the rewrite, the checks that every centred
// value is on the residual stream (which starts at `embedding_output`) and that no RMSNorm of
// the hidden size `D` reads the stream too, and the bias fold. Returns the centred values
// (none: no LayerNorm; the caller then centres nothing) and counts the folded biases.
// Norms of values in `before_stream` (computed before the stream starts: Bloom's embedding
// norm) are left as they are.
std::vector<std::string> rewrite_layer_norms(nf::Graph& g, const std::string& embedding_output, int64_t D,
                                             const std::set<std::string>& before_stream, size_t* folded_biases);

// Rewrites each LayerNormalization node as gain * x / sqrt(mean(x^2) + eps) (+ bias), and
// drops each mean subtraction x - mean(x) over the last axis (the LayerNorm that exports
// below opset 17 write out). Returns the values whose mean was taken: the caller centres the
// stream and checks that these are on it (the rewrite is exact only there).
std::vector<std::string> drop_mean_subtractions(nf::Graph& g, const std::set<std::string>& before_stream);

// Folds the 1-D constant added after a norm's gain into the linear layers that read it:
// (n + beta) B + b = n B + (beta B + b). A layer without a bias gets one. Returns how many.
size_t fold_norm_biases(GraphView& gv, const std::vector<RmsNorm>& norms);

}  // namespace spinquant
