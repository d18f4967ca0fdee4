#include "boundaries.h"

#include <regex>
#include <set>

namespace split {
namespace {

bool is_pass_through(const nf::Node& n) {
  return (n.op_type() == "Cast" || n.op_type() == "Identity") && n.input_count() == 1;
}

// `value` and every value it flows into through no-op Cast/Identity nodes.
std::set<std::string> aliases(const nf::graph::GraphView& view, const std::string& value) {
  std::set<std::string> out{value};
  std::vector<std::string> todo{value};
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    for (const nf::Node& u : view.consumers(v))
      if (is_pass_through(u) && out.insert(u.output(0)).second) todo.push_back(u.output(0));
  }
  return out;
}

}  // namespace

std::string find_embedding_output(const nf::graph::GraphView& view) {
  std::vector<nf::Node> found;
  for (const nf::Node& n : view.nodes()) {
    if (n.op_type() != "Gather" || n.input_count() != 2 || !view.is_initializer(n.input(0))) continue;
    if (view.upstream(n.input(1), false).count("input_ids")) found.push_back(n);
  }
  if (found.size() != 1)
    throw nf::Error("split: expected one embedding lookup (a Gather of a weight table at input_ids), found " +
                    std::to_string(found.size()) +
                    "; set split_embedding = false and give layer_boundary_name_regex for this model");
  return found[0].output(0);
}

std::vector<std::string> residual_layer_ends(const nf::graph::GraphView& view, const std::string& start,
                                             int64_t layers) {
  std::vector<std::string> adds;
  std::string stream = start;
  for (;;) {
    std::set<std::string> alias = aliases(view, stream);
    const nf::Node* next = nullptr;
    std::vector<nf::Node> users;
    for (const std::string& a : alias)
      for (const nf::Node& u : view.consumers(a)) users.push_back(u);
    for (const nf::Node& u : users) {
      if (u.op_type() != "Add" || u.input_count() != 2) continue;
      bool left = alias.count(u.input(0)) != 0, right = alias.count(u.input(1)) != 0;
      if (left == right) continue;
      // The branch (attention or MLP output) is computed from the stream.
      const std::string& branch = left ? u.input(1) : u.input(0);
      if (!view.upstream(branch, false).count(stream)) continue;
      if (!next) next = &u;
    }
    if (!next) break;
    stream = next->output(0);
    adds.push_back(stream);
  }
  if (static_cast<int64_t>(adds.size()) != 2 * layers)
    throw nf::Error("split: the residual-Add heuristic found " + std::to_string(adds.size()) +
                    " residual Adds on the hidden-state path for " + std::to_string(layers) +
                    " layers (expected 2 per layer); give layer_boundary_name_regex");
  std::vector<std::string> ends;
  for (int64_t l = 0; l < layers; ++l) ends.push_back(adds[static_cast<size_t>(2 * l + 1)]);
  return ends;
}

std::vector<std::string> regex_layer_ends(const nf::graph::GraphView& view, const std::string& regex) {
  std::regex re(regex);
  std::vector<std::string> ends;
  for (const nf::Node& n : view.nodes())
    if (std::regex_search(std::string(n.name()), re) && n.output_count() > 0) ends.push_back(n.output(0));
  if (ends.empty())
    throw nf::Error("split: option 'layer_boundary_name_regex' = \"" + regex + "\" matches no node name in graph '" +
                    view.graph().name() + "'");
  return ends;
}

}  // namespace split
