// Baichuan's fused W_pack cut rewritten to the layout the head-split matcher knows
// (attention_core.cpp). See part_views.cpp.
#pragma once

#include <npuforge/plugin.hpp>

namespace mha2sha {

// Rewrites each Gather of one part of a projection viewed as [1, rows, parts, width] (through
// axis moves that keep rows before width) into a Slice of the projection's columns; returns
// how many it rewrote.
size_t part_views(nf::Graph g);

}  // namespace mha2sha
