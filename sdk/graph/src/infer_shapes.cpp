#include "npuforge/graph/infer_shapes.h"

#include <map>
#include <set>

#include "npuforge/graph/evaluate_node.h"
#include "npuforge/graph/kernel_tensors.h"
#include "npuforge/graph/operators.h"
#include "shape_values.h"

namespace nf::graph {

namespace k = nf::kernels;
using Types = std::vector<TensorType>;
using Values = std::vector<const k::Tensor*>;

std::vector<TensorType> infer_node_types(const Node& n, const std::vector<TensorType>& inputs,
                                         const std::vector<const kernels::Tensor*>& values) {
  Types out;
  const Operator* op = find_operator(n.op_type(), n.domain());
  if (op && op->infer) {
    try {
      out = op->infer(GraphNode(n), inputs, values);
    } catch (const std::exception& e) {
      throw Error(std::string(n.op_type()) + " '" + std::string(n.name()) + "': " + e.what());
    }
  }
  out.resize(n.output_count());
  return out;
}

InferShapesResult infer_shapes(Graph g) {
  g.sort();
  std::map<std::string, TensorType> types;
  std::map<std::string, k::Tensor> constants;
  for (const std::string& v : g.inputs())
    if (auto t = get_value_type(g, v)) types[v] = *t;
  auto inits = g.initializer_names();
  std::set<std::string> initializer_set(inits.begin(), inits.end());
  auto constant = [&](const std::string& v) -> const k::Tensor* {
    auto it = constants.find(v);
    if (it != constants.end()) return &it->second;
    if (!initializer_set.count(v)) return nullptr;
    return &constants.emplace(v, to_kernel(g.initializer(v))).first->second;
  };
  auto type_of = [&](const std::string& v) -> TensorType {
    auto it = types.find(v);
    if (it != types.end()) return it->second;
    if (const k::Tensor* c = constant(v)) return {c->dtype(), c->dims()};
    return {};
  };

  // Shape computations known in part (shape_values.h): a fully known one is a constant to the
  // shape rules; one known in part refines the Reshape / Expand / ConstantOfShape reading it.
  ShapeValues shape_values;
  auto int_constant = [&](const std::string& v) -> std::optional<ShapeValue> {
    const k::Tensor* c = constant(v);
    if (!c || c->dims().size() > 1 || (c->dtype() != NF_DTYPE_INT64 && c->dtype() != NF_DTYPE_INT32)) return std::nullopt;
    return ShapeValue{c->to_int64s(), c->dims().empty()};
  };
  auto known_value = [&](const std::string& v) -> const k::Tensor* {
    if (const k::Tensor* c = constant(v)) return c;
    const ShapeValue* s = shape_values.find(v);
    if (!s || !s->known()) return nullptr;
    const std::vector<int64_t> dims = s->scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(s->v.size())};
    return &constants.emplace(v, k::Tensor::from(NF_DTYPE_INT64, dims, s->v)).first->second;
  };

  InferShapesResult result;
  for (const Node& n : g.nodes()) {
    Types in;
    Values vals;
    for (const std::string& v : n.inputs()) {
      in.push_back(v.empty() ? TensorType{} : type_of(v));
      vals.push_back(v.empty() ? nullptr : known_value(v));
    }
    Types out;
    // Constant nodes are values, not shapes to reason about.
    if (n.op_type() == "Constant" && can_evaluate(n)) {
      k::Tensor c = evaluate_node(n, vals).at(0);
      constants[n.output(0)] = c;
      out.push_back({c.dtype(), c.dims()});
    } else {
      out = infer_node_types(n, in, vals);
      const size_t shape_input = n.op_type() == "ConstantOfShape" ? 0 : 1;
      if ((n.op_type() == "Reshape" || n.op_type() == "Expand" || n.op_type() == "ConstantOfShape") &&
          shape_input < n.input_count() && !vals[shape_input] && !out.empty())
        if (const ShapeValue* s = shape_values.find(n.input(shape_input)))
          out[0] = refine_with_shape_value(n, in.empty() ? TensorType{} : in[0], *s, out[0]);
    }
    shape_values.record(n, int_constant, type_of);
    for (size_t i = 0; i < out.size(); ++i) {
      const std::string name = n.output(i);
      if (name.empty()) continue;
      types[name] = out[i];
      if (out[i].is_static()) ++result.typed;
      else result.not_static.push_back(name);
      set_value_type(g, name, out[i]);
    }
  }
  return result;
}

}  // namespace nf::graph
