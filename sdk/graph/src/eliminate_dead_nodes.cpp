#include "npuforge/graph/eliminate_dead_nodes.h"

#include <set>
#include <string>
#include <vector>

#include "npuforge/graph/graph_view.h"

namespace nf::graph {

DeadNodeResult eliminate_dead_nodes(Graph g) {
  g.sort();
  GraphView view(g);
  // Walk back from the graph outputs; everything not reached is dead.
  std::set<std::string> live_values;
  for (const std::string& out : g.outputs()) live_values.insert(out);
  std::set<nf_node*> live_nodes;
  std::vector<Node> nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    bool live = false;
    for (const std::string& out : it->outputs())
      if (!out.empty() && live_values.count(out)) live = true;
    if (!live) continue;
    live_nodes.insert(it->get());
    for (const std::string& in : it->inputs())
      if (!in.empty()) live_values.insert(in);
  }

  DeadNodeResult result;
  for (Node n : nodes)
    if (!live_nodes.count(n.get())) {
      g.remove_node(n);
      ++result.nodes;
    }
  for (const std::string& name : g.initializer_names())
    if (!live_values.count(name) && !view.is_input(name)) {
      g.remove_initializer(name);
      ++result.initializers;
    }
  return result;
}

}  // namespace nf::graph
