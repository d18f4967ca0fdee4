#include "spinquant/online.h"

#include <stdexcept>

#include "spinquant/rotate.h"

namespace spinquant {

std::vector<OnlineRotation> insert_online_hadamards(GraphView& gv, const std::vector<Linear>& down_projs,
                                                    WeightEdits& edits, std::map<int64_t, Rotation>& hadamards) {
  nf::Graph& g = gv.graph;
  std::vector<OnlineRotation> result;
  for (const Linear& d : down_projs) {
    if (!hadamards.count(d.K)) {
      try {
        hadamards.emplace(d.K, Rotation::random_hadamard(d.K, 0));
      } catch (const std::invalid_argument& e) {
        throw nf::Error("spinquant: online_down_proj: down projection '" + d.weight + "' has " + std::to_string(d.K) +
                        " input channels: " + e.what());
      }
    }
    const Rotation& H = hadamards.at(d.K);
    // One constant per layer: the quant recipes list a weight shared by several MatMuls
    // once, and each rotation's input and output need their own activation encodings.
    OnlineRotation r{d.weight + ".online_hadamard", d.input, d.input + ".online_hadamard"};
    const std::vector<double> matrix = H.matrix();
    std::vector<float> h(matrix.begin(), matrix.end());
    write_initializer(g, r.weight, {d.K, d.K}, h);
    nf::ValueType vt;
    if (g.value_type(d.input, &vt)) g.set_value_type(r.output, vt.dtype, vt.dims, vt.dim_params);
    for (nf::Node n : g.nodes())
      if (!n.outputs().empty() && n.output(0) == d.node_output) n.set_input(0, r.output);
    g.add_node("MatMul", {r.input, r.weight}, {r.output}, r.output);
    edits.rotate_input(d, H);  // B <- H^T B: (x H)(H^T B) = x B
    result.push_back(r);
  }
  g.sort();
  return result;
}

}  // namespace spinquant
