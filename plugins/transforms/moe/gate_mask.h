// Routing without indices: the experts whose probability reaches the k-th largest get
// their (renormalised) probability, the others 0 — the same per-expert weights the
// one-hot of the TopK indices built, from float compares and a Where only.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>

#include "moe_block.h"

namespace moe {

// Replaces every use of b.dense by the masked form; the one-hot chain is left dead.
void rewrite_gate(nf::graph::GraphView& view, nf::graph::UniqueNames& names, const MoeBlock& b);

}  // namespace moe
