#include "calibration/segments.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <set>

namespace nf::host {
namespace {

bool has_subgraphs(const ir::Graph& g) {
  for (const auto& n : g.nodes)
    for (const auto& [name, a] : n->attrs)
      if (a.g || a.type == NF_ATTR_GRAPH) return true;
  return false;
}

}  // namespace

GraphSegments cut_into_segments(const ir::Graph& g) {
  std::map<std::string, size_t> cache_segment;  // past_key_values.N.* -> N + 1
  for (const auto& in : g.inputs)
    if (auto kv = decoder::parse_kv(in); kv && !kv->present) cache_segment[in] = static_cast<size_t>(kv->layer) + 1;
  const bool one_segment = cache_segment.empty() || has_subgraphs(g);

  // Each node's segment: the latest segment of what it reads. Nodes computed from
  // initializers alone (a tied LM head's Transpose, shape constants) are copied into every
  // segment that reads them, where the backend folds them, rather than carried across.
  const std::vector<size_t> order = g.execution_order();
  auto node = [&](size_t i) -> const ir::Node& { return *g.nodes[order[i]]; };
  std::map<std::string, size_t> constant_producer;  // value -> index in `order`
  for (size_t i = 0; i < order.size() && !one_segment; ++i) {
    const ir::Node& n = node(i);
    bool constant = std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) {
      return in.empty() || g.initializers.count(in) || constant_producer.count(in);
    });
    if (constant)
      for (const auto& o : n.outputs)
        if (!o.empty()) constant_producer[o] = i;
  }
  std::map<std::string, size_t> segment_of;
  std::vector<size_t> node_segment(order.size(), 0);
  size_t last = 0;
  for (size_t i = 0; i < order.size() && !one_segment; ++i) {
    const ir::Node& n = node(i);
    if (!n.outputs.empty() && constant_producer.count(n.outputs[0])) continue;
    const bool reads_shape_only = n.op_type == "Shape" || n.op_type == "Size";
    size_t s = 0;
    for (const auto& in : n.inputs) {
      if (auto it = segment_of.find(in); it != segment_of.end()) s = std::max(s, it->second);
      else if (auto c = cache_segment.find(in); c != cache_segment.end() && !reads_shape_only) s = std::max(s, c->second);
    }
    node_segment[i] = s;
    last = std::max(last, s);
    for (const auto& o : n.outputs)
      if (!o.empty()) segment_of[o] = s;
  }

  // Number the non-empty segments densely.
  std::vector<size_t> dense(last + 1, SIZE_MAX);
  size_t count = 0;
  for (size_t s : node_segment)
    if (dense[s] == SIZE_MAX) dense[s] = 0;
  for (auto& d : dense)
    if (d != SIZE_MAX) d = count++;
  GraphSegments result;
  result.segments.resize(std::max<size_t>(count, 1));
  std::vector<std::vector<size_t>> members(result.segments.size());
  for (size_t i = 0; i < order.size(); ++i)
    if (node(i).outputs.empty() || !constant_producer.count(node(i).outputs[0]))
      members[dense[node_segment[i]]].push_back(i);
  std::vector<std::set<size_t>> with(members.size());  // node indices of each segment
  std::set<size_t> placed;
  for (size_t s = 0; s < members.size(); ++s) {
    // The constant nodes this segment reads, and the ones they read.
    with[s].insert(members[s].begin(), members[s].end());
    std::vector<size_t> todo(members[s]);
    while (!todo.empty()) {
      size_t i = todo.back();
      todo.pop_back();
      for (const auto& in : node(i).inputs)
        if (auto c = constant_producer.find(in); c != constant_producer.end() && with[s].insert(c->second).second)
          todo.push_back(c->second);
    }
    placed.insert(with[s].begin(), with[s].end());
  }
  for (size_t i = 0; i < order.size(); ++i)  // constants only a graph output reads
    if (!placed.count(i)) with[0].insert(i);
  for (size_t s = 0; s < with.size(); ++s)
    for (size_t i : with[s]) {  // in execution order
      result.segments[s].nodes.push_back(order[i]);
      for (const auto& o : node(i).outputs)
        if (!o.empty() && !result.segment_of.count(o)) result.segment_of[o] = s;
    }

  // Inputs, initializers and the values carried past each segment.
  std::vector<std::set<std::string>> carried(result.segments.size());
  for (size_t s = 0; s < result.segments.size(); ++s) {
    GraphSegment& seg = result.segments[s];
    std::set<std::string> seen;
    for (size_t i : seg.nodes)
      for (const auto& in : g.nodes[i]->inputs) {
        if (in.empty() || !seen.insert(in).second) continue;
        if (g.initializers.count(in)) {
          seg.initializers.push_back(in);
          continue;
        }
        auto p = result.segment_of.find(in);
        if ((p != result.segment_of.end() && p->second == s) || constant_producer.count(in)) continue;
        seg.inputs.push_back(in);
        const size_t from = p == result.segment_of.end() ? 0 : p->second;  // graph inputs: from the start
        for (size_t c = from; c < s; ++c) carried[c].insert(in);
      }
    if (one_segment)  // subgraph bodies may read graph inputs no node lists
      for (const auto& in : g.inputs)
        if (!g.initializers.count(in) && std::find(seg.inputs.begin(), seg.inputs.end(), in) == seg.inputs.end())
          seg.inputs.push_back(in);
  }
  for (size_t s = 0; s < result.segments.size(); ++s)
    result.segments[s].carried.assign(carried[s].begin(), carried[s].end());
  return result;
}

}  // namespace nf::host
