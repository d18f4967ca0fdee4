// Shape rules of the operator table (operators.cpp): output types of a node from its input
// types and the values of its constant inputs; -1 is an unknown dim.
#include "shape_rules.h"

#include <algorithm>
#include <optional>
#include <set>

namespace nf::graph::shape_rules {
namespace {

namespace k = nf::kernels;

TensorType ranked(nf_dtype t, Dims d) { return {t, std::move(d)}; }
const TensorType& in_type(const Types& in, size_t i) {
  static const TensorType none;
  return i < in.size() ? in[i] : none;
}
const k::Tensor* in_value(const Values& v, size_t i) { return i < v.size() ? v[i] : nullptr; }

int64_t norm_axis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// Numpy broadcasting where -1 is an unknown dim.
std::optional<Dims> broadcast(const std::vector<const TensorType*>& ts) {
  size_t rank = 0;
  for (auto* t : ts) {
    if (!t->dims) return std::nullopt;
    rank = std::max(rank, t->dims->size());
  }
  Dims out(rank, 1);
  for (auto* t : ts) {
    const Dims& d = *t->dims;
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t& o = out[rank - d.size() + i];
      int64_t v = d[i];
      if (v == 1) continue;
      if (o == 1 || o == v) o = v;
      else if (v < 0) o = o > 1 ? o : -1;
      else if (o < 0) o = v;
      else throw Error("shapes " + to_string(*t) + " do not broadcast");
    }
  }
  return out;
}

Types elementwise(const OpNode& n, const Types& in, nf_dtype out_dtype) {
  std::vector<const TensorType*> ts;
  for (size_t i = 0; i < n.input_count(); ++i)
    if (n.has_input(i)) ts.push_back(&in_type(in, i));
  return {TensorType{out_dtype, broadcast(ts)}};
}
std::optional<std::vector<int64_t>> axes_value(const OpNode& n, const Values& v, size_t i) {
  if (n.has_input(i)) {
    if (!in_value(v, i)) return std::nullopt;
    return in_value(v, i)->to_int64s();
  }
  return n.attr_ints("axes");
}

}  // namespace

Types same_as_input(const OpNode&, const Types& in, const Values&) { return {in_type(in, 0)}; }
Types arithmetic(const OpNode& n, const Types& in, const Values&) { return elementwise(n, in, in_type(in, 0).dtype); }
Types comparison(const OpNode& n, const Types& in, const Values&) { return elementwise(n, in, NF_DTYPE_BOOL); }
Types where(const OpNode& n, const Types& in, const Values&) { return elementwise(n, in, in_type(in, 1).dtype); }
Types cast(const OpNode& n, const Types& in, const Values&) {
  return {TensorType{static_cast<nf_dtype>(n.attr_int("to", 0)), in_type(in, 0).dims}};
}

Types shape_op(const OpNode& n, const Types& in, const Values&) {
  const TensorType& x = in_type(in, 0);
  if (!x.dims) return {ranked(NF_DTYPE_INT64, {-1})};
  return {ranked(NF_DTYPE_INT64, {static_cast<int64_t>(shape_node_dims(n, *x.dims).size())})};
}

Types reshape(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  const k::Tensor* shape_t = in_value(v, 1);
  if (!shape_t) {
    const TensorType& s = in_type(in, 1);
    if (s.is_static() && s.dims->size() == 1) return {ranked(x.dtype, Dims((*s.dims)[0], -1))};
    return {TensorType{x.dtype, std::nullopt}};
  }
  const Dims requested = shape_t->to_int64s();
  Dims shape = requested;
  bool allow_zero = n.attr_int("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  bool others_known = true;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (requested[i] == 0 && !allow_zero) shape[i] = x.dims && i < x.dims->size() ? (*x.dims)[i] : -1;
    if (requested[i] == -1) {
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (shape[i] < 0) others_known = false;
    else known *= shape[i];
  }
  if (infer >= 0) {
    if (x.is_static() && others_known) {
      int64_t total = 1;
      for (int64_t d : *x.dims) total *= d;
      shape[infer] = known ? total / known : 0;
    } else {
      shape[infer] = -1;
    }
  }
  return {ranked(x.dtype, shape)};
}

Types unsqueeze(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  auto axes = axes_value(n, v, 1);
  if (!x.dims || !axes) return {TensorType{x.dtype, std::nullopt}};
  int64_t r = static_cast<int64_t>(x.dims->size() + axes->size());
  std::vector<bool> add(r, false);
  for (int64_t a : *axes) add[norm_axis(a, r)] = true;
  Dims d;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) d.push_back(add[i] ? 1 : (*x.dims)[j++]);
  return {ranked(x.dtype, d)};
}

