#include "spinquant/residual.h"

namespace spinquant {
namespace {

// A residual value times a scalar constant stays on the stream: Gemma and Granite scale
// their embeddings before the first layer, and a rotation commutes with that.
bool scaled(const GraphView& gv, const nf::Node& n, const std::set<std::string>& stream) {
  const std::string x = scaled_operand(gv, n);
  return !x.empty() && stream.count(x);
}

}  // namespace

ResidualStream find_residual_stream(const GraphView& gv, const std::string& embedding_output) {
  ResidualStream rs;
  rs.values.insert(embedding_output);
  std::set<std::string> writer_weights;
  for (const nf::Node& n : gv.graph.nodes()) {
    std::string_view op = n.op_type();
    if ((passthrough(op) && rs.values.count(n.input(0))) || scaled(gv, n, rs.values)) rs.values.insert(n.output(0));
    if (op != "Add" || n.input_count() != 2) continue;
    const bool a = rs.values.count(n.input(0)) != 0, b = rs.values.count(n.input(1)) != 0;
    if (a == b) continue;
    std::string other = n.input(a ? 1 : 0);
    Linear w;
    if (!linear_writer(gv, other, &w))
      throw nf::Error("spinquant: residual Add '" + std::string(n.name()) + "' adds '" + other +
                      "', which is not a linear layer's output; cannot rotate the residual stream");
    if (!writer_weights.insert(w.weight).second)
      throw nf::Error("spinquant: weight '" + w.weight + "' writes the residual stream twice");
    rs.writers.push_back(w);
    rs.values.insert(n.output(0));
  }
  for (const auto& v : rs.values) {
    if (gv.is_output(v)) throw nf::Error("spinquant: residual value '" + v + "' is a graph output; cannot rotate it");
    for (const Use& u : gv.consumers(v)) {
      std::string_view op = u.node.op_type();
      if (!(passthrough(op) || op == "Add" || op == "Pow" || op == "Mul" || op == "Div" || op == "Shape"))
        throw nf::Error("spinquant: residual value '" + v + "' feeds a " + std::string(op) + " node ('" +
                        std::string(u.node.name()) + "') that does not commute with a rotation");
    }
  }
  return rs;
}

std::vector<Linear> down_projections(const GraphView& gv, const ResidualStream& stream) {
  std::vector<Linear> result;
  for (const Linear& w : stream.writers) {
    const nf::Node* p = gv.producer(w.input);
    while (p && passthrough(p->op_type())) p = gv.producer(p->input(0));
    if (p && p->op_type() == "Mul" && !gv.is_initializer(p->input(0)) && !gv.is_initializer(p->input(1)))
      result.push_back(w);
  }
  return result;
}

}  // namespace spinquant
