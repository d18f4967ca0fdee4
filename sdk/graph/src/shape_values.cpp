#include "shape_values.h"

#include <algorithm>
#include <set>

#include "npuforge/graph/operators.h"

namespace nf::graph {

bool ShapeValue::known() const {
  return std::none_of(v.begin(), v.end(), [](int64_t e) { return e == kUnknownDim; });
}

bool ShapeValues::computes(std::string_view op) {
  static const std::set<std::string_view> kOps = {"Shape", "Cast", "Identity", "Gather", "Slice", "Concat",
                                                  "Unsqueeze", "Squeeze", "Add", "Sub", "Mul", "Div"};
  return kOps.count(op) != 0;
}

const ShapeValue* ShapeValues::find(const std::string& value) const {
  auto it = values_.find(value);
  return it == values_.end() ? nullptr : &it->second;
}

namespace {

int64_t clamp_index(int64_t i, int64_t n) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); }

}  // namespace

std::optional<ShapeValue> ShapeValues::compute(const Node& n, const std::vector<std::optional<ShapeValue>>& in,
                                               const std::vector<std::optional<TensorType>>& types) const {
  const std::string op(n.op_type());
  auto input = [&](size_t i) -> const ShapeValue* { return i < in.size() && in[i] ? &*in[i] : nullptr; };
  if (op == "Shape") {
    if (types.empty() || !types[0] || !types[0]->dims) return std::nullopt;
    ShapeValue r;
    for (int64_t d : shape_node_dims(GraphNode(n), *types[0]->dims)) r.v.push_back(d < 0 ? kUnknownDim : d);
    return r;
  }
  if (op == "Cast" || op == "Identity") {
    const int64_t to = n.attr_int("to", NF_DTYPE_INT64);
    if (!input(0) || (op == "Cast" && to != NF_DTYPE_INT64 && to != NF_DTYPE_INT32)) return std::nullopt;
    return *input(0);
  }
  if (op == "Gather") {
    const ShapeValue *data = input(0), *idx = input(1);
    if (!data || data->scalar || !idx || !idx->known() || n.attr_int("axis", 0) != 0) return std::nullopt;
    ShapeValue r;
    r.scalar = idx->scalar;
    const int64_t size = static_cast<int64_t>(data->v.size());
    for (int64_t i : idx->v) {
      if (i < -size || i >= size) return std::nullopt;
      r.v.push_back(data->v[static_cast<size_t>(i < 0 ? i + size : i)]);
    }
    return r;
  }
  if (op == "Slice") {
    // One int from input i (its default when the input is absent), or false when unknown.
    auto one = [&](size_t i, int64_t dflt, int64_t* out) {
      if (i >= n.input_count() || n.input(i).empty()) return *out = dflt, true;
      const ShapeValue* s = input(i);
      if (!s || !s->known() || s->v.size() != 1) return false;
      return *out = s->v[0], true;
    };
    const ShapeValue* data = input(0);
    int64_t start = 0, end = 0, axis = 0, step = 1;
    if (!data || data->scalar || !one(1, 0, &start) || !one(2, INT64_MAX, &end) || !one(3, 0, &axis) ||
        !one(4, 1, &step) || (axis != 0 && axis != -1) || step != 1)
      return std::nullopt;
    const int64_t size = static_cast<int64_t>(data->v.size());
    ShapeValue r;
    for (int64_t i = clamp_index(start, size), e = end >= size ? size : clamp_index(end, size); i < e; ++i)
      r.v.push_back(data->v[static_cast<size_t>(i)]);
    return r;
  }
  if (op == "Concat") {
    ShapeValue r;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!input(i) || input(i)->scalar) return std::nullopt;
      r.v.insert(r.v.end(), input(i)->v.begin(), input(i)->v.end());
    }
    return r;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    const ShapeValue* data = input(0);
    if (!data || data->v.size() != 1 || data->scalar != (op == "Unsqueeze")) return std::nullopt;
    ShapeValue r = *data;
    r.scalar = op == "Squeeze";
    return r;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const ShapeValue *a = input(0), *b = input(1);
    if (!a || !b || (a->v.size() != b->v.size() && a->v.size() != 1 && b->v.size() != 1)) return std::nullopt;
    ShapeValue r;
    r.scalar = a->scalar && b->scalar;
    for (size_t i = 0; i < std::max(a->v.size(), b->v.size()); ++i) {
      const int64_t x = a->v[a->v.size() == 1 ? 0 : i], y = b->v[b->v.size() == 1 ? 0 : i];
      int64_t z = kUnknownDim;  // also on overflow: a hostile model's shape arithmetic stays unknown
      if (x == kUnknownDim || y == kUnknownDim || (op == "Div" && y == 0) ||
          (op == "Add" && __builtin_add_overflow(x, y, &z)) || (op == "Sub" && __builtin_sub_overflow(x, y, &z)) ||
          (op == "Mul" && __builtin_mul_overflow(x, y, &z)) || z == kUnknownDim) {
        r.v.push_back(kUnknownDim);
        continue;
      }
      r.v.push_back(op == "Div" ? x / y : z);
    }
    return r;
  }
  return std::nullopt;
}

