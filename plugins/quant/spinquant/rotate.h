// Fusing RMSNorm gains and orthogonal rotations into weights.
//   residual x' = x R (R orthogonal, R R^T = I); RMSNorm without gain commutes with R.
//   reader (q/k/v/gate/up/lm_head, B = [K, N]): B' = R^T B        (input side)
//   writer (o/down, B = [K, N]):                B' = B R, b' = b R (output side)
//   embedding E = [V, D]:                        E' = E R
// R2 (per head on v/o): v's output columns and o's input rows, block-diagonal in head_dim.
#pragma once

#include <vector>

#include "spinquant/graph_walk.h"

namespace spinquant {

struct FusedNorm {
  RmsNorm norm;
  std::vector<Linear> readers;
};

// Multiplies every reader's input rows by the gain and sets the gain to ones.
std::vector<FusedNorm> fuse_norm_gains(GraphView& gv, const std::vector<RmsNorm>& norms);

// B' = blockdiag(R)^T B on the input side of `l` (R is r x r, row-major, K % r == 0).
void rotate_input(nf::Graph& g, const Linear& l, const std::vector<double>& R, int64_t r);
// B' = B blockdiag(R) (and its bias) on the output side of `l` (N % r == 0).
void rotate_output(nf::Graph& g, const Linear& l, const std::vector<double>& R, int64_t r);
// M' = M blockdiag(R) for a row-major [rows, cols] initializer (cols % r == 0).
void rotate_columns(nf::Graph& g, const std::string& name, const std::vector<double>& R, int64_t r);

}  // namespace spinquant
