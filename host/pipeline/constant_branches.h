// ONNX Runtime GenAI's LongRoPE exports (Phi-3.5-mini, Phi-4-mini, the Phi-3 128k models)
// choose their rotary tables at run time: If(total length > original_max_position_embeddings)
// holds the long-factor cos/sin caches in one branch and the short-factor ones in the other,
// each branch nothing but Constant nodes. No stage or engine runs an If, so on load each such
// If becomes standard operators computing the same: per output, both branches' tables stacked
// along axis 0 in one initializer and a Slice of the chosen rows (bounds by Where on the
// condition). In a static variant the condition is a constant and the Slice folds to one table.
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace nf::host {

// Rewrites each If of g's top level whose branches read nothing, hold only constants and
// give tables of one dtype and rank that differ at most in their first dimension; returns
// how many it rewrote.
size_t select_constant_branches(ir::Graph& g);

}  // namespace nf::host
