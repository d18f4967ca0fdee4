// Shape values known in part, for shape inference (internal to the graph toolkit): the int64
// vectors an export computes from Shape nodes, with the dims a symbolic dim leaves unknown.
// torch writes `x.reshape(-1, x.size(-1))` as Reshape(x, Concat(-1, Shape(x)[-1])) and
// `y.view(shape)` as Reshape(y, Shape(x)): with dynamic batch and sequence their shape inputs
// are no constants, yet the hidden axis is known (OPT's MLP on [rows, hidden]).
#pragma once

#include <npuforge/plugin.hpp>

#include <climits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "npuforge/graph/value_types.h"

namespace nf::graph {

constexpr int64_t kUnknownDim = INT64_MIN;  // an element of a shape value no one knows

struct ShapeValue {
  std::vector<int64_t> v;  // kUnknownDim where not known
  bool scalar = false;
  bool known() const;
};

class ShapeValues {
 public:
  // Records what node `n` computes when it is a shape computation of known inputs;
  // `constant(name)` gives an input's int values when it is a constant, `type(name)` its type.
  template <class Constant, class Type>
  void record(const Node& n, Constant constant, Type type);
  const ShapeValue* find(const std::string& value) const;

 private:
  // The ops compute() knows: only their inputs are looked up (record runs on every node).
  static bool computes(std::string_view op);
  std::optional<ShapeValue> compute(const Node& n, const std::vector<std::optional<ShapeValue>>& in,
                                    const std::vector<std::optional<TensorType>>& types) const;
  std::map<std::string, ShapeValue> values_;
};

// The type of a Reshape / Expand / ConstantOfShape output from a shape value known in part
// (`shape`), refining `inferred` (what the rule found without it). `x` is the data input's type.
TensorType refine_with_shape_value(const Node& n, const TensorType& x, const ShapeValue& shape, TensorType inferred);

template <class Constant, class Type>
void ShapeValues::record(const Node& n, Constant constant, Type type) {
  if (n.output_count() != 1 || !computes(n.op_type())) return;
  std::vector<std::optional<ShapeValue>> in;
  std::vector<std::optional<TensorType>> types;
  for (const std::string& name : n.inputs()) {
    types.push_back(name.empty() ? std::nullopt : std::optional<TensorType>(type(name)));
    if (const ShapeValue* s = name.empty() ? nullptr : find(name)) {
      in.push_back(*s);
    } else if (std::optional<ShapeValue> c = name.empty() ? std::nullopt : constant(name)) {
      in.push_back(c);
    } else {
      in.push_back(std::nullopt);
    }
  }
  if (auto r = compute(n, in, types)) values_[n.output(0)] = *r;
}

}  // namespace nf::graph
