#include "pipeline/constant_weights.h"

#include <algorithm>
#include <set>

namespace nf::host {

size_t lift_constant_weights(ir::Graph& g) {
  auto is_weight = [&](const ir::Node& n) {
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.size() != 1 || n.attrs.size() != 1) return false;
    auto v = n.attrs.find("value");
    if (v == n.attrs.end() || v->second.type != NF_ATTR_TENSOR || !v->second.t) return false;
    const ir::Tensor& t = v->second.t->tensor;
    const bool floats = t.dtype == NF_DTYPE_FLOAT32 || t.dtype == NF_DTYPE_FLOAT16 || t.dtype == NF_DTYPE_BFLOAT16 ||
                        t.dtype == NF_DTYPE_FLOAT64;
    return floats && t.dims.size() >= 2 && !g.initializers.count(n.outputs[0]);
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
