#include "npuforge/graph/kv_layers.h"

#include <algorithm>
#include <regex>

namespace nf::graph {

std::map<std::string, int64_t> kv_layer_of_values(const GraphView& view) {
  static const std::regex kv(R"(^past_key_values\.(\d+)\.(key|value)$)");
  std::map<std::string, int64_t> layer;
  std::smatch m;
  for (const std::string& in : view.graph().inputs())
    if (std::regex_match(in, m, kv)) layer[in] = std::stoll(m[1].str());
  for (const Node& n : view.nodes()) {
    if (n.op_type() == "Shape" || n.op_type() == "Size") continue;
    int64_t l = -1;
    for (const std::string& in : n.inputs())
      if (auto it = layer.find(in); it != layer.end()) l = std::max(l, it->second);
    if (l >= 0)
      for (const std::string& out : n.outputs()) layer[out] = l;
  }
  return layer;
}

}  // namespace nf::graph