TensorType refine_with_shape_value(const Node& n, const TensorType& x, const ShapeValue& shape, TensorType inferred) {
  const std::string op(n.op_type());
  std::vector<int64_t> dims;
  if (op == "Reshape") {
    const bool allow_zero = n.attr_int("allowzero", 0) != 0;
    for (size_t i = 0; i < shape.v.size(); ++i) {
      const int64_t s = shape.v[i];
      if (s > 0) dims.push_back(s);
      else if (s == 0 && !allow_zero && x.dims && i < x.dims->size()) dims.push_back((*x.dims)[i]);
      else dims.push_back(-1);  // unknown, or the one dim a -1 leaves to infer
    }
    // The inferred dim: everything else known and the input static.
    const size_t inferred_at = static_cast<size_t>(std::find(shape.v.begin(), shape.v.end(), -1) - shape.v.begin());
    if (inferred_at < shape.v.size() && x.is_static()) {
      int64_t total = 1, others = 1;
      bool known = true;
      for (int64_t d : *x.dims) known &= !__builtin_mul_overflow(total, d, &total);
      for (size_t i = 0; i < dims.size(); ++i)
        if (i != inferred_at) known &= dims[i] > 0 && !__builtin_mul_overflow(others, dims[i], &others);
      if (known && total % others == 0) dims[inferred_at] = total / others;
    }
  } else if (op == "ConstantOfShape") {
    for (int64_t s : shape.v) dims.push_back(s == kUnknownDim ? -1 : s);
  } else if (op == "Expand") {
    if (!x.dims) return inferred;
    const size_t rank = std::max(x.dims->size(), shape.v.size());
    dims.assign(rank, -1);
    for (size_t i = 0; i < rank; ++i) {
      const int64_t a = i + x.dims->size() >= rank ? (*x.dims)[i + x.dims->size() - rank] : 1;
      const int64_t b = i + shape.v.size() >= rank ? shape.v[i + shape.v.size() - rank] : 1;
      if (b == kUnknownDim) dims[i] = a > 1 ? a : -1;  // a dim of 1 or unknown broadcasts to what no one knows
      else if (b == 1) dims[i] = a;
      else dims[i] = b;
    }
  } else {
    return inferred;
  }
  // Keep what the rule knew where the shape value does not say.
  if (inferred.dims && inferred.dims->size() == dims.size())
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] < 0) dims[i] = (*inferred.dims)[i];
  return TensorType{inferred.dtype != NF_DTYPE_UNDEFINED ? inferred.dtype : x.dtype, dims};
}

}  // namespace nf::graph
