#include "pipeline/tied_head.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <cstring>

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

}  // namespace nf::host
