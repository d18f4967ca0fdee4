#include "npuforge/graph/unique_names.h"

namespace nf::graph {

UniqueNames::UniqueNames(const Graph& g) {
  for (const Node& n : g.nodes()) {
    used_.insert(std::string(n.name()));
    for (auto& v : n.inputs()) used_.insert(v);
    for (auto& v : n.outputs()) used_.insert(v);
  }
  for (auto& v : g.inputs()) used_.insert(v);
  for (auto& v : g.outputs()) used_.insert(v);
  for (auto& v : g.initializer_names()) used_.insert(v);
}

std::string UniqueNames::make(std::string_view base) {
  std::string name(base);
  for (int i = 1; used_.count(name); ++i) name = std::string(base) + "_" + std::to_string(i);
  used_.insert(name);
  return name;
}

}  // namespace nf::graph
