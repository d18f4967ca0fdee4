// Fresh value and node names that collide with nothing already in a graph.
#pragma once

#include <npuforge/plugin.hpp>

#include <set>
#include <string>
#include <string_view>

namespace nf::graph {

class UniqueNames {
 public:
  // Reserves every value, node, initializer, input and output name of the graph.
  explicit UniqueNames(const Graph& g);
  // `base` when free, else base_1, base_2, ...; the result is reserved.
  std::string make(std::string_view base);
  void reserve(const std::string& name) { used_.insert(name); }

 private:
  std::set<std::string> used_;
};

}  // namespace nf::graph
