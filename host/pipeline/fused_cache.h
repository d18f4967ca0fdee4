// GPT-BigCode as optimum exported it with transformers < 4.54 keeps each layer's key and value
// in one fused cache tensor, `past_key_values.N.key_value`. On load the host reads it as the
// key/value pairs (and the attention on heads) transformers >= 4.54 exports, the same numbers,
// so every stage, backend and the runner see one layout (sdk graph/fused_cache.h does it).
#pragma once

#include <cstdint>

#include "ir/ir.h"

namespace nf::host {

// Rewrites `g` when it has fused caches; returns the layers it rewrote (0: none). `heads`: the
// config's attention heads, or -1. Throws std::runtime_error with one line otherwise.
int64_t read_fused_cache_as_pairs(ir::Graph& g, int64_t heads);

}  // namespace nf::host
