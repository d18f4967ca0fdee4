#include "partition.h"

#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/value_types.h>

#include <algorithm>
#include <map>
#include <set>

namespace split {
namespace {

constexpr size_t kSide = SIZE_MAX;  // part of a node off the token path

void push_unique(std::vector<std::string>& list, const std::string& v) {
  if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
}

}  // namespace

std::vector<PartPlan> plan_parts(const nf::graph::GraphView& view, const std::vector<std::string>& cuts) {
  const std::vector<nf::Node> nodes = view.nodes();
  const size_t n_parts = cuts.size() + 1;
  std::map<std::string, size_t> cut_index;
  for (size_t j = 0; j < cuts.size(); ++j)
    if (!cut_index.emplace(cuts[j], j).second) throw nf::Error("split: boundary '" + cuts[j] + "' is given twice");

  // Token-path values and the part that computes them (a cut value belongs to the part
  // after it, for its readers).
  std::map<std::string, size_t> level;  // token-path value -> part its readers start from
  std::map<std::string, size_t> producer_part;
  std::vector<size_t> part_of(nodes.size(), kSide);
  std::map<std::string, size_t> producer_index;
  level["input_ids"] = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const nf::Node& n = nodes[i];
    bool token = false;
    size_t lvl = 0;
    for (const std::string& in : n.inputs()) {
      auto it = level.find(in);
      if (it == level.end()) continue;
      token = true;
      lvl = std::max(lvl, it->second);
    }
    for (const std::string& out : n.outputs())
      if (!out.empty()) producer_index[out] = i;
    if (!token) continue;
    part_of[i] = lvl;
    for (const std::string& out : n.outputs()) {
      if (out.empty()) continue;
      producer_part[out] = lvl;
      auto c = cut_index.find(out);
      if (c == cut_index.end()) {
        level[out] = lvl;
        continue;
      }
      if (lvl != c->second)
        throw nf::Error("split: boundary " + std::to_string(c->second + 1) + " ('" + out + "') is computed in part " +
                        std::to_string(lvl + 1) + ", not right after boundary " + std::to_string(c->second) +
                        ": the boundaries are not in sequence on the hidden-state path");
      level[out] = c->second + 1;
    }
  }
  for (const std::string& c : cuts)
    if (!producer_part.count(c))
      throw nf::Error("split: boundary '" + c + "' is not computed from input_ids (not on the hidden-state path)");

  std::vector<PartPlan> plans(n_parts);
  std::vector<std::set<size_t>> members(n_parts);
  for (size_t i = 0; i < nodes.size(); ++i)
    if (part_of[i] != kSide) members[part_of[i]].insert(i);
  // Graph outputs computed off the token path go with the last part.
  const std::vector<std::string> outputs = view.graph().outputs();
  for (const std::string& o : outputs) {
    auto p = producer_index.find(o);
    if (p == producer_index.end()) continue;
    size_t part = part_of[p->second] == kSide ? n_parts - 1 : part_of[p->second];
    members[part].insert(p->second);
    plans[part].graph_outputs.push_back(o);
  }
  for (size_t p = 0; p < n_parts; ++p)
    if (std::none_of(members[p].begin(), members[p].end(), [&](size_t i) { return part_of[i] == p; }))
      throw nf::Error("split: part " + std::to_string(p + 1) + " of " + std::to_string(n_parts) +
                      " would compute nothing on the hidden-state path");

  const std::vector<std::string> graph_inputs = view.graph().inputs();
  for (size_t p = 0; p < n_parts; ++p) {
    PartPlan& plan = plans[p];
    // Pull in the side nodes the part reads, transitively.
    std::vector<size_t> todo(members[p].begin(), members[p].end());
    std::set<std::string> reads;
    while (!todo.empty()) {
      size_t i = todo.back();
      todo.pop_back();
      for (const std::string& in : nodes[i].inputs()) {
        if (in.empty() || !reads.insert(in).second) continue;
        auto prod = producer_index.find(in);
        if (prod == producer_index.end()) continue;  // graph input or initializer
        size_t q = part_of[prod->second];
        if (q == kSide) {
          if (members[p].insert(prod->second).second) todo.push_back(prod->second);
        } else if (q != p) {
          if (q > p) throw nf::Error("split: internal error: part " + std::to_string(p + 1) + " reads a later part");
          plan.chained_inputs.push_back(in);  // `reads` sees each value once
          plan.chained_from.push_back(q);
          push_unique(plans[q].chained_outputs, in);
        }
      }
    }
    for (const std::string& in : graph_inputs)
      if (reads.count(in)) plan.runner_inputs.push_back(in);
    plan.nodes.assign(members[p].begin(), members[p].end());
  }
  return plans;
}

void build_part(nf::ModelSet& ms, const nf::Graph& source, const PartPlan& plan, const std::string& name) {
  nf::Graph g = ms.add_graph(name, &source);
  std::vector<nf::Node> copy = g.nodes();
  std::vector<bool> keep(copy.size(), false);
  for (size_t i : plan.nodes) keep[i] = true;
  for (size_t i = 0; i < copy.size(); ++i)
    if (!keep[i]) g.remove_node(copy[i]);

  std::vector<std::string> inputs = plan.runner_inputs, outputs = plan.chained_outputs;
  inputs.insert(inputs.end(), plan.chained_inputs.begin(), plan.chained_inputs.end());
  for (const std::string& o : plan.graph_outputs) push_unique(outputs, o);
  for (const std::string& v : plan.chained_inputs) {
    auto t = nf::graph::get_value_type(g, v);
    if (!t || !t->is_static())
      throw nf::Error("split: graph '" + name + "': the boundary value '" + v + "' has no static type");
  }
  g.set_inputs(inputs);
  g.set_outputs(outputs);
  nf::graph::eliminate_dead_nodes(g);
}

}  // namespace split
