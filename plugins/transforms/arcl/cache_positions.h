// Positions counted from the cache's length. A decoder exported without position_ids
// numbers this pass's rows arange(past_len, past_len + seq) from the past cache's shape
// (transformers' cache_position, and the position ids models derive from it when none are
// given). In a static variant that shape is the slot count, not the tokens seen, so each
// such Range reads the input position_ids instead.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>

#include "model_info.h"

namespace arcl {

// Replaces every live Range that starts at a past cache input's length (its start computed
// from that shape and constants alone, step 1) by position_ids [1, AR] as a row, cast to the
// Range's type. Returns how many; the caller adds position_ids to the inputs.
size_t read_cache_positions(nf::Graph g, nf::graph::UniqueNames& names, const ModelInfo& info);

}  // namespace arcl
