#include "moe_block.h"

#include <regex>
#include <set>

namespace moe {
namespace {

using nf::graph::GraphView;

std::string name_of(const nf::Node& n) { return std::string(n.name()); }

// Integer values of a constant (initializer or Constant node); empty when not constant.
std::vector<int64_t> const_ints(const GraphView& view, const std::string& v) {
  nf::Tensor t;
  if (view.is_initializer(v)) {
    t = view.graph().initializer(v);
  } else if (auto p = view.producer(v); p && p->op_type() == "Constant") {
    t = p->attr_tensor("value");
  }
  std::vector<int64_t> r;
  if (!t) return r;
  if (t.dtype() == NF_DTYPE_INT64) r.assign(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
  if (t.dtype() == NF_DTYPE_INT32)
    for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.data_as<int32_t>()[i]);
  return r;
}

// Back from `v` through Cast / Identity.
std::string skip_casts_back(const GraphView& view, std::string v) {
  for (auto p = view.producer(v); p && (p->op_type() == "Cast" || p->op_type() == "Identity"); p = view.producer(v)) v = p->input(0);
  return v;
}

std::vector<nf::Node> users_through_casts(const GraphView& view, const std::string& v) {
  std::vector<nf::Node> r;
  for (const nf::Node& u : view.consumers(v)) {
    if (u.op_type() == "Cast" || u.op_type() == "Identity") {
      auto more = users_through_casts(view, u.output(0));
      r.insert(r.end(), more.begin(), more.end());
    } else {
      r.push_back(u);
    }
  }
  return r;
}

int64_t layer_of(const std::string& node_name) {
  static const std::regex re(R"(layers\.(\d+))");
  std::smatch m;
  return std::regex_search(node_name, m, re) ? std::stoll(m[1].str()) : -1;
}

// The nodes computing `out` from `x` (neither included).
std::vector<std::string> expert_nodes(const GraphView& view, const std::string& out, const std::string& x) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::vector<std::string> todo{out};
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    if (v == x || !seen.insert(v).second) continue;
    auto p = view.producer(v);
    if (!p) continue;
    names.push_back(name_of(*p));
    for (const std::string& in : p->inputs())
      if (!in.empty() && !view.is_initializer(in)) todo.push_back(in);
  }
  return names;
}

MoeBlock match(const GraphView& view, const nf::Node& topk, int64_t ordinal) {
  MoeBlock b;
  b.topk = name_of(topk);
  const std::string where = "moe: TopK '" + b.topk + "': ";
  b.probs = topk.input(0);
  auto sm = view.producer(skip_casts_back(view, b.probs));
  if (!sm || sm->op_type() != "Softmax") throw nf::Error(where + "its input is not a router Softmax");
  b.softmax = name_of(*sm);
  b.logits = sm->input(0);
  auto router = view.producer(skip_casts_back(view, b.logits));
  if (!router || router->op_type() != "MatMul" || !view.is_initializer(router->input(1)))
    throw nf::Error(where + "the Softmax input is not a router MatMul with a constant weight");
  b.x = router->input(0);
  auto wd = view.graph().initializer(router->input(1)).dims();
  if (wd.size() != 2) throw nf::Error(where + "the router weight is not 2-D");
  b.experts = wd[1];
  auto kv = const_ints(view, topk.input(1));
  if (kv.size() != 1) throw nf::Error(where + "K is not a constant");
  b.k = kv[0];
  if (topk.attr_int("largest", 1) != 1 || (topk.attr_int("axis", -1) != -1 && topk.attr_int("axis", -1) < 0))
    throw nf::Error(where + "not a largest-K selection over the last axis");
  b.top_values = topk.output(0);
  b.layer = layer_of(b.topk);
  if (b.layer < 0) b.layer = ordinal;
  for (const nf::Node& u : users_through_casts(view, b.top_values))
    if (u.op_type() == "Div") {
      auto rs = view.producer(u.input(1));
      if (rs && rs->op_type() == "ReduceSum" && skip_casts_back(view, rs->input(0)) == b.top_values) b.renormalize = true;
    }
  // The dense weights: the ReduceSum the one-hot of the indices ends in.
  std::vector<std::pair<std::string, int>> todo{{topk.output(1), 0}};
  while (!todo.empty() && b.dense.empty()) {
    auto [v, depth] = todo.front();
    todo.erase(todo.begin());
    for (const nf::Node& u : view.consumers(v)) {
      if (u.op_type() == "ReduceSum") {
        b.dense = u.output(0);
        break;
      }
      if (depth < 6) todo.push_back({u.output(0), depth + 1});
    }
  }
  if (b.dense.empty()) throw nf::Error(where + "its indices do not end in per-expert weights (one-hot + ReduceSum)");
  // One term per expert: Mul(expert(x), Slice(dense, e:e+1 on the last axis)).
  for (const nf::Node& s : view.consumers(b.dense)) {
    if (s.op_type() != "Slice") throw nf::Error(where + "per-expert weights feed a " + std::string(s.op_type()) + " ('" + name_of(s) + "'), expected Slices");
    auto starts = const_ints(view, s.input(1)), ends = const_ints(view, s.input(2));
    if (starts.size() != 1 || ends.size() != 1 || ends[0] != starts[0] + 1)
      throw nf::Error(where + "Slice '" + name_of(s) + "' does not take one expert");
    const auto& muls = view.consumers(s.output(0));
    if (muls.size() != 1 || muls[0].op_type() != "Mul") throw nf::Error(where + "expert weight '" + s.output(0) + "' is not used by one Mul");
    Expert e;
    e.index = starts[0];
    e.term = muls[0].output(0);
    e.output = muls[0].input(0) == s.output(0) ? muls[0].input(1) : muls[0].input(0);
    e.nodes = expert_nodes(view, e.output, b.x);
    b.expert_terms.push_back(e);
  }
  if (static_cast<int64_t>(b.expert_terms.size()) != b.experts)
    throw nf::Error(where + "found " + std::to_string(b.expert_terms.size()) + " expert terms for " + std::to_string(b.experts) + " router outputs");
  if (b.k < 1 || b.k > b.experts) throw nf::Error(where + "K " + std::to_string(b.k) + " is not in [1, experts]");
  return b;
}

}  // namespace

std::vector<MoeBlock> find_moe_blocks(const GraphView& view) {
  std::vector<MoeBlock> blocks;
  for (const nf::Node& n : view.nodes())
    if (n.op_type() == "TopK") blocks.push_back(match(view, n, static_cast<int64_t>(blocks.size())));
  return blocks;
}

}  // namespace moe
