// GPT-BigCode's q/k/v cut (transformers >= 4.54) rewritten to the layout the head-split
// matcher knows (attention_core.cpp). See unit_head_views.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace mha2sha {

// Rewrites each Split or Slice of the last axis of Unsqueeze(x [1, rows, cols], axes [1]);
// returns how many it rewrote.
size_t unit_head_views(nf::Graph g);

}  // namespace mha2sha
