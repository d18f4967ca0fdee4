#include "spinquant/layer_norms.h"

#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/value_types.h>

#include <cstring>
#include <map>
#include <set>

#include "spinquant/residual.h"

namespace spinquant {
namespace {

// The value of a one-element int64 constant (initializer or Constant node) into `out`;
// false when `v` is not one.
bool int_scalar(const GraphView& gv, const std::string& v, int64_t* out) {
  nf::Tensor t = gv.graph.initializer(v);
  if (!t) {
    const nf::Node* p = gv.producer(v);
    if (p && p->op_type() == "Constant") t = p->attr_tensor("value");
  }
  if (!t || t.dtype() != NF_DTYPE_INT64 || t.numel() != 1) return false;
  *out = t.data_as<int64_t>()[0];
  return true;
}

// ReduceMean of `x` over its last axis, keeping it (axes an attribute, or an input from opset 18).
bool mean_over_last_axis(const GraphView& gv, const nf::Node& n, const std::string& x) {
  if (n.op_type() != "ReduceMean" || n.input(0) != x || n.attr_int("keepdims", 1) != 1) return false;
  const std::vector<int64_t> attr = n.attr_ints("axes");
  int64_t axis = 0;
  const bool one_axis = attr.size() == 1 ? (axis = attr[0], true)
                                         : attr.empty() && !n.input(1).empty() && int_scalar(gv, n.input(1), &axis);
  nf::ValueType t;
  const int64_t rank = gv.graph.value_type(x, &t) ? static_cast<int64_t>(t.dims.size()) : 0;
  return one_axis && (axis == -1 || (rank > 0 && axis == rank - 1));
}

// gain * x / sqrt(mean(x^2) + eps) (+ bias) in place of LayerNormalization `ln`; the forms
// find_rms_norms recognises.
void write_rms_norm(nf::Graph& g, const nf::Node& ln) {
  const std::string x = ln.input(0), gain = ln.input(1), bias = ln.input(2), out = ln.output(0);
  const std::string at = out + "/rms_norm/";
  const float eps = ln.attr_float("epsilon", 1e-5f);
  write_initializer(g, at + "eps", {1}, {eps});
  std::vector<std::string> mean_inputs = {at + "squares"};
  if (g.opset() >= 18) {  // ReduceMean's axes became an input
    nf::graph::set_int64_initializer(g, at + "axes", {-1});
    mean_inputs.push_back(at + "axes");
  }
  const std::string gained = bias.empty() ? out : at + "gained";
  g.add_node("Mul", {x, x}, {at + "squares"}, at + "squares");
  nf::Node mean = g.add_node("ReduceMean", mean_inputs, {at + "mean"}, at + "mean");
  if (g.opset() < 18) mean.set_attr("axes", std::vector<int64_t>{-1});
  g.add_node("Add", {at + "mean", at + "eps"}, {at + "mean_eps"}, at + "mean_eps");
  g.add_node("Sqrt", {at + "mean_eps"}, {at + "rms"}, at + "rms");
  g.add_node("Div", {x, at + "rms"}, {at + "normalized"}, at + "normalized");
  g.add_node("Mul", {at + "normalized", gain}, {gained}, at + "gain");
  if (!bias.empty()) g.add_node("Add", {gained, bias}, {out}, at + "bias");
  nf::ValueType t;
  if (!g.value_type(x, &t)) return;
  std::vector<int64_t> one = t.dims;
  std::vector<std::string> one_params = t.dim_params;
  if (!one.empty()) one.back() = 1, one_params.back().clear();
  for (const char* v : {"squares", "normalized"}) g.set_value_type(at + v, t.dtype, t.dims, t.dim_params);
  for (const char* v : {"mean", "mean_eps", "rms"}) g.set_value_type(at + v, t.dtype, one, one_params);
  if (!bias.empty()) g.set_value_type(gained, t.dtype, t.dims, t.dim_params);
}

// torch >= 2.0 exports a LayerNorm without gain or bias (OLMo-1) with Constant nodes of ones
// and zeros for them: made initializers (copies), they fold into the readers like any gain.
void norm_constants_as_initializers(nf::Graph& g) {
  std::set<std::string> wanted;
  for (const nf::Node& n : g.nodes())
    if (n.op_type() == "LayerNormalization")
      for (size_t i : {size_t{1}, size_t{2}})
        if (i < n.input_count() && !n.input(i).empty()) wanted.insert(n.input(i));
  for (const nf::Node& n : g.nodes()) {
    if (n.op_type() != "Constant" || n.output_count() != 1 || !wanted.count(n.output(0))) continue;
    const nf::Tensor value = n.attr_tensor("value");
    if (!value || value.dtype() != NF_DTYPE_FLOAT32) continue;
    nf::Tensor copy = nf::Tensor::create(value.dtype(), value.dims());
    std::memcpy(copy.mutable_data(), value.data(), value.nbytes());
    const std::string name = n.output(0);
    g.remove_node(n);
    g.set_initializer(name, copy);
  }
}

}  // namespace

std::vector<std::string> drop_mean_subtractions(nf::Graph& g, const std::set<std::string>& before_stream) {
  norm_constants_as_initializers(g);
  GraphView gv(g);
  std::vector<std::string> centred;
  std::vector<nf::Node> layer_norms;
  std::map<std::string, std::string> same_as;  // x - mean(x) -> x
  for (const nf::Node& n : g.nodes()) {
    if (!n.input_count() || before_stream.count(n.input(0))) continue;  // Bloom's embedding norm stays a LayerNorm
    if (n.op_type() == "LayerNormalization") {
      nf::ValueType t;
      const int64_t axis = n.attr_int("axis", -1);
      const bool last = axis == -1 || (g.value_type(n.input(0), &t) && axis == static_cast<int64_t>(t.dims.size()) - 1);
      const nf::Tensor gain = gv.float_initializer(n.input(1));
      const bool extra_outputs = (n.output_count() > 1 && !n.output(1).empty()) || (n.output_count() > 2 && !n.output(2).empty());
      if (!last || !gain || gain.dims().size() != 1 || extra_outputs ||
          (!n.input(2).empty() && !gv.float_initializer(n.input(2))))
        throw nf::Error("spinquant: LayerNormalization '" + std::string(n.name()) +
                        "' is not a last-axis norm with a constant 1-D gain and bias and one output; cannot make it an RMSNorm");
      layer_norms.push_back(n);
      centred.push_back(n.input(0));
    } else if (n.op_type() == "Sub" && n.input_count() == 2) {
      const nf::Node* m = gv.producer(n.input(1));
      if (!m || !mean_over_last_axis(gv, *m, n.input(0))) continue;
      if (gv.is_output(n.output(0)))
        throw nf::Error("spinquant: the centred value '" + n.output(0) + "' is a graph output; cannot drop its mean subtraction");
      same_as[n.output(0)] = n.input(0);
      centred.push_back(n.input(0));
    }
  }
  for (const nf::Node& ln : layer_norms) {
    write_rms_norm(g, ln);
    g.remove_node(ln);
  }
  for (nf::Node n : g.nodes())
    for (size_t i = 0; i < n.input_count(); ++i)
      if (auto it = same_as.find(n.input(i)); it != same_as.end()) n.set_input(i, it->second);
  if (!same_as.empty()) nf::graph::eliminate_dead_nodes(g);  // the means and subtractions
  g.sort();
  return centred;
}

size_t fold_norm_biases(GraphView& gv, const std::vector<RmsNorm>& norms) {
  struct NewBias {
    Linear layer;
    std::vector<float> values;
  };
  std::vector<NewBias> biases;
  std::map<std::string, std::string> norm_output_of;  // the bias Add's output -> the gain's output
  for (const RmsNorm& n : norms) {
    const auto& uses = gv.consumers(n.output);
    if (uses.size() != 1 || uses[0].node.op_type() != "Add") continue;
    const nf::Node& add = uses[0].node;
    const nf::Tensor bias = gv.float_initializer(add.input(1 - uses[0].input));
    if (!bias || bias.dims().size() != 1) continue;
    const std::vector<float> beta = read_floats(bias);
    for (const Linear& l : linear_readers(gv, add.output(0), "norm output")) {
      if (l.K != static_cast<int64_t>(beta.size()))
        throw nf::Error("spinquant: norm bias '" + add.input(1 - uses[0].input) + "' has " + std::to_string(beta.size()) +
                        " entries but weight '" + l.weight + "' has " + std::to_string(l.K) + " input channels");
      std::vector<double> b(static_cast<size_t>(l.N), 0.0);
      if (!l.bias.empty()) {
        const std::vector<float> old = read_floats(gv.float_initializer(l.bias));
        std::copy(old.begin(), old.end(), b.begin());
      }
      const float* B = gv.float_initializer(l.weight).data_as<float>();
      for (int64_t k = 0; k < l.K; ++k)
        for (int64_t j = 0; j < l.N; ++j) b[j] += static_cast<double>(beta[k]) * (l.nk ? B[j * l.K + k] : B[k * l.N + j]);
      biases.push_back({l, std::vector<float>(b.begin(), b.end())});
    }
    norm_output_of[add.output(0)] = n.output;
  }
  nf::Graph& g = gv.graph;
  for (nf::Node n : g.nodes()) {
    if (n.op_type() == "Add" && norm_output_of.count(n.output(0))) {
      g.remove_node(n);
      continue;
    }
    for (size_t i = 0; i < n.input_count(); ++i)
      if (auto it = norm_output_of.find(n.input(i)); it != norm_output_of.end()) n.set_input(i, it->second);
  }
  for (const NewBias& nb : biases) {
    const Linear& l = nb.layer;
    if (!l.bias.empty()) {
      write_initializer(g, l.bias, {l.N}, nb.values);
      continue;
    }
    // out = MatMul/Gemm(...) becomes out = Add(MatMul/Gemm(...), bias): consumers and graph outputs keep the name.
    const std::string name = l.weight + ".norm_bias", before = l.node_output + "/before_norm_bias";
    write_initializer(g, name, {l.N}, nb.values);
    for (nf::Node n : g.nodes())
      if (n.output_count() > 0 && n.output(0) == l.node_output) n.set_output(0, before);
    g.add_node("Add", {before, name}, {l.node_output}, before + "/add");
    nf::ValueType t;
    if (g.value_type(l.node_output, &t)) g.set_value_type(before, t.dtype, t.dims, t.dim_params);
  }
  g.sort();
  return norm_output_of.size();
}

std::vector<std::string> rewrite_layer_norms(nf::Graph& g, const std::string& embedding_output, int64_t D,
                                             const std::set<std::string>& before_stream, size_t* folded_biases) {
  *folded_biases = 0;
  const std::vector<std::string> centred = drop_mean_subtractions(g, before_stream);
  if (centred.empty()) return centred;
  GraphView gv(g);
  const std::vector<RmsNorm> norms = find_rms_norms(gv, D);
  const std::set<std::string> on_stream = find_residual_stream(gv, embedding_output, norms).values;
  std::set<std::string> sources;  // what each centred value is a Cast of (norms read through Casts)
  for (const std::string& v : centred) {
    if (!on_stream.count(v))
      throw nf::Error("spinquant: a LayerNorm (or mean subtraction) reads '" + v +
                      "', which is not the residual stream: only the stream is centred");
    sources.insert(through_casts(gv, v));
  }
  for (const RmsNorm& n : norms)
    if (on_stream.count(n.input) && !sources.count(n.input))
      throw nf::Error("spinquant: the model has both RMSNorms and LayerNorms of the hidden size; centring the stream "
                      "for the LayerNorms would change the RMSNorm of '" + n.input + "'");
  *folded_biases = fold_norm_biases(gv, norms);
  return centred;
}

}  // namespace spinquant
