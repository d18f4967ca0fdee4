// optimum's merged decoders (decoder_model_merged.onnx, optimum 1.8 to 1.13, still common on
// the Hub): one If on a bool graph input (use_cache_branch) holds the decoder with a KV cache
// in one branch and the decoder without one in the other. The branch that reads
// past_key_values computes the other's outputs as well when the cache is empty (which is why
// optimum could merge them), so on load it replaces the If and the condition input goes: the
// optimum layout every stage and runner knows.
#pragma once

#include <string>

#include "ir/ir.h"

namespace nf::host {

// Inlines that branch in g's top level; returns the If's name ("" when g has no such If, or
// the branch holds subgraphs of its own).
std::string inline_cache_branch(ir::Graph& g);

}  // namespace nf::host
