#include "npuforge/graph/kv_layers.h"

#include <algorithm>
#include <regex>
#include <set>

namespace nf::graph {

std::map<std::string, int64_t> kv_layer_of_values(const GraphView& view) {
  static const std::regex kv(R"(^past_key_values\.(\d+)\.(key|value)$)");
  std::map<std::string, int64_t> layer;
  std::smatch m;
  for (const std::string& in : view.graph().inputs())
    if (std::regex_match(in, m, kv)) layer[in] = std::stoll(m[1].str());
  for (const Node& n : view.sorted_nodes()) {
    if (n.op_type() == "Shape" || n.op_type() == "Size") continue;
    int64_t l = -1;
    for (const std::string& in : n.inputs())
      if (auto it = layer.find(in); it != layer.end()) l = std::max(l, it->second);
    if (l >= 0)
      for (const std::string& out : n.outputs()) layer[out] = l;
  }
  return layer;
}

std::optional<std::string> normalized_embedding(const GraphView& view, const std::string& embedding,
                                                const std::map<std::string, int64_t>& kv_layer) {
  auto reads_cache = [&](const std::string& v) { auto it = kv_layer.find(v); return it != kv_layer.end() && it->second >= 0; };
  // The stream's start: of the operands computed from the embedding without a cache that meet
  // a cache-reading branch in an Add, the one computed from the fewest values (a parallel
  // block's MLP output qualifies too, but it is computed from the start).
  std::optional<std::string> start;
  std::set<std::string> start_up;
  for (const nf::Node& n : view.nodes()) {
    if (n.op_type() != "Add" || n.input_count() != 2) continue;
    for (size_t side : {0, 1}) {
      const std::string& v = n.input(side);
      if (!reads_cache(n.input(1 - side)) || reads_cache(v)) continue;
      std::set<std::string> up = view.upstream(v, false);
      if (up.count(embedding) && (!start || up.size() < start_up.size())) {
        start = v;
        start_up = std::move(up);
      }
    }
  }
  // Only a start after a normalization of the embedding; constant scaling (Gemma) and the
  // embedding itself are the stream already.
  if (start && *start != embedding)
    for (const std::string& u : start_up)
      if (auto p = view.producer(u); p && (p->op_type() == "LayerNormalization" || p->op_type() == "ReduceMean"))
        return start;
  return std::nullopt;
}

}  // namespace nf::graph
