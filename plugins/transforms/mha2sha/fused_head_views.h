// Bloom's fused q/k/v head view rewritten to the layout the head-split matcher knows
// (attention_core.cpp). See fused_head_views.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace mha2sha {

// Rewrites each Gather of one q/k/v part from a [1, rows, heads, parts, head_dim] view;
// returns how many it rewrote.
size_t fused_head_views(nf::Graph g);

}  // namespace mha2sha
