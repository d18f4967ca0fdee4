// ONNX Runtime's block-quantized weights. GenAI's int4 exports (`-p int4`) and ONNX Runtime's
// MatMulNBitsQuantizer keep each linear weight as MatMulNBits (com.microsoft): codes of `bits`
// bits in blocks of `block_size` along K, a scale per block and column, optional packed zero
// points (else 2^(bits-1)). A tied table quantized with them (GenAI's shared embeddings, the
// quantizer's Gather) is read by GatherBlockQuantized: the same codes per table row, often
// the LM head's own behind a Reshape. The stages take float weights (the quant recipes
// requantize them to what the target runs), so on load each MatMulNBits becomes a MatMul over
// its dequantized [K, N] weight and each GatherBlockQuantized a Gather of its dequantized
// table, (code - zero point) x scale: the numbers they compute with float activations.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ir/ir.h"

namespace nf::host {

struct DequantizedNBits {
  size_t weights = 0;  // MatMulNBits nodes rewritten
  size_t tables = 0;   // GatherBlockQuantized nodes rewritten
  uint64_t bytes = 0;  // their float32 weights' bytes
};

// The MatMulNBits and GatherBlockQuantized nodes of g's top level.
size_t nbits_nodes(const ir::Graph& g);
// The elements of the float weight or table such a node becomes (K x N, rows x K); 0 for any
// other node (or one whose sizes are not known).
uint64_t nbits_weight_elements(const ir::Graph& g, const ir::Node& n);

// Rewrites them; `keep` receives each float weight as it is made (WeightSpill), so the
// dequantizing never holds more than one new tensor in memory. Codes, scales and zero points
// may be initializers or behind an Identity, Reshape or same-type Cast of one. Throws
// std::runtime_error with one line naming the node for a form it does not read (g_idx, float
// zero points, other gather or quantize axes, codes or scales that are not constants of the
// declared shape).
DequantizedNBits dequantize_nbits_nodes(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep = {});

}  // namespace nf::host
