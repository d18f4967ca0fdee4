// A decoder graph cut into segments that run one after another, so calibration holds one
// decoder layer's weights at a time (packed by the cpu backend, paged in from the mapped
// external data) instead of the whole model.
//
// Segment 0 is every node that no KV cache input feeds (embedding, rotary tables, masks,
// layer 0's first projections); segment N+1 every node computed from past_key_values.N
// through data and from no later cache (layer N's attention onward, up to the projections
// of layer N+1). Shapes read off a cache (Shape, Size) do not count, as in
// npuforge/graph/kv_layers.h, so recipes that group values by kv_layer_of_values ask for
// one segment's values at a time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace nf::host {

struct GraphSegment {
  std::vector<size_t> nodes;            // indices into the graph's nodes, in execution order
  std::vector<std::string> inputs;      // values read here that a graph input or an earlier segment gives
  std::vector<std::string> initializers;
  std::vector<std::string> carried;     // values available after this segment that a later one reads
};

struct GraphSegments {
  std::vector<GraphSegment> segments;
  std::map<std::string, size_t> segment_of;  // computed value -> the segment computing it
};

// Cuts `g` (sorted or not). A graph whose nodes carry subgraphs (If, Loop) or that reads no
// KV cache is one segment.
GraphSegments cut_into_segments(const ir::Graph& g);

}  // namespace nf::host
