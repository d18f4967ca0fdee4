// GPT-BigCode as optimum exported it with transformers < 4.54 (multi-query): one fused cache
// per layer, `past_key_values.N.key_value` [batch, past, 2 x head_dim], and the heads folded
// into the rows. The host reads it as the pairs of transformers >= 4.54 on load
// (host/pipeline/fused_cache.h). See fused_cache.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace nf::graph {

// The layer of a fused cache input's name, or -1.
int64_t fused_cache_layer(const std::string& name);

// Rewrites the fused caches of `g` into key/value pairs, and each layer's attention onto its
// query heads (same numbers; their count from the projection's query columns, else `heads`,
// the config's); no-op when `g` has none. Returns how many layers it
// rewrote; throws nf::Error naming what does not have the legacy form.
int64_t split_fused_caches(nf::Graph g, int64_t heads);

}  // namespace nf::graph
