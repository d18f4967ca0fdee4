// A read-mostly view of a host graph for transforms: who produces each value, who
// consumes it, and small edits that keep those maps right. Built from the ABI alone.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace nf::graph {

class GraphView {
 public:
  explicit GraphView(Graph g);

  Graph graph() const { return g_; }
  // Rebuilds the maps; call after edits made around the view.
  void refresh();

  std::vector<Node> nodes() const { return g_.nodes(); }
  // The nodes in an order that computes every value before its readers, whatever the graph's
  // own order (Kahn's algorithm; the graph is not edited). Nodes on a cycle are left out.
  std::vector<Node> sorted_nodes() const;
  std::optional<Node> producer(const std::string& value) const;
  // Nodes reading `value` (a node appears once even if it reads the value twice).
  const std::vector<Node>& consumers(const std::string& value) const;
  bool is_input(const std::string& value) const { return inputs_.count(value) != 0; }
  bool is_output(const std::string& value) const { return outputs_.count(value) != 0; }
  bool is_initializer(const std::string& value) const { return initializers_.count(value) != 0; }
  // Read by a node or a graph output.
  bool is_used(const std::string& value) const { return !consumers(value).empty() || is_output(value); }

  // Makes every node input and graph output that reads `from` read `to` instead.
  void replace_uses(const std::string& from, const std::string& to);
  // Every value `value` is computed from (itself included), walking producers back to
  // graph inputs and initializers. With `through_shapes` false the walk does not enter the
  // input of Shape/Size nodes: it follows data, not the shapes a value borrows.
  std::set<std::string> upstream(const std::string& value, bool through_shapes = true) const;
  // Whether `value` reads no graph input's data (the shapes it borrows do not count):
  // weights, constants and shapes, e.g. a scale or a Slice bound.
  bool computed_without_inputs(const std::string& value) const;
  // The values of an int64 / int32 initializer or Constant node output; empty when
  // `value` is neither.
  std::vector<int64_t> constant_ints(const std::string& value) const;

 private:
  Graph g_;
  std::map<std::string, nf_node*> producers_;
  std::map<std::string, std::vector<Node>> consumers_;
  std::set<std::string> inputs_, outputs_, initializers_;
};

}  // namespace nf::graph
