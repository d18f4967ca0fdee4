#include "spinquant/online.h"

#include <stdexcept>

#include "spinquant/hadamard.h"
#include "spinquant/rotate.h"

namespace spinquant {

std::vector<OnlineRotation> insert_online_hadamards(GraphView& gv, const std::vector<Linear>& down_projs) {
  nf::Graph& g = gv.graph;
  std::vector<OnlineRotation> result;
  std::map<int64_t, std::vector<double>> hadamards;
  for (const Linear& d : down_projs) {
    if (!hadamards.count(d.K)) {
      try {
        hadamards[d.K] = nf::quant::random_hadamard(d.K, 0);
      } catch (const std::invalid_argument& e) {
        throw nf::Error("spinquant: online_down_proj: down projection '" + d.weight + "' has " + std::to_string(d.K) +
                        " input channels: " + e.what());
      }
    }
    const std::vector<double>& H = hadamards[d.K];
    // One constant per layer: the quant recipes list a weight shared by several MatMuls
    // once, and each rotation's input and output need their own activation encodings.
    OnlineRotation r{d.weight + ".online_hadamard", d.input, d.input + ".online_hadamard"};
    std::vector<float> h(H.begin(), H.end());
    write_initializer(g, r.weight, {d.K, d.K}, h);
    nf::ValueType vt;
    if (g.value_type(d.input, &vt)) g.set_value_type(r.output, vt.dtype, vt.dims, vt.dim_params);
    for (nf::Node n : g.nodes())
      if (!n.outputs().empty() && n.output(0) == d.node_output) n.set_input(0, r.output);
    g.add_node("MatMul", {r.input, r.weight}, {r.output}, r.output);
    rotate_input(g, d, H, d.K);  // B <- H^T B: (x H)(H^T B) = x B
    result.push_back(r);
  }
  g.sort();
  return result;
}

}  // namespace spinquant
