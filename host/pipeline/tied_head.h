// A tied LM head as exporters write it with constant folding: torch.onnx folds
// Transpose(embed_tokens.weight) into a second initializer (onnx::MatMul_N, [H, V]), so the
// file holds the embedding twice and every backend would store and quantize it twice.
#pragma once

#include <string>

#include "ir/ir.h"

namespace nf::host {

// The LM head's MatMul: the producer "logits" is reached from through single-input ops
// (decoder_io.hpp), or null.
ir::Node* lm_head_matmul(const ir::Graph& g);

// When the LM head's weight (the MatMul whose result reaches "logits" through single-input
// ops) is an initializer equal, element for element, to the transpose of a table that a
// Gather reads, the head reads Transpose(table) instead and the copy is dropped: the graph
// computes the same values from one table. Returns the copy's name, "" when nothing changed.
std::string tie_lm_head(ir::Graph& g);

}  // namespace nf::host
