// Per-head norms on a view that folds the heads into the rows (ONNX Runtime GenAI's q/k
// norms) rewritten to the layout the head-split matcher knows (attention_core.cpp). See
// row_head_views.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace mha2sha {

// Gives each span of last-axis ops between Reshape(x [b, rows, heads x d], -> [b, rows x heads,
// d]) and a Reshape back to [b, rows, heads x d] the view [b, rows, heads, d]; returns how many
// spans it rewrote.
size_t row_head_views(nf::Graph g);

}  // namespace mha2sha