Types squeeze(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  auto axes = axes_value(n, v, 1);
  if (!x.dims || !axes) return {TensorType{x.dtype, std::nullopt}};
  int64_t r = static_cast<int64_t>(x.dims->size());
  std::vector<bool> drop(r, false);
  if (axes->empty()) {
    if (!x.is_static()) return {TensorType{x.dtype, std::nullopt}};
    for (int64_t i = 0; i < r; ++i) drop[i] = (*x.dims)[i] == 1;
  }
  for (int64_t a : *axes) drop[norm_axis(a, r)] = true;
  Dims d;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) d.push_back((*x.dims)[i]);
  return {ranked(x.dtype, d)};
}

Types transpose(const OpNode& n, const Types& in, const Values&) {
  const TensorType& x = in_type(in, 0);
  if (!x.dims) return {TensorType{x.dtype, std::nullopt}};
  Dims perm = n.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = static_cast<int64_t>(x.dims->size()) - 1; i >= 0; --i) perm.push_back(i);
  Dims d;
  for (int64_t p : perm) d.push_back((*x.dims).at(p));
  return {ranked(x.dtype, d)};
}

Types concat(const OpNode& n, const Types& in, const Values&) {
  const TensorType& first = in_type(in, 0);
  if (!first.dims) return {TensorType{first.dtype, std::nullopt}};
  int64_t r = static_cast<int64_t>(first.dims->size());
  int64_t axis = norm_axis(n.attr_int("axis", 0), r);
  Dims d = *first.dims;
  d[axis] = 0;
  for (size_t i = 0; i < n.input_count(); ++i) {
    const TensorType& t = in_type(in, i);
    if (!t.dims || t.dims->size() != d.size()) return {TensorType{first.dtype, std::nullopt}};
    for (int64_t j = 0; j < r; ++j) {
      int64_t v = (*t.dims)[j];
      if (j == axis) d[j] = (d[j] < 0 || v < 0) ? -1 : d[j] + v;
      else if (d[j] < 0) d[j] = v;
    }
  }
  return {ranked(first.dtype, d)};
}

Types slice(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  if (!x.dims) return {TensorType{x.dtype, std::nullopt}};
  int64_t r = static_cast<int64_t>(x.dims->size());
  const k::Tensor *starts_t = in_value(v, 1), *ends_t = in_value(v, 2);
  bool axes_known = !n.has_input(3) || in_value(v, 3);
  bool steps_known = !n.has_input(4) || in_value(v, 4);
  if (!starts_t || !ends_t || !axes_known || !steps_known) {
    // Only the sliced axes change; without their values every axis might.
    return {ranked(x.dtype, Dims(r, -1))};
  }
  Dims starts = starts_t->to_int64s(), ends = ends_t->to_int64s();
  Dims axes = n.has_input(3) ? in_value(v, 3)->to_int64s() : Dims{};
  Dims steps = n.has_input(4) ? in_value(v, 4)->to_int64s() : Dims{};
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  Dims d = *x.dims;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = norm_axis(axes[i], r);
    int64_t len = d[a];
    if (len < 0) continue;
    int64_t step = i < steps.size() ? steps[i] : 1;
    int64_t s = starts[i], e = ends[i];
    if (step > 0) {
      s = std::clamp<int64_t>(s < 0 ? s + len : s, 0, len);
      e = std::clamp<int64_t>(e < 0 ? e + len : e, 0, len);
      d[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s < 0 ? s + len : s, -1, len - 1);
      e = std::clamp<int64_t>(e < 0 ? e + len : e, -1, len - 1);
      d[a] = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
  }
  return {ranked(x.dtype, d)};
}

