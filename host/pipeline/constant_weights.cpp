#include "pipeline/constant_weights.h"

#include <algorithm>
#include <set>

namespace nf::host {

size_t lift_constant_weights(ir::Graph& g) {
  // Values a linear layer or a table lookup reads as its weight (or transposes first).
  std::set<std::string> weights;
  for (const auto& n : g.nodes) {
    if (!n->domain.empty() || n->inputs.empty()) continue;
    if (n->op_type == "Gather" || n->op_type == "Transpose") weights.insert(n->inputs[0]);
    if ((n->op_type == "MatMul" || n->op_type == "Gemm") && n->inputs.size() >= 2)
      weights.insert(n->inputs.begin(), n->inputs.begin() + 2);
  }
  auto is_weight = [&](const ir::Node& n) {
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.size() != 1 || n.attrs.size() != 1) return false;
    auto v = n.attrs.find("value");
    if (v == n.attrs.end() || v->second.type != NF_ATTR_TENSOR || !v->second.t) return false;
    const ir::Tensor& t = v->second.t->tensor;
    const bool floats = t.dtype == NF_DTYPE_FLOAT32 || t.dtype == NF_DTYPE_FLOAT16 || t.dtype == NF_DTYPE_BFLOAT16 ||
                        t.dtype == NF_DTYPE_FLOAT64;
    return floats && t.dims.size() >= 2 && weights.count(n.outputs[0]) && !g.initializers.count(n.outputs[0]);
  };
  std::set<const ir::Node*> lifted;
  for (const auto& n : g.nodes)
    if (is_weight(*n)) g.initializers[n->outputs[0]] = n->attrs.at("value").t, lifted.insert(n.get());
  g.nodes.erase(std::remove_if(g.nodes.begin(), g.nodes.end(),
                               [&](const std::unique_ptr<ir::Node>& n) { return lifted.count(n.get()) != 0; }),
                g.nodes.end());
  return lifted.size();
}

}  // namespace nf::host
