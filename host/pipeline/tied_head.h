// A tied LM head as exporters write it with constant folding: torch.onnx folds
// Transpose(embed_tokens.weight) into a second initializer (onnx::MatMul_N, [H, V]), so the
// file holds the embedding twice and every backend would store and quantize it twice.
#pragma once

#include <functional>
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

// ONNX Runtime GenAI's fp32 export of a tied model keeps the table once, as the head's
// [H, V] weight, and gathers the embeddings from Transpose(weight). The form every stage
// knows is the other way round: the table [V, H] gathered, the head reading Transpose(table).
// The table the Gather reads is made an initializer (new bytes: `keep` gets them, as
// WeightSpill) and the head reads its Transpose. Returns the table's name, "" when g has no
// such form; tied_head_as_table tells without changing g.
std::string table_from_tied_head(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep = {});
bool tied_head_as_table(const ir::Graph& g);

}  // namespace nf::host
