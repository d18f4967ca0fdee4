// optimum's decoder layout feeds input_ids, attention_mask and position_ids as int64, and so
// do the runners. Some exporters trace them as int32 (ids from a hand-made int32 tensor, or
// tools that narrow them). On load each such int32 input becomes int64 and a Cast to int32
// feeds its readers: the same graph, with the inputs the runners give.
#pragma once

#include <cstddef>

#include "ir/ir.h"

namespace nf::host {

// Rewrites them in g; returns how many.
size_t int64_decoder_inputs(ir::Graph& g);

}  // namespace nf::host
