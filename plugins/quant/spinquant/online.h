// R4 (SpinQuant/QuaRot): an online Hadamard on the down projection's input. The graph gets
// x -> MatMul(x, H) -> down_proj, and down_proj's weight B becomes H^T B, so the float model
// is unchanged while the 8-bit quantizer of down_proj's input sees x H, whose outlier
// channels are spread over all channels. H is a fixed orthonormal Hadamard (hadamard.h,
// no random signs), one constant per layer.
#pragma once

#include <map>

#include "spinquant/rotate.h"

namespace spinquant {

struct OnlineRotation {
  std::string weight;  // the Hadamard constant
  std::string input;   // x (the SwiGLU product)
  std::string output;  // x H, the new input of down_proj
};

// Inserts the rotation before each of `down_projs` (MatMul only; a Gemm weight is rotated on
// the same side) and schedules H^T B in `edits`, with H kept in `hadamards` (one per input
// size) until the edits are applied. Throws when the input size has no Hadamard here
// (hadamard.h orders).
std::vector<OnlineRotation> insert_online_hadamards(GraphView& gv, const std::vector<Linear>& down_projs,
                                                    WeightEdits& edits, std::map<int64_t, Rotation>& hadamards);

}  // namespace spinquant
