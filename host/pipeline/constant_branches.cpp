#include "pipeline/constant_branches.h"

#include <cstring>
#include <optional>

namespace nf::host {
namespace {

// The tensor each output of `branch` is, when the branch takes no inputs and computes
// nothing: every output an initializer of it or a Constant node's value.
std::optional<std::vector<std::shared_ptr<ir::TensorRef>>> constant_tables(const ir::Graph& branch) {
  if (!branch.inputs.empty()) return std::nullopt;
  std::map<std::string, std::shared_ptr<ir::TensorRef>> values = branch.initializers;
  for (const auto& n : branch.nodes) {
    auto v = n->attrs.find("value");
    if (n->op_type != "Constant" || !n->domain.empty() || n->outputs.size() != 1 || v == n->attrs.end() ||
        v->second.type != NF_ATTR_TENSOR || !v->second.t)
      return std::nullopt;
    values[n->outputs[0]] = v->second.t;
  }
  std::vector<std::shared_ptr<ir::TensorRef>> tables;
  for (const auto& out : branch.outputs) {
    auto t = values.find(out);
    if (t == values.end()) return std::nullopt;
    tables.push_back(t->second);
  }
  return tables;
}

const ir::Graph* branch_of(const ir::Node& n, const char* key) {
  auto a = n.attrs.find(key);
  return a != n.attrs.end() && a->second.g ? a->second.g.get() : nullptr;
}

// Whether two tables stack along axis 0: one byte-sized dtype, one rank, the same dims after the first.
bool stackable(const ir::Tensor& a, const ir::Tensor& b) {
  return a.dtype == b.dtype && ir::dtype_size(a.dtype) > 0 && !a.dims.empty() && a.dims.size() == b.dims.size() &&
         std::equal(a.dims.begin() + 1, a.dims.end(), b.dims.begin() + 1);
}

ir::Tensor stacked(const ir::Tensor& a, const ir::Tensor& b) {
  ir::Tensor t;
  t.dtype = a.dtype;
  t.dims = a.dims;
  t.dims[0] += b.dims[0];
  t.buffer = std::make_shared<ir::OwnedBuffer>(a.nbytes() + b.nbytes());
  if (a.nbytes()) std::memcpy(t.mutable_data(), a.data(), a.nbytes());
  if (b.nbytes()) std::memcpy(static_cast<uint8_t*>(t.mutable_data()) + a.nbytes(), b.data(), b.nbytes());
  return t;
}

}  // namespace

size_t select_constant_branches(ir::Graph& g) {
  size_t rewritten = 0;
  std::set<std::string> taken = ir::value_names(g);
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int i = 1; !taken.insert(name).second; ++i) name = base + "_" + std::to_string(i);
    return name;
  };
  for (size_t at = 0; at < g.nodes.size(); ++at) {
    const ir::Node& n = *g.nodes[at];
    if (n.op_type != "If" || !n.domain.empty() || n.inputs.size() != 1) continue;
    const ir::Graph *then_branch = branch_of(n, "then_branch"), *else_branch = branch_of(n, "else_branch");
    if (!then_branch || !else_branch) continue;
    auto then_tables = constant_tables(*then_branch), else_tables = constant_tables(*else_branch);
    if (!then_tables || !else_tables || then_tables->size() != n.outputs.size() || else_tables->size() != n.outputs.size())
      continue;
    bool all = true;
    for (size_t i = 0; i < n.outputs.size() && all; ++i)
      all = stackable((*then_tables)[i]->tensor, (*else_tables)[i]->tensor);
    if (!all) continue;

    const std::string cond = n.inputs[0], label = n.name.empty() ? "If" : n.name;
    auto constant = [&](const std::string& what, const std::vector<int64_t>& v) {
      const std::string name = fresh(label + "/" + what);
      g.initializers[name] = ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {1}, v));
      return name;
    };
    auto node = [&](const char* op, std::vector<std::string> in, std::string out) {
      auto m = std::make_unique<ir::Node>();
      m->op_type = op;
      m->name = fresh(label + "/" + op);
      m->inputs = std::move(in);
      m->outputs = {std::move(out)};
      return m;
    };
    std::vector<std::unique_ptr<ir::Node>> made;
    const std::string axis = constant("axis", {0});
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const ir::Tensor &a = (*then_tables)[i]->tensor, &b = (*else_tables)[i]->tensor;
      const int64_t rows_then = a.dims[0], rows_all = a.dims[0] + b.dims[0];
      const std::string tables = fresh(n.outputs[i] + "/tables");
      g.initializers[tables] = ir::make_tensor_ref(stacked(a, b));
      const std::string begin = fresh(n.outputs[i] + "/begin"), end = fresh(n.outputs[i] + "/end");
      made.push_back(node("Where", {cond, constant("then_begin", {0}), constant("else_begin", {rows_then})}, begin));
      made.push_back(node("Where", {cond, constant("then_end", {rows_then}), constant("else_end", {rows_all})}, end));
      made.push_back(node("Slice", {tables, begin, end, axis}, n.outputs[i]));
      // Rows by the condition (the same whichever runs when the branches agree); the rest as both have them.
      ir::ValueType& type = g.types[n.outputs[i]];
      type.dtype = a.dtype;
      type.shape = std::vector<ir::Dim>{a.dims[0] == b.dims[0] ? ir::Dim{a.dims[0], ""} : ir::Dim{-1, "rows"}};
      for (size_t d = 1; d < a.dims.size(); ++d) type.shape->push_back({a.dims[d], ""});
    }
    g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(at));
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(at), std::make_move_iterator(made.begin()),
                   std::make_move_iterator(made.end()));
    at += made.size() - 1;
    ++rewritten;
  }
  return rewritten;
}

}  // namespace nf::host
