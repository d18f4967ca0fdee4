#include "expert_selection.h"

#include <npuforge/graph/value_types.h>

#include <cstring>

namespace moe {

void remove_experts(nf::graph::GraphView& view, nf::graph::UniqueNames& names, const MoeBlock& b,
                    const std::set<int64_t>& removed) {
  if (removed.empty()) return;
  nf::Graph g = view.graph();
  const std::string where = "moe: layer " + std::to_string(b.layer) + " (TopK '" + b.topk + "'): ";
  if (b.experts - static_cast<int64_t>(removed.size()) < b.k)
    throw nf::Error(where + "keeping " + std::to_string(b.experts - static_cast<int64_t>(removed.size())) +
                    " experts leaves fewer than the top-k (" + std::to_string(b.k) + ") the router picks");
  auto type = nf::graph::get_value_type(g, b.logits);
  if (type && type->dtype != NF_DTYPE_FLOAT32) throw nf::Error(where + "router logits are not float32");
  // A large finite negative logit: exp underflows to exactly 0 and no inf reaches the math.
  std::vector<float> bias(static_cast<size_t>(b.experts), 0.f);
  for (int64_t e : removed) bias[static_cast<size_t>(e)] = -1e9f;
  nf::Tensor t = nf::Tensor::create(NF_DTYPE_FLOAT32, std::vector<int64_t>{b.experts});
  std::memcpy(t.mutable_data(), bias.data(), t.nbytes());
  const std::string p = b.topk + "/subselection/";
  std::string bias_name = names.make(p + "router_bias");
  g.set_initializer(bias_name, t);
  std::string masked = names.make(p + "masked_logits");
  g.add_node("Add", {b.logits, bias_name}, {masked}, names.make(p + "Add"));
  for (nf::Node n : view.nodes())
    if (n.name() == b.softmax) n.set_input(0, masked);
  view.refresh();
  // Each removed term leaves its Add: the Add's readers take the other operand.
  for (const Expert& e : b.expert_terms) {
    if (!removed.count(e.index)) continue;
    const auto& users = view.consumers(e.term);
    if (users.size() != 1 || users[0].op_type() != "Add")
      throw nf::Error(where + "expert " + std::to_string(e.index) + "'s term '" + e.term + "' is not summed by one Add");
    nf::Node add = users[0];
    std::string other = add.input(0) == e.term ? add.input(1) : add.input(0);
    view.replace_uses(add.output(0), other);
    g.remove_node(add);
    view.refresh();
  }
}

}  // namespace moe