Types gather(const OpNode& n, const Types& in, const Values&) {
  const TensorType &x = in_type(in, 0), &idx = in_type(in, 1);
  if (!x.dims || !idx.dims) return {TensorType{x.dtype, std::nullopt}};
  int64_t axis = norm_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.dims->size()));
  Dims d(x.dims->begin(), x.dims->begin() + axis);
  d.insert(d.end(), idx.dims->begin(), idx.dims->end());
  d.insert(d.end(), x.dims->begin() + axis + 1, x.dims->end());
  return {ranked(x.dtype, d)};
}

Types gather_elements(const OpNode&, const Types& in, const Values&) {
  return {TensorType{in_type(in, 0).dtype, in_type(in, 1).dims}};
}

Types non_zero(const OpNode&, const Types& in, const Values&) {
  const TensorType& x = in_type(in, 0);
  return {ranked(NF_DTYPE_INT64, {x.dims ? std::max<int64_t>(static_cast<int64_t>(x.dims->size()), 1) : -1, -1})};
}

Types one_hot(const OpNode& n, const Types& in, const Values& v) {
  const TensorType &idx = in_type(in, 0), &values = in_type(in, 2);
  const k::Tensor* depth = in_value(v, 1);
  if (!idx.dims) return {TensorType{values.dtype, std::nullopt}};
  Dims d = *idx.dims;
  int64_t axis = norm_axis(n.attr_int("axis", -1), static_cast<int64_t>(d.size()) + 1);
  d.insert(d.begin() + axis, depth && depth->numel() == 1 ? depth->to_int64s()[0] : -1);
  return {ranked(values.dtype, d)};
}

Types expand(const OpNode&, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  const k::Tensor* shape_t = in_value(v, 1);
  if (!shape_t) return {TensorType{x.dtype, std::nullopt}};
  TensorType target{x.dtype, shape_t->to_int64s()};
  return {TensorType{x.dtype, broadcast({&x, &target})}};
}

Types constant_of_shape(const OpNode& n, const Types&, const Values& v) {
  k::Tensor value = n.attr_tensor("value");
  nf_dtype dt = value.empty_handle() ? NF_DTYPE_FLOAT32 : value.dtype();
  if (!in_value(v, 0)) return {TensorType{dt, std::nullopt}};
  return {ranked(dt, in_value(v, 0)->to_int64s())};
}

Types matmul(const OpNode&, const Types& in, const Values&) {
  const TensorType &a = in_type(in, 0), &b = in_type(in, 1);
  if (!a.dims || !b.dims || a.dims->empty() || b.dims->empty()) return {TensorType{a.dtype, std::nullopt}};
  Dims da = *a.dims, db = *b.dims;
  bool a_vec = da.size() == 1, b_vec = db.size() == 1;
  if (a_vec) da.insert(da.begin(), 1);
  if (b_vec) db.push_back(1);
  TensorType ba{a.dtype, Dims(da.begin(), da.end() - 2)}, bb{b.dtype, Dims(db.begin(), db.end() - 2)};
  Dims d = *broadcast({&ba, &bb});
  if (!a_vec) d.push_back(da[da.size() - 2]);
  if (!b_vec) d.push_back(db.back());
  return {ranked(a.dtype, d)};
}

Types gemm(const OpNode& n, const Types& in, const Values&) {
  const TensorType &a = in_type(in, 0), &b = in_type(in, 1);
  if (!a.dims || !b.dims) return {TensorType{a.dtype, std::nullopt}};
  int64_t m = n.attr_int("transA", 0) ? (*a.dims)[1] : (*a.dims)[0];
  int64_t nn = n.attr_int("transB", 0) ? (*b.dims)[0] : (*b.dims)[1];
  return {ranked(a.dtype, {m, nn})};
}

