// Packing of constant MatMul/Gemm weights: fp32, weight-only int8/int4 from the session
// options, or the exact integer grid of an AIMET encoding attached to the weight.
#pragma once

#include <npuforge/plugin.h>

#include <memory>
#include <string>

#include "executor.h"

namespace nf::cpu {

// w: float32 [K, N] (or [N, K] when w_is_nk, i.e. Gemm transB). enc may be null.
k::PackedWeight pack_weight(const std::string& name, const k::Tensor& w, bool w_is_nk, const nf_encoding* enc,
                            const SessionOptions& opts);

}  // namespace nf::cpu
