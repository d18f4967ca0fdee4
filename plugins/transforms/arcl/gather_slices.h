// GatherElements that reads whole slices becomes Gather (GPT-J's rotary tables).
#pragma once

#include <npuforge/plugin.hpp>

#include <cstddef>

namespace arcl {

// GatherElements(data, index, axis a) whose index is a Tile or Expand of one position per
// slot along a (size 1 on every other axis), spread over data's other axes, reads whole
// slices of data: it is Gather(data, positions, axis a). GPT-J's export gathers its sin / cos
// rows so (torch.gather of the sinusoid table by position_ids repeated over the rotary dims);
// NPU compilers gather rows by DMA but take no element-wise gather (ARIES). Needs static
// types (after make_static). Returns how many nodes it rewrote.
size_t gather_slices(nf::Graph g);

}  // namespace arcl
