// Removes experts from MoE blocks: their router logits are masked before the Softmax (so
// top-k picks among the kept experts only) and their terms leave the sum, which leaves
// their nodes and weights dead.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>

#include <set>

#include "moe_block.h"

namespace moe {

void remove_experts(nf::graph::GraphView& view, nf::graph::UniqueNames& names, const MoeBlock& b,
                    const std::set<int64_t>& removed);

}  // namespace moe
