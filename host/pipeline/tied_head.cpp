#include "pipeline/tied_head.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <cstring>

#include "pipeline/weight_transposes.h"

namespace nf::host {

ir::Node* lm_head_matmul(const ir::Graph& g) {
  auto is_matmul = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    return n && n->op_type == "MatMul" && n->domain.empty();
  };
  auto inputs_of = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    return n ? n->inputs : std::vector<std::string>{};
  };
  const std::string head = decoder::lm_head_output(inputs_of, is_matmul);
  return head.empty() ? nullptr : g.producer(head);
}

std::string tie_lm_head(ir::Graph& g) {
  ir::Node* head = lm_head_matmul(g);
  if (!head || head->inputs.size() != 2) return "";
  const std::string copy = head->inputs[1];
  auto b = g.initializers.find(copy);
  if (b == g.initializers.end() || b->second->tensor.dims.size() != 2) return "";
  const ir::Tensor& bt = b->second->tensor;
  for (const auto& n : g.nodes) {
    if (n->op_type != "Gather" || !n->domain.empty() || n->inputs.empty()) continue;
    auto e = g.initializers.find(n->inputs[0]);
    if (e == g.initializers.end() || e == b) continue;
    const ir::Tensor& et = e->second->tensor;
    if (et.dtype != bt.dtype || et.dims.size() != 2 || et.dims[0] != bt.dims[1] || et.dims[1] != bt.dims[0]) continue;
    const bool tied = ir::is_transpose_of(bt, et);
    bt.drop_pages();
    et.drop_pages();
    if (!tied) continue;
    // The copy's value name stays: a Transpose of the table now produces it.
    auto t = std::make_unique<ir::Node>();
    t->op_type = "Transpose";
    t->name = head->name + "/tied_transpose";
    t->inputs = {e->first};
    t->outputs = {copy};
    ir::Attribute perm;
    perm.type = NF_ATTR_INTS;
    perm.ints = {1, 0};
    t->attrs["perm"] = perm;
    g.initializers.erase(b);
    g.inputs.erase(std::remove(g.inputs.begin(), g.inputs.end(), copy), g.inputs.end());
    auto at = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const auto& p) { return p.get() == head; });
    g.nodes.insert(at, std::move(t));
    return copy;
  }
  return "";
}

namespace {

// The head's weight initializer and the Transpose of it a Gather reads, or nulls.
std::pair<ir::Node*, ir::Node*> head_and_table_transpose(const ir::Graph& g) {
  ir::Node* head = lm_head_matmul(g);
  if (!head || head->inputs.size() != 2) return {};
  const ir::Tensor* w = g.initializer(head->inputs[1]);
  if (!w || w->dims.size() != 2) return {};
  for (const auto& n : g.nodes) {
    if (n->op_type != "Gather" || !n->domain.empty() || n->inputs.empty()) continue;
    ir::Node* t = g.producer(n->inputs[0]);
    if (!t || t->op_type != "Transpose" || !t->domain.empty() || t->inputs.size() != 1 || t->inputs[0] != head->inputs[1])
      continue;
    if (auto p = t->attrs.find("perm"); p != t->attrs.end() && p->second.ints != std::vector<int64_t>{1, 0}) continue;
    return {head, t};
  }
  return {};
}

}  // namespace

bool tied_head_as_table(const ir::Graph& g) { return head_and_table_transpose(g).second != nullptr; }

std::string table_from_tied_head(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep) {
  auto [head, transpose] = head_and_table_transpose(g);
  if (!transpose) return "";
  const std::string weight = head->inputs[1], table = transpose->outputs[0];
  auto ref = ir::make_tensor_ref(transposed_2d(*g.initializer(weight)));
  if (keep) keep(*ref);
  g.initializers[table] = ref;
  g.initializers.erase(weight);
  g.types.erase(weight);
  // The Transpose now makes the head's weight from the table.
  transpose->inputs = {table};
  transpose->outputs = {weight};
  transpose->name = head->name + "/tied_transpose";
  return table;
}

}  // namespace nf::host
