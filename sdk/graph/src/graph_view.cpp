#include "npuforge/graph/graph_view.h"

#include <algorithm>
#include <deque>

namespace nf::graph {

GraphView::GraphView(Graph g) : g_(g) { refresh(); }

void GraphView::refresh() {
  producers_.clear();
  consumers_.clear();
  for (const Node& n : g_.nodes()) {
    for (const std::string& out : n.outputs())
      if (!out.empty()) producers_[out] = n.get();
    for (const std::string& in : n.inputs()) {
      if (in.empty()) continue;
      auto& users = consumers_[in];
      if (users.empty() || users.back().get() != n.get()) users.push_back(n);
    }
  }
  auto ins = g_.inputs(), outs = g_.outputs(), inits = g_.initializer_names();
  inputs_ = {ins.begin(), ins.end()};
  outputs_ = {outs.begin(), outs.end()};
  initializers_ = {inits.begin(), inits.end()};
}

std::vector<Node> GraphView::sorted_nodes() const {
  const std::vector<Node> all = nodes();
  std::map<nf_node*, size_t> waiting;
  std::deque<Node> ready;
  for (const Node& n : all) {
    size_t k = 0;
    for (const std::string& in : n.inputs())
      if (!in.empty() && producer(in)) ++k;
    waiting[n.get()] = k;
    if (k == 0) ready.push_back(n);
  }
  std::vector<Node> order;
  while (!ready.empty()) {
    Node n = ready.front();
    ready.pop_front();
    order.push_back(n);
    for (const std::string& out : n.outputs())
      for (const Node& c : consumers(out)) {
        // A node reading one value twice was counted once per read.
        for (const std::string& in : c.inputs())
          if (in == out && --waiting[c.get()] == 0) ready.push_back(c);
      }
  }
  return order;
}

std::optional<Node> GraphView::producer(const std::string& value) const {
  auto it = producers_.find(value);
  if (it == producers_.end()) return std::nullopt;
  return Node(it->second);
}

const std::vector<Node>& GraphView::consumers(const std::string& value) const {
  static const std::vector<Node> none;
  auto it = consumers_.find(value);
  return it == consumers_.end() ? none : it->second;
}

void GraphView::replace_uses(const std::string& from, const std::string& to) {
  for (Node n : consumers(from))
    for (size_t i = 0; i < n.input_count(); ++i)
      if (n.input(i) == from) n.set_input(i, to);
  if (is_output(from)) {
    auto outs = g_.outputs();
    std::replace(outs.begin(), outs.end(), from, to);
    g_.set_outputs(outs);
  }
  refresh();
}

std::set<std::string> GraphView::upstream(const std::string& value, bool through_shapes) const {
  std::set<std::string> seen{value};
  std::vector<std::string> todo{value};
  while (!todo.empty()) {
    std::string v = std::move(todo.back());
    todo.pop_back();
    auto p = producer(v);
    if (!p) continue;
    if (!through_shapes && (p->op_type() == "Shape" || p->op_type() == "Size")) continue;
    for (const std::string& in : p->inputs())
      if (!in.empty() && seen.insert(in).second) todo.push_back(in);
  }
  return seen;
}

bool GraphView::computed_without_inputs(const std::string& value) const {
  for (const std::string& u : upstream(value, false))
    if (is_input(u)) return false;
  return true;
}

std::vector<int64_t> GraphView::constant_ints(const std::string& value) const {
  Tensor t;
  if (is_initializer(value)) {
    t = g_.initializer(value);
  } else if (auto p = producer(value); p && p->op_type() == "Constant") {
    t = p->attr_tensor("value");
  }
  std::vector<int64_t> r;
  if (t && t.dtype() == NF_DTYPE_INT64) r.assign(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
  if (t && t.dtype() == NF_DTYPE_INT32)
    for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.data_as<int32_t>()[i]);
  return r;
}

}  // namespace nf::graph
