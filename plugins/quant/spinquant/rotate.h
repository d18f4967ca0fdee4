// Fusing RMSNorm gains and orthogonal rotations into weights.
//   residual x' = x R (R orthogonal, R R^T = I); RMSNorm without gain commutes with R.
//   reader (q/k/v/gate/up/lm_head, B = [K, N]): B' = R^T B        (input side)
//   writer (o/down, B = [K, N]):                B' = B R, b' = b R (output side)
//   embedding E = [V, D]:                        E' = E R
// Centring C = I - 1 1^T / D (LayerNorm models, layer_norms.h) multiplies the same sides as R:
// a writer's output columns, its bias and the embedding's rows lose their mean.
// R2 (per head on v/o): v's output columns and o's input rows, block-diagonal in head_dim.
// The edits are collected while the graph is walked and applied in one pass per weight (read
// once, written once), in the order they were asked for, rounding to float after each as a
// separate rewrite would: an 8B model is rewritten once, not once per edit.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "spinquant/graph_walk.h"
#include "spinquant/rotation.h"

namespace spinquant {

class WeightEdits {
 public:
  // B <- diag(gain) B on the input side of `l` (gain has K entries).
  void scale_input(const Linear& l, const std::vector<float>& gain);
  // B' = blockdiag(R)^T B on the input side of `l` (K a multiple of R's size).
  void rotate_input(const Linear& l, const Rotation& R);
  // B' = B blockdiag(R) and b' = b blockdiag(R) on the output side of `l`.
  void rotate_output(const Linear& l, const Rotation& R);
  // M' = M blockdiag(R) for a row-major 2-D initializer [rows, cols] (the embedding).
  void rotate_columns(const std::string& name, const Rotation& R);
  // B' = B C, b' = b C on the output side of `l`: each output row loses its mean.
  void centre_output(const Linear& l);
  // M' = M C for a row-major 2-D initializer: each row loses its mean.
  void centre_columns(const std::string& name);

  // Rewrites every edited initializer (the Rotations given must still live); reports
  // progress per weight. Throws when a size is not a multiple of its rotation's.
  void apply(nf::Graph& g, const nf::Context& ctx) const;

 private:
  // One edit of a weight seen as a row-major matrix: mixes, scales or centres along axis 0
  // (rows) or 1 (columns).
  struct Step {
    int axis = 0;
    const Rotation* rotation = nullptr;
    std::vector<float> gain;  // when rotation is null and centre is false
    bool centre = false;      // subtract the mean along the axis
  };
  void add(const std::string& name, Step s);
  std::vector<std::string> order_;
  std::map<std::string, std::vector<Step>> steps_;
};

struct FusedNorm {
  RmsNorm norm;
  std::vector<Linear> readers;
};

// Schedules every reader's input rows times the gain and sets the gain to ones.
std::vector<FusedNorm> fuse_norm_gains(GraphView& gv, const std::vector<RmsNorm>& norms, WeightEdits& edits);

}  // namespace spinquant
