// R4 (SpinQuant/QuaRot): an online Hadamard on the down projection's input. The graph gets
// x -> x H -> down_proj, and down_proj's weight B becomes H^T B, so the float model is
// unchanged while the quantizer of down_proj's input sees x H, whose outlier channels are
// spread over all channels. H is a fixed orthonormal Hadamard (hadamard.h, no random signs).
//
// H of order K = p q is the Kronecker product P (x) Q of two Hadamards of orders near
// sqrt(K), applied as two small MatMuls on x viewed as p x q blocks:
//   Reshape [-1, p, q] -> MatMul Q -> Transpose -> MatMul P -> Transpose -> Reshape back
// so a layer holds p^2 + q^2 constants instead of K^2 (Llama-3-8B: 128^2 + 112^2 floats
// instead of 14336^2, 822 MB) and a row costs K (p + q) MACs instead of K^2. An order with
// no such split is one dense MatMul.
#pragma once

#include <map>

#include "spinquant/rotate.h"

namespace spinquant {

// One MatMul of an online rotation (model-set metadata "online_rotations", read by the
// quant recipes): `weight` is a Hadamard factor, `input` its activation; `inner` when its
// output is an intermediate of the rotation (kept at the input's bits, not the layer's).
struct OnlineRotation {
  std::string weight;
  std::string input;
  std::string output;
  bool inner = false;
};

// The split K = p q (p a power of two, both orders buildable) that minimises p^2 + q^2;
// p = 1 when there is none.
int64_t outer_order(int64_t K);

// Writes y = x R into the graph: R = P (x) Q as the two small MatMuls above (factors named
// `tag`.p<p> / .q<q>), else one MatMul by R (named `tag`). Returns the MatMuls.
std::vector<OnlineRotation> write_online_rotation(nf::Graph& g, const std::string& x, const std::string& y, const Rotation& R,
                                                  const std::string& tag);

// Inserts the rotation before each of `down_projs` (MatMul only; a Gemm weight is rotated on
// the same side) and schedules H^T B in `edits`, with H kept in `hadamards` (one per input
// size) until the edits are applied. Throws when the input size has no Hadamard here
// (hadamard.h orders).
std::vector<OnlineRotation> insert_online_hadamards(GraphView& gv, const std::vector<Linear>& down_projs,
                                                    WeightEdits& edits, std::map<int64_t, Rotation>& hadamards);

}  // namespace spinquant
