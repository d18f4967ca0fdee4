#include "boundaries.h"

#include <npuforge/graph/kv_layers.h>
#include <npuforge/graph/value_types.h>

#include <map>
#include <optional>
#include <regex>
#include <set>

namespace split {
namespace {

// Nodes that carry the residual stream on unchanged up to a constant factor: no-op Cast /
// Identity, a Reshape of the rows that keeps the hidden axis (OPT runs its MLP and second
// residual Add on [rows, hidden] and views the result back), and a Mul / Div by a constant
// (Gemma scales the embeddings by sqrt(hidden)); and an Add of something not computed from the
// stream (GPT-2's learned position embeddings).
bool carries_stream(const nf::graph::GraphView& view, const nf::Node& n, const std::string& stream) {
  if ((n.op_type() == "Cast" || n.op_type() == "Identity") && n.input_count() == 1) return true;
  if (n.op_type() == "Reshape" && n.input(0) == stream) {
    auto in = nf::graph::get_value_type(view.graph(), stream), out = nf::graph::get_value_type(view.graph(), n.output(0));
    return in && out && in->dims && out->dims && !in->dims->empty() && !out->dims->empty() &&
           in->dims->back() > 0 && in->dims->back() == out->dims->back();
  }
  if (n.op_type() == "Add" && n.input_count() == 2 && n.input(0) != n.input(1)) {
    const std::string& other = n.input(0) == stream ? n.input(1) : n.input(0);
    return !view.upstream(other, false).count(stream);
  }
  if ((n.op_type() == "Mul" || (n.op_type() == "Div" && n.input(0) == stream)) && n.input_count() == 2) {
    const std::string& other = n.input(0) == stream ? n.input(1) : n.input(0);
    return other != stream && view.computed_without_inputs(other);
  }
  return false;
}

// `value` and every value it flows into through stream-carrying nodes.
std::set<std::string> aliases(const nf::graph::GraphView& view, const std::string& value) {
  std::set<std::string> out{value};
  std::vector<std::string> todo{value};
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    for (const nf::Node& u : view.consumers(v))
      if (carries_stream(view, u, v) && out.insert(u.output(0)).second) todo.push_back(u.output(0));
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

std::vector<std::string> residual_layer_ends(const nf::graph::GraphView& view, const std::string& embedding,
                                             int64_t layers) {
  const std::map<std::string, int64_t> kv_layer = nf::graph::kv_layer_of_values(view);
  // The residual stream: each step is an Add of the stream and a branch computed from it.
  std::vector<std::string> stream_values;
  std::string start = embedding, stream = start;
  for (;;) {
    std::set<std::string> alias = aliases(view, stream);
    std::optional<nf::Node> next;
    for (const std::string& a : alias) {
      for (const nf::Node& u : view.consumers(a)) {
        if (next || u.op_type() != "Add" || u.input_count() != 2) continue;
        bool left = alias.count(u.input(0)) != 0, right = alias.count(u.input(1)) != 0;
        if (left == right) continue;
        // The branch (attention, MLP, or both in parallel) is computed from the stream.
        if (view.upstream(left ? u.input(1) : u.input(0), false).count(start)) next = u;
      }
    }
    if (!next && stream_values.empty() && start == embedding) {
      if (auto normalized = nf::graph::normalized_embedding(view, embedding, kv_layer)) {
        start = stream = *normalized;
        continue;
      }
    }
    if (!next) break;
    stream = next->output(0);
    stream_values.push_back(stream);
  }
  // Layer l ends at the last stream value that reads layer l's KV cache and no later
  // layer's: whatever the number of residual Adds a layer has (2 for Llama, 1 for a
  // parallel block, 4 norms around 2 Adds for Gemma-2).
  std::vector<std::string> ends(static_cast<size_t>(layers));
  for (const std::string& v : stream_values) {
    auto it = kv_layer.find(v);
    if (it != kv_layer.end() && it->second >= 0) ends[static_cast<size_t>(it->second)] = v;
  }
  for (int64_t l = 0; l < layers; ++l)
    if (ends[static_cast<size_t>(l)].empty())
      throw nf::Error("split: found " + std::to_string(stream_values.size()) +
                      " residual Adds on the hidden-state path from '" + start + "', but none after layer " +
                      std::to_string(l) + "'s attention (past_key_values." + std::to_string(l) +
                      ".*) and before layer " + std::to_string(l + 1) + "'s; give layer_boundary_name_regex");
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
