// ONNX Runtime GenAI's int4 exports (`-p int4`) and ONNX Runtime's MatMulNBitsQuantizer keep
// each linear weight as MatMulNBits (com.microsoft): codes of `bits` bits in blocks of
// `block_size` along K, a scale per block and column, optional packed zero points (else
// 2^(bits-1)). The stages take float weights (the quant recipes requantize them to what the
// target runs), so on load each such node becomes a MatMul over its dequantized [K, N]
// weight, (code - zero point) x scale: the numbers it computes with float activations.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ir/ir.h"

namespace nf::host {

struct DequantizedNBits {
  size_t weights = 0;  // MatMulNBits nodes rewritten
  uint64_t bytes = 0;  // their float32 weights' bytes
};

// The MatMulNBits nodes of g's top level.
size_t nbits_matmuls(const ir::Graph& g);
// K x N, the float weight a MatMulNBits node becomes; 0 for any other node (or one without
// its K and N).
uint64_t nbits_weight_elements(const ir::Node& n);

// Rewrites them; `keep` receives each float weight as it is made (WeightSpill), so the
// dequantizing never holds more than one new tensor in memory. Throws std::runtime_error
// with one line naming the node for a form it does not read (g_idx, float zero points,
// codes or scales that are not constants of the declared shape).
DequantizedNBits dequantize_nbits_matmuls(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep = {});

}  // namespace nf::host