Types reduce(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  auto axes = axes_value(n, v, 1);
  if (!x.dims || !axes) return {TensorType{x.dtype, std::nullopt}};
  int64_t r = static_cast<int64_t>(x.dims->size());
  if (axes->empty()) {
    if (n.attr_int("noop_with_empty_axes", 0)) return {x};
    for (int64_t i = 0; i < r; ++i) axes->push_back(i);
  }
  std::set<int64_t> reduced;
  for (int64_t a : *axes) reduced.insert(norm_axis(a, r));
  bool keep = n.attr_int("keepdims", 1) != 0;
  Dims d;
  for (int64_t i = 0; i < r; ++i) {
    if (!reduced.count(i)) d.push_back((*x.dims)[i]);
    else if (keep) d.push_back(1);
  }
  return {ranked(x.dtype, d)};
}

Types topk(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  if (!x.dims || !in_value(v, 1)) return {TensorType{x.dtype, std::nullopt}, TensorType{NF_DTYPE_INT64, std::nullopt}};
  Dims d = *x.dims;
  d[norm_axis(n.attr_int("axis", -1), static_cast<int64_t>(d.size()))] = in_value(v, 1)->to_int64s().at(0);
  return {ranked(x.dtype, d), ranked(NF_DTYPE_INT64, d)};
}

Types split(const OpNode& n, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  size_t parts = n.output_count();
  if (!x.dims) return Types(parts, TensorType{x.dtype, std::nullopt});
  int64_t axis = norm_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.dims->size()));
  Dims sizes = n.has_input(1) ? (in_value(v, 1) ? in_value(v, 1)->to_int64s() : Dims{}) : n.attr_ints("split");
  int64_t len = (*x.dims)[axis];
  if (sizes.empty() && len >= 0) {
    int64_t each = (len + static_cast<int64_t>(parts) - 1) / static_cast<int64_t>(parts);
    for (size_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, len - static_cast<int64_t>(p) * each));
  }
  Types out;
  for (size_t p = 0; p < parts; ++p) {
    Dims d = *x.dims;
    d[axis] = p < sizes.size() ? sizes[p] : -1;
    out.push_back(ranked(x.dtype, d));
  }
  return out;
}

Types tile(const OpNode&, const Types& in, const Values& v) {
  const TensorType& x = in_type(in, 0);
  if (!x.dims || !in_value(v, 1)) return {TensorType{x.dtype, std::nullopt}};
  Dims reps = in_value(v, 1)->to_int64s(), d = *x.dims;
  for (size_t i = 0; i < d.size() && i < reps.size(); ++i) d[i] = d[i] < 0 ? -1 : d[i] * reps[i];
  return {ranked(x.dtype, d)};
}

Types flatten(const OpNode& n, const Types& in, const Values&) {
  const TensorType& x = in_type(in, 0);
  if (!x.dims) return {TensorType{x.dtype, std::nullopt}};
  int64_t r = static_cast<int64_t>(x.dims->size()), a = norm_axis(n.attr_int("axis", 1), r);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) {
    int64_t& part = i < a ? outer : inner;
    part = (part < 0 || (*x.dims)[i] < 0) ? -1 : part * (*x.dims)[i];
  }
  return {ranked(x.dtype, {outer, inner})};
}

Types layer_norm(const OpNode& n, const Types& in, const Values&) {
  const TensorType& x = in_type(in, 0);
  Types out{x};
  if (n.output_count() > 1 && x.dims) {
    int64_t r = static_cast<int64_t>(x.dims->size()), a = norm_axis(n.attr_int("axis", -1), r);
    Dims d = *x.dims;
    for (int64_t i = a; i < r; ++i) d[i] = 1;
    out.push_back(ranked(NF_DTYPE_FLOAT32, d));
    out.push_back(ranked(NF_DTYPE_FLOAT32, d));
  }
  return out;
}

}  // namespace nf::graph::shape_rules
