// LayerNorm made rotatable (SliceGPT, Ashkboos et al. 2024; QuaRot). A LayerNorm's mean
// does not commute with a rotation, but once every contribution to the residual stream is
// centred (the embedding's rows, position tables, each writer's output columns and bias:
// rotate.h, WeightEdits::centre_*), the stream has zero mean per token. There a mean
// subtraction is the identity and LayerNorm(x) = RMSNorm(x) with the same gain, bias and eps;
// the bias then folds into the layers that read the norm, and the rotations apply as to an
// RMSNorm model.
#pragma once

#include <string>
#include <vector>

#include "spinquant/graph_walk.h"

namespace spinquant {

// Rewrites each LayerNormalization node as gain * x / sqrt(mean(x^2) + eps) (+ bias), and
// drops each mean subtraction x - mean(x) over the last axis (the LayerNorm that exports
// below opset 17 write out). Returns the values whose mean was taken: the caller centres the
// stream and checks that these are on it (the rewrite is exact only there).
std::vector<std::string> drop_mean_subtractions(nf::Graph& g);

// Folds the 1-D constant added after a norm's gain into the linear layers that read it:
// (n + beta) B + b = n B + (beta B + b). A layer without a bias gets one. Returns how many.
size_t fold_norm_biases(GraphView& gv, const std::vector<RmsNorm>& norms);

}  // namespace spinquant
