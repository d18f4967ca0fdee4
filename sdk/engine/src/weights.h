// Packing of constant MatMul/Gemm weights: fp32, weight-only int8/int4 from the session
// options, or the exact integer grid of an AIMET encoding attached to the weight.
#pragma once

#include <npuforge/plugin.h>

#include <memory>
#include <string>
#include <vector>

#include "npuforge/engine/executor.h"

namespace nf::engine {

// The kernel grid an encoding puts on a weight of K inputs and N output channels (channel
// axis `nk ? 0 : 1`): w = (q + zero) * scale, q signed in `bits` bits, scale and zero
// [N, blocks] channel-major. Throws naming `name` when the encoding does not fit the shape.
struct WeightGrid {
  int bits = 8;
  int64_t block = 0, blocks = 1;
  std::vector<float> scale, zero;
};
WeightGrid weight_grid(const std::string& name, int64_t K, int64_t N, bool nk, const nf_encoding& e);

// w: float32 [K, N] (or [N, K] when w_is_nk, i.e. Gemm transB). enc may be null.
k::PackedWeight pack_weight(const std::string& name, const k::Tensor& w, bool w_is_nk, const nf_encoding* enc,
                            const SessionOptions& opts);

}  // namespace nf::engine
