// ALiBi in the static layout: a model that counts its key positions from attention_mask
// (Bloom: cumsum over the mask, times per-head slopes, added to the scores) or adds a buffer
// cut to the keys (MPT) reads them from the input key_positions instead, since a cache slot
// is not a position.
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

// A score Add whose bias constants give once the graph is static (from a buffer or shapes,
// cut to the keys): by node name, since folding replaces values.
struct SlotBias {
  std::string add;   // the Add's name
  size_t slot = 0;   // the bias operand's index
  std::string mask;  // the layer's mask input
};

// Each such bias takes the key columns for consecutive positions. A mask pattern (every value
// 0 or <= -1e4: causality from shapes alone) becomes the layer's mask input. A bias linear
// along the keys with one slope per head and row (MPT's ALiBi, [.., heads, rows, cl])
// becomes that slope times key_positions (the rest is constant along each row, which Softmax
// ignores). Anything else throws nf::Error naming the bias. Returns whether any bias reads
// key_positions now.
bool bias_from_key_positions(nf::Graph g, const std::vector<SlotBias>& biases, int64_t cl, const std::string& what);

}  // namespace arcl
