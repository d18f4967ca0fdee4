#include "spinquant/online.h"

#include <npuforge/graph/value_types.h>

#include <stdexcept>

#include "spinquant/rotate.h"

namespace spinquant {
namespace {

void write_factor(nf::Graph& g, const std::string& name, const Rotation& R) {
  const std::vector<double> m = R.matrix();
  write_initializer(g, name, {R.size(), R.size()}, std::vector<float>(m.begin(), m.end()));
}

void write_shape(nf::Graph& g, const std::string& name, const std::vector<int64_t>& values) {
  if (g.initializer(name)) return;  // one per block shape
  nf::graph::set_int64_initializer(g, name, values);
}

}  // namespace

int64_t outer_order(int64_t K) {
  int64_t best = 1;
  double best_cost = static_cast<double>(K) * static_cast<double>(K);
  for (int64_t p = 2; p < K && K % p == 0; p *= 2) {
    const int64_t q = K / p;
    try {
      Rotation::random_hadamard(q, 0);
    } catch (const std::invalid_argument&) {
      continue;
    }
    const double cost = static_cast<double>(p) * static_cast<double>(p) + static_cast<double>(q) * static_cast<double>(q);
    if (cost < best_cost) best = p, best_cost = cost;
  }
  return best;
}

std::vector<OnlineRotation> write_online_rotation(nf::Graph& g, const std::string& x, const std::string& y, const Rotation& R,
                                                  const std::string& tag) {
  nf::ValueType vt;
  if (g.value_type(x, &vt)) g.set_value_type(y, vt.dtype, vt.dims, vt.dim_params);
  if (R.factors().size() != 2) {
    write_factor(g, tag, R);
    g.add_node("MatMul", {x, tag}, {y}, y);
    return {{tag, x, y, false}};
  }
  // x [..., K] -> blocks [-1, p, q] -> (P^T X Q) -> [..., K]
  const Rotation &Pr = R.factors()[0], &Qr = R.factors()[1];
  const int64_t p = Pr.size(), q = Qr.size();
  const std::string P = tag + ".p" + std::to_string(p), Q = tag + ".q" + std::to_string(q);
  write_factor(g, P, Pr);
  write_factor(g, Q, Qr);
  const std::string block_shape = "online_hadamard_blocks_" + std::to_string(p) + "x" + std::to_string(q);
  write_shape(g, block_shape, {-1, p, q});
  const std::string s = y + "/shape", blocks = y + "/blocks", xq = y + "/xq", xq_t = y + "/xq_t", xqp = y + "/xqp",
                    out = y + "/pxq";
  g.add_node("Shape", {x}, {s}, s);
  g.add_node("Reshape", {x, block_shape}, {blocks}, blocks);
  g.add_node("MatMul", {blocks, Q}, {xq}, xq);
  g.add_node("Transpose", {xq}, {xq_t}, xq_t).set_attr("perm", std::vector<int64_t>{0, 2, 1});
  g.add_node("MatMul", {xq_t, P}, {xqp}, xqp);
  g.add_node("Transpose", {xqp}, {out}, out).set_attr("perm", std::vector<int64_t>{0, 2, 1});
  g.add_node("Reshape", {out, s}, {y}, y);
  return {{Q, blocks, xq, true}, {P, xq_t, xqp, false}};
}

std::vector<OnlineRotation> insert_online_hadamards(GraphView& gv, const std::vector<Linear>& down_projs,
                                                    WeightEdits& edits, std::map<int64_t, Rotation>& hadamards) {
  nf::Graph& g = gv.graph;
  std::vector<OnlineRotation> result;
  for (const Linear& d : down_projs) {
    const int64_t K = d.K, p = outer_order(K), q = K / p;
    // Factors per layer (a few KB each): the recipes list a weight read by several MatMuls
    // once, and every layer's rotation needs its own activation encodings.
    const std::string tag = d.weight + ".online_hadamard";
    if (!hadamards.count(K)) {
      try {
        hadamards.emplace(K, p == 1 ? Rotation::random_hadamard(K, 0)
                                    : Rotation::kronecker(Rotation::random_hadamard(p, 0), Rotation::random_hadamard(q, 0)));
      } catch (const std::invalid_argument& e) {
        throw nf::Error("spinquant: online_down_proj: down projection '" + d.weight + "' has " + std::to_string(K) +
                        " input channels: " + e.what());
      }
    }
    const Rotation& H = hadamards.at(K);
    const std::string x = d.input, y = d.input + ".online_hadamard";
    for (auto& r : write_online_rotation(g, x, y, H, tag)) result.push_back(std::move(r));
    for (nf::Node n : g.nodes())
      if (!n.outputs().empty() && n.output(0) == d.node_output) n.set_input(0, y);
    edits.rotate_input(d, H);  // B <- H^T B: (x H)(H^T B) = x B
  }
  g.sort();
  return result;
}

}  // namespace spinquant
