// ALiBi in the static layout: a model that counts its key positions from attention_mask
// (Bloom: cumsum over the mask, times per-head slopes, added to the scores) reads them from
// the input key_positions instead, since a cache slot is not a position.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>

#include <string>
#include <vector>

#include "attention_sites.h"

namespace arcl {

// Rewrites the position-bias subgraph of `sites` to read key_positions [1, cl] (int64: each
// key column's absolute position, the cache slots then this pass's rows): each CumSum over
// the mask becomes key_positions + 1, and the mask's other reads in that subgraph (the
// padding factor, its shape) read ones of [1, cl]; padding lives in the additive mask.
// Returns false when no layer has a position bias. Throws nf::Error on a form it cannot map.
bool read_key_positions(nf::Graph g, nf::graph::GraphView& view, nf::graph::UniqueNames& names,
                        const std::vector<LayerSites>& sites, const std::string& source_mask, nf_dtype mask_dtype,
                        int64_t cl);

}  // namespace arcl
