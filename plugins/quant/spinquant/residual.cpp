#include "spinquant/residual.h"

#include <npuforge/graph/dense_dispatch.h>

namespace spinquant {
namespace {

// A residual value times a scalar constant stays on the stream: Gemma and Granite scale
// their embeddings before the first layer, and a rotation commutes with that.
bool scaled(const GraphView& gv, const nf::Node& n, const std::set<std::string>& stream) {
  const std::string x = scaled_operand(gv, n);
  return !x.empty() && stream.count(x);
}

// Zeros a sum starts from (HF's MoE loop adds its experts to one).
bool zeros(const GraphView& gv, const std::string& v) {
  const nf::Node* p = gv.producer(v);
  return p && nf::graph::fills_zeros(*p);
}

// The linear layers whose outputs `value` sums: one writer, an Add of writer outputs
// (parallel attention and MLP; zeros to start from), or a writer output times a value with one
// column (a mixture of experts' routing weight of each token, a shared expert's gate), each
// read only there. A rotation of the last axis commutes with all of these.
bool writers_of(const GraphView& gv, const std::string& value, std::vector<Linear>* out, int depth = 0) {
  Linear w;
  if (linear_writer(gv, value, &w)) {
    out->push_back(w);
    return true;
  }
  const nf::Node* p = gv.producer(value);
  while (p && (p->op_type() == "Reshape" || passthrough(p->op_type()))) p = gv.producer(p->input(0));
  if (!p || p->input_count() != 2 || depth > 64) return false;
  const std::string a = p->input(0), b = p->input(1);
  std::vector<Linear> found;
  auto part = [&](const std::string& v) {
    return !gv.is_initializer(v) && gv.consumers(v).size() == 1 && writers_of(gv, v, &found, depth + 1);
  };
  const bool sum = p->op_type() == "Add" && (zeros(gv, a) || part(a)) && (zeros(gv, b) || part(b));
  const bool scaled = p->op_type() == "Mul" && ((gv.last_dim(b) == 1 && part(a)) || (gv.last_dim(a) == 1 && part(b)));
  if (!sum && !scaled) return false;
  out->insert(out->end(), found.begin(), found.end());
  return true;
}

// The 2-D float table `value` is a Gather of (a position embedding): "" when it is not one.
std::string table_of(const GraphView& gv, const std::string& value) {
  const nf::Node* p = gv.producer(through_casts(gv, value));
  if (!p || p->op_type() != "Gather" || p->attr_int("axis", 0) != 0) return "";
  const nf::Tensor t = gv.float_initializer(p->input(0));
  return t && t.dims().size() == 2 ? p->input(0) : "";
}

// The norm of a writer's output that `value` is (through Casts): false when it is not one.
bool post_norm_of(const GraphView& gv, const std::string& value, const std::vector<RmsNorm>& norms, PostNorm* out) {
  const std::string v = through_casts(gv, value);
  for (const RmsNorm& n : norms)
    if (n.output == v && linear_writer(gv, n.input, &out->writer)) {
      out->norm = n;
      out->added = value;
      return true;
    }
  return false;
}

// A Reshape of the rows that keeps the hidden axis stays on the stream (OPT runs its MLP and
// second residual Add on [rows, hidden] and views the result back): a rotation of the last
// axis commutes with it.
bool row_reshape(const GraphView& gv, const nf::Node& n, const std::set<std::string>& stream) {
  if (n.op_type() != "Reshape" || !stream.count(n.input(0))) return false;
  const int64_t hidden = gv.last_dim(n.input(0));
  return hidden > 0 && gv.last_dim(n.output(0)) == hidden;
}

}  // namespace

ResidualStream find_residual_stream(const GraphView& gv, const std::string& embedding_output,
                                    const std::vector<RmsNorm>& norms) {
  ResidualStream rs;
  rs.values.insert(embedding_output);
  std::set<std::string> writer_weights;
  auto claim = [&](const Linear& w) {
    if (!writer_weights.insert(w.weight).second)
      throw nf::Error("spinquant: weight '" + w.weight + "' writes the residual stream twice");
  };
  for (const nf::Node& n : gv.graph.nodes()) {
    std::string_view op = n.op_type();
    if ((passthrough(op) && rs.values.count(n.input(0))) || scaled(gv, n, rs.values) || row_reshape(gv, n, rs.values))
      rs.values.insert(n.output(0));
    if (op != "Add" || n.input_count() != 2) continue;
    const bool a = rs.values.count(n.input(0)) != 0, b = rs.values.count(n.input(1)) != 0;
    if (a == b) continue;
    std::string other = n.input(a ? 1 : 0);
    std::vector<Linear> writers;
    PostNorm post;
    if (std::string table = table_of(gv, other); !table.empty()) {
      rs.tables.push_back(table);
    } else if (post_norm_of(gv, other, norms, &post)) {
      claim(post.writer);
      post.add_output = n.output(0);
      rs.post_norms.push_back(post);
    } else if (!writers_of(gv, other, &writers)) {
      throw nf::Error("spinquant: residual Add '" + std::string(n.name()) + "' adds '" + other +
                      "', which is not a linear layer's output; cannot rotate the residual stream");
    }
    for (const Linear& w : writers) {
      claim(w);
      rs.writers.push_back(w);
    }
    rs.values.insert(n.output(0));
  }
  // A norm commutes with the rotation only when its gain is fused: every Pow, Mul or Div that
  // reads the stream must be inside a norm found above, or a scaling the stream goes through.
  std::set<std::string> norm_inputs;
  for (const RmsNorm& n : norms) norm_inputs.insert(n.input);
  for (const auto& v : rs.values) {
    if (gv.is_output(v)) throw nf::Error("spinquant: residual value '" + v + "' is a graph output; cannot rotate it");
    for (const Use& u : gv.consumers(v)) {
      std::string_view op = u.node.op_type();
      if (Linear l; u.input == 0 && as_linear(gv, u.node, &l)) {
        rs.readers.push_back(l);
        continue;
      }
      const bool in_norm = (op == "Pow" || op == "Mul" || op == "Div") && norm_inputs.count(through_casts(gv, v));
      if (!(passthrough(op) || op == "Add" || op == "Shape" || in_norm || rs.values.count(u.node.output(0)) ||
            row_reshape(gv, u.node, rs.values)))
        throw nf::Error("spinquant: residual value '" + v + "' feeds a " + std::string(op) + " node ('" +
                        std::string(u.node.name()) + "') that does not commute with a rotation" +
                        (op == "Pow" || op == "Mul" || op == "Div" ? " (not part of a norm whose gain it can fuse)" : ""));
    }
  }
  return rs;
}

std::vector<Linear> down_projections(const GraphView& gv, const ResidualStream& stream) {
  std::vector<Linear> result, writers = stream.writers;
  for (const PostNorm& p : stream.post_norms) writers.push_back(p.writer);
  for (const Linear& w : writers) {
    const nf::Node* p = gv.producer(through_casts(gv, w.input));
    if (p && p->op_type() == "Mul" && !gv.is_initializer(p->input(0)) && !gv.is_initializer(p->input(1)))
      result.push_back(w);
  }
  return result;
}

}  // namespace spinquant
