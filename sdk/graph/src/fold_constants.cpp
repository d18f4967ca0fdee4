#include "npuforge/graph/fold_constants.h"

#include <map>
#include <optional>
#include <set>

#include "npuforge/graph/evaluate_node.h"
#include "npuforge/graph/graph_view.h"
#include "npuforge/graph/infer_shapes.h"
#include "npuforge/graph/kernel_tensors.h"
#include "npuforge/graph/operators.h"

namespace nf::graph {
namespace {

namespace k = nf::kernels;

// Shape of a value whose type is static, without touching its data.
k::Tensor shape_of(const Node& shape_node, const std::vector<int64_t>& dims) {
  std::vector<int64_t> d = shape_node_dims(GraphNode(shape_node), dims);
  const auto rank = static_cast<int64_t>(d.size());
  return k::Tensor::from(NF_DTYPE_INT64, {rank}, d);
}

}  // namespace

FoldResult fold_constants(Graph g, const FoldOptions& opts) {
  g.sort();
  GraphView view(g);

  // Initializers that are also graph inputs are defaults the caller may override.
  std::set<std::string> foldable_initializers;
  for (const std::string& name : g.initializer_names())
    if (!view.is_input(name)) foldable_initializers.insert(name);

  std::map<std::string, k::Tensor> constants;
  std::map<std::string, TensorType> types;
  for (const std::string& v : g.inputs())
    if (auto t = get_value_type(g, v)) types[v] = *t;

  auto constant = [&](const std::string& v) -> const k::Tensor* {
    auto it = constants.find(v);
    if (it != constants.end()) return &it->second;
    if (!foldable_initializers.count(v)) return nullptr;
    return &constants.emplace(v, to_kernel(g.initializer(v))).first->second;
  };
  auto type_of = [&](const std::string& v) -> TensorType {
    auto it = types.find(v);
    if (it != types.end()) return it->second;
    if (const k::Tensor* c = constant(v)) return {c->dtype(), c->dims()};
    if (auto t = get_value_type(g, v)) return *t;
    return {};
  };

  std::vector<Node> folded;
  for (const Node& n : g.nodes()) {
    std::vector<TensorType> in_types;
    std::vector<const k::Tensor*> in_values;
    bool all_constant = true;
    size_t input_bytes = 0;
    for (const std::string& v : n.inputs()) {
      const k::Tensor* c = v.empty() ? nullptr : constant(v);
      in_values.push_back(c);
      in_types.push_back(v.empty() ? TensorType{} : type_of(v));
      if (!v.empty() && !c) all_constant = false;
      if (c) input_bytes += c->nbytes();
    }

    std::optional<std::vector<k::Tensor>> results;
    const TensorType first = in_types.empty() ? TensorType{} : in_types[0];
    if (n.op_type() == "Shape" && n.domain().empty() && first.is_static()) {
      results = std::vector<k::Tensor>{shape_of(n, *first.dims)};
    } else if (all_constant && can_evaluate(n) &&
               (n.op_type() == "Constant" || input_bytes <= opts.max_result_bytes)) {
      results = evaluate_node(n, in_values, g.opset(""));
      size_t bytes = 0;
      for (const k::Tensor& t : *results) bytes += t.nbytes();
      if (n.op_type() != "Constant" && bytes > opts.max_result_bytes) results.reset();
    }

    if (results) {
      for (size_t i = 0; i < results->size() && i < n.output_count(); ++i) {
        const k::Tensor& t = (*results)[i];
        types[n.output(i)] = {t.dtype(), t.dims()};
        constants[n.output(i)] = t;
      }
      folded.push_back(n);
      continue;
    }
    std::vector<TensorType> out = infer_node_types(n, in_types, in_values);
    for (size_t i = 0; i < out.size(); ++i)
      if (!n.output(i).empty()) types[n.output(i)] = out[i];
  }

  // Folded nodes become initializers (only the outputs something still reads).
  for (Node n : folded) {
    for (const std::string& out : n.outputs())
      if (!out.empty() && view.is_used(out)) g.set_initializer(out, to_host(constants.at(out)));
    g.remove_node(n);
  }
  return {folded.size()};
}

}  // namespace nf::graph
