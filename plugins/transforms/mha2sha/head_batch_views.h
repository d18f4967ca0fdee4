// Bloom's attention with its heads folded into the batch, rewritten to the layout the
// head-split matcher knows (attention_core.cpp). See head_batch_views.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace mha2sha {

// Lifts each span that runs on [heads, rows, d] views of [1, heads, rows, d] values back to
// rank 4; returns how many views it removed.
size_t head_batch_views(nf::Graph g);

}  // namespace mha2sha
