#include "pipeline/cache_branch.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace nf::host {
namespace {

// The values a branch reads from its enclosing graph.
std::set<std::string> outer_reads(const ir::Graph& b) {
  std::set<std::string> local(b.inputs.begin(), b.inputs.end()), reads;
  for (const auto& [name, t] : b.initializers) local.insert(name);
  for (const auto& n : b.nodes)
    for (const auto& o : n->outputs) local.insert(o);
  for (const auto& n : b.nodes)
    for (const auto& in : n->inputs)
      if (!in.empty() && !local.count(in)) reads.insert(in);
  for (const auto& o : b.outputs)
    if (!local.count(o)) reads.insert(o);
  return reads;
}

bool reads_past(const ir::Graph& b) {
  for (const auto& v : outer_reads(b))
    if (decoder::is_past_kv(v)) return true;
  return false;
}

bool has_subgraphs(const ir::Graph& b) {
  for (const auto& n : b.nodes)
    for (const auto& [k, a] : n->attrs)
      if (a.g) return true;
  return false;
}

}  // namespace

std::string inline_cache_branch(ir::Graph& g) {
  auto is_merge = [&](const ir::Node& n) {
    if (n.op_type != "If" || !n.domain.empty() || n.inputs.size() != 1) return false;
    auto t = g.types.find(n.inputs[0]);
    return t != g.types.end() && t->second.dtype == NF_DTYPE_BOOL &&
           std::find(g.inputs.begin(), g.inputs.end(), n.inputs[0]) != g.inputs.end();
  };
  auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const auto& n) { return is_merge(*n); });
  if (it == g.nodes.end()) return "";
  ir::Node& merge = **it;
  std::shared_ptr<ir::Graph> branch;
  for (const char* key : {"then_branch", "else_branch"})
    if (auto a = merge.attrs.find(key); a != merge.attrs.end() && a->second.g && reads_past(*a->second.g)) {
      branch = a->second.g;
      break;
    }
  if (!branch || has_subgraphs(*branch) || branch->outputs.size() != merge.outputs.size()) return "";

  // The branch's own values, renamed where the enclosing graph already has the name; a
  // branch output a branch node writes takes the If's output name (the first, if several).
  std::set<std::string> taken = ir::value_names(g), written;
  std::map<std::string, std::string> rename;
  auto define = [&](const std::string& v) {
    std::string fresh = v;
    for (int i = 1; taken.count(fresh); ++i) fresh = v + "/branch" + std::to_string(i);
    taken.insert(fresh);
    rename[v] = fresh;
  };
  for (const auto& n : branch->nodes)
    for (const auto& o : n->outputs)
      if (!o.empty() && written.insert(o).second) define(o);
  for (const auto& [name, t] : branch->initializers) define(name);
  std::set<std::string> placed;
  for (size_t i = 0; i < branch->outputs.size(); ++i) {
    const std::string& out = branch->outputs[i];
    if (written.count(out) && placed.insert(out).second) rename[out] = merge.outputs[i];
  }
  std::unique_ptr<ir::Graph> b = branch->clone();  // the If's attribute may be shared
  ir::rename_values(*b, rename);

  std::vector<std::unique_ptr<ir::Node>> inlined = std::move(b->nodes);
  for (size_t i = 0; i < b->outputs.size(); ++i)
    if (b->outputs[i] != merge.outputs[i]) {  // an outer value or a constant
      auto id = std::make_unique<ir::Node>();
      id->op_type = "Identity";
      id->inputs = {b->outputs[i]};
      id->outputs = {merge.outputs[i]};
      inlined.push_back(std::move(id));
    }
  g.initializers.merge(b->initializers);
  g.types.merge(b->types);  // a name the enclosing graph types already keeps its type

  const std::string cond = merge.inputs[0], name = merge.name.empty() ? "If" : merge.name;
  const auto at = g.nodes.erase(it);
  g.nodes.insert(at, std::make_move_iterator(inlined.begin()), std::make_move_iterator(inlined.end()));
  g.inputs.erase(std::remove(g.inputs.begin(), g.inputs.end(), cond), g.inputs.end());
  g.types.erase(cond);
  return name;
}

}  // namespace nf::host
