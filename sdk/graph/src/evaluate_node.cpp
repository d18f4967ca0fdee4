#include "npuforge/graph/evaluate_node.h"

#include <npuforge/kernels/elementwise.h>
#include <npuforge/kernels/matmul.h>
#include <npuforge/kernels/movement.h>
#include <npuforge/kernels/reduce.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "npuforge/graph/kernel_tensors.h"

namespace nf::graph {
namespace {

namespace k = nf::kernels;
using Ins = std::vector<const k::Tensor*>;
using Outs = std::vector<k::Tensor>;
using OpFn = Outs (*)(const Node& n, const Ins& in);

const k::Tensor& need(const Node& n, const Ins& in, size_t i) {
  if (i >= in.size() || !in[i])
    throw Error(std::string(n.op_type()) + " '" + std::string(n.name()) + "': input " + std::to_string(i) +
                " is required");
  return *in[i];
}
const k::Tensor* opt(const Ins& in, size_t i) { return i < in.size() ? in[i] : nullptr; }
// Axes from input `i` (opset 13+) or the `axes` attribute (older opsets).
std::vector<int64_t> axes_of(const Node& n, const Ins& in, size_t i) {
  if (const k::Tensor* t = opt(in, i)) return t->to_int64s();
  return n.attr_ints("axes");
}

template <k::Binary B>
Outs binary(const Node& n, const Ins& in) { return {k::binary(B, need(n, in, 0), need(n, in, 1))}; }
template <k::Unary U>
Outs unary(const Node& n, const Ins& in) { return {k::unary(U, need(n, in, 0))}; }
template <k::Binary B>
Outs variadic(const Node& n, const Ins& in) {
  k::Tensor acc = need(n, in, 0);
  for (size_t i = 1; i < in.size(); ++i) acc = k::binary(B, acc, need(n, in, i));
  return {acc};
}
template <k::Reduce R>
Outs reduce(const Node& n, const Ins& in) {
  // ReduceSum takes axes as an input from opset 13, the others from opset 18.
  std::vector<int64_t> axes = axes_of(n, in, 1);
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0)) return {need(n, in, 0)};
  return {k::reduce(R, need(n, in, 0), axes, n.attr_int("keepdims", 1) != 0)};
}

Outs op_pow(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  return {k::binary(k::Binary::Pow, x, k::cast(need(n, in, 1), x.dtype()))};
}
Outs op_identity(const Node& n, const Ins& in) { return {need(n, in, 0)}; }
Outs op_where(const Node& n, const Ins& in) { return {k::where(need(n, in, 0), need(n, in, 1), need(n, in, 2))}; }
Outs op_cast(const Node& n, const Ins& in) {
  return {k::cast(need(n, in, 0), static_cast<nf_dtype>(n.attr_int("to", 0)))};
}

Outs op_constant(const Node& n, const Ins&) {
  if (Tensor t = n.attr_tensor("value")) return {to_kernel(t)};
  if (n.has_attr("value_float")) return {k::Tensor::scalar(NF_DTYPE_FLOAT32, n.attr_float("value_float", 0))};
  if (n.has_attr("value_int")) return {k::Tensor::scalar(NF_DTYPE_INT64, n.attr_int("value_int", 0))};
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return {k::Tensor::from(NF_DTYPE_FLOAT32, {static_cast<int64_t>(v.size())}, v)};
  }
  if (n.has_attr("value_ints")) {
    auto v = n.attr_ints("value_ints");
    return {k::Tensor::from(NF_DTYPE_INT64, {static_cast<int64_t>(v.size())}, v)};
  }
  throw Error("Constant '" + std::string(n.name()) + "': no supported value attribute");
}
Outs op_constant_of_shape(const Node& n, const Ins& in) {
  k::Dims shape = need(n, in, 0).to_int64s();
  Tensor attr = n.attr_tensor("value");
  k::Tensor v = attr ? to_kernel(attr) : k::Tensor::scalar(NF_DTYPE_FLOAT32, 0.f);
  k::Tensor y(v.dtype(), shape);
  size_t es = k::dtype_size(v.dtype());
  auto* d = static_cast<uint8_t*>(y.mut_raw());
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(d + i * es, v.raw(), es);
  return {y};
}
Outs op_shape(const Node& n, const Ins& in) {
  const k::Dims& d = need(n, in, 0).dims();
  int64_t r = static_cast<int64_t>(d.size());
  int64_t s = n.attr_int("start", 0), e = n.attr_int("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, s, r);
  return {k::Tensor::from(NF_DTYPE_INT64, {e - s}, std::vector<int64_t>(d.begin() + s, d.begin() + e))};
}
Outs op_reshape(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> shape = need(n, in, 1).to_int64s();
  bool allow_zero = n.attr_int("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) shape[i] = x.dim(i);
    if (shape[i] == -1) infer = static_cast<int64_t>(i);
    else known *= shape[i];
  }
  if (infer >= 0) shape[infer] = known ? x.numel() / known : 0;
  return {x.reshaped(shape)};
}
Outs op_squeeze(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  int64_t r = static_cast<int64_t>(x.rank());
  std::vector<bool> drop(r, false);
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) drop[i] = x.dim(i) == 1;
  for (int64_t a : axes) drop[k::norm_axis(a, r, "Squeeze")] = true;
  k::Dims d;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) d.push_back(x.dim(i));
  return {x.reshaped(d)};
}
Outs op_unsqueeze(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  int64_t r = static_cast<int64_t>(x.rank() + axes.size());
  std::vector<bool> add(r, false);
  for (int64_t a : axes) add[k::norm_axis(a, r, "Unsqueeze")] = true;
  k::Dims d;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) d.push_back(add[i] ? 1 : x.dim(j++));
  return {x.reshaped(d)};
}
Outs op_flatten(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  int64_t r = static_cast<int64_t>(x.rank()), a = n.attr_int("axis", 1);
  if (a < 0) a += r;
  int64_t outer = 1;
  for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
  return {x.reshaped({outer, outer ? x.numel() / outer : 0})};
}
Outs op_transpose(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = static_cast<int64_t>(x.rank()) - 1; i >= 0; --i) perm.push_back(i);
  return {k::transpose(x, perm)};
}
Outs op_concat(const Node& n, const Ins& in) {
  std::vector<const k::Tensor*> xs;
  for (size_t i = 0; i < in.size(); ++i) xs.push_back(&need(n, in, i));
  return {k::concat(xs, n.attr_int("axis", 0))};
}
Outs op_split(const Node& n, const Ins& in) {
  const k::Tensor& x = need(n, in, 0);
  int64_t ax = k::norm_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.rank()), "Split");
  std::vector<int64_t> sizes = opt(in, 1) ? in[1]->to_int64s() : n.attr_ints("split");
  if (sizes.empty()) {
    int64_t parts = static_cast<int64_t>(n.output_count()), len = x.dim(ax);
    int64_t each = (len + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, len - p * each));
  }
  return k::split(x, ax, sizes);
}
Outs op_slice(const Node& n, const Ins& in) {
  std::vector<int64_t> axes = opt(in, 3) ? in[3]->to_int64s() : std::vector<int64_t>{};
  std::vector<int64_t> steps = opt(in, 4) ? in[4]->to_int64s() : std::vector<int64_t>{};
  return {k::slice(need(n, in, 0), need(n, in, 1).to_int64s(), need(n, in, 2).to_int64s(), axes, steps)};
}
Outs op_gather(const Node& n, const Ins& in) {
  return {k::gather(need(n, in, 0), need(n, in, 1), n.attr_int("axis", 0))};
}
Outs op_gather_elements(const Node& n, const Ins& in) {
  return {k::gather_elements(need(n, in, 0), need(n, in, 1), n.attr_int("axis", 0))};
}
Outs op_one_hot(const Node& n, const Ins& in) {
  std::vector<int64_t> depth = k::cast(need(n, in, 1), NF_DTYPE_INT64).to_int64s();
  if (depth.size() != 1) throw Error("OneHot '" + std::string(n.name()) + "': depth is not one number");
  return {k::one_hot(need(n, in, 0), depth[0], need(n, in, 2), n.attr_int("axis", -1))};
}
Outs op_scatter_elements(const Node& n, const Ins& in) {
  const std::string reduction = n.attr_string("reduction", "none");
  if (reduction != "none") throw Error("ScatterElements '" + std::string(n.name()) + "': reduction '" + reduction + "' is not folded");
  return {k::scatter_elements(need(n, in, 0), need(n, in, 1), need(n, in, 2), n.attr_int("axis", 0), k::ScatterReduce::None)};
}
Outs op_expand(const Node& n, const Ins& in) { return {k::expand(need(n, in, 0), need(n, in, 1).to_int64s())}; }
Outs op_tile(const Node& n, const Ins& in) { return {k::tile(need(n, in, 0), need(n, in, 1).to_int64s())}; }
Outs op_trilu(const Node& n, const Ins& in) {
  int64_t diag = opt(in, 1) ? in[1]->to_int64s().at(0) : 0;
  return {k::trilu(need(n, in, 0), diag, n.attr_int("upper", 1) != 0)};
}
Outs op_range(const Node& n, const Ins& in) { return {k::range(need(n, in, 0), need(n, in, 1), need(n, in, 2))}; }
Outs op_softmax(const Node& n, const Ins& in) { return {k::softmax(need(n, in, 0), n.attr_int("axis", -1))}; }
Outs op_matmul(const Node& n, const Ins& in) { return {k::matmul(need(n, in, 0), need(n, in, 1))}; }
Outs op_cumsum(const Node& n, const Ins& in) {
  return {k::cumsum(need(n, in, 0), need(n, in, 1).to_int64s().at(0), n.attr_int("exclusive", 0) != 0,
                    n.attr_int("reverse", 0) != 0)};
}

using B = k::Binary;
using U = k::Unary;
using R = k::Reduce;

// Softmax is evaluated with opset >= 13 semantics; fold_constants never sees older graphs
// from torch exports (opset 17), and a wrong axis would only matter for constant inputs.
const std::map<std::string, OpFn, std::less<>> kEvaluators = {
    {"Abs", unary<U::Abs>},
    {"Add", binary<B::Add>},
    {"And", binary<B::And>},
    {"Cast", op_cast},
    {"Ceil", unary<U::Ceil>},
    {"Concat", op_concat},
    {"Constant", op_constant},
    {"ConstantOfShape", op_constant_of_shape},
    {"Cos", unary<U::Cos>},
    {"CumSum", op_cumsum},
    {"Div", binary<B::Div>},
    {"Equal", binary<B::Equal>},
    {"Exp", unary<U::Exp>},
    {"Expand", op_expand},
    {"Flatten", op_flatten},
    {"Floor", unary<U::Floor>},
    {"Gather", op_gather},
    {"GatherElements", op_gather_elements},
    {"Greater", binary<B::Greater>},
    {"GreaterOrEqual", binary<B::GreaterOrEqual>},
    {"Identity", op_identity},
    {"Less", binary<B::Less>},
    {"LessOrEqual", binary<B::LessOrEqual>},
    {"Log", unary<U::Log>},
    {"MatMul", op_matmul},
    {"Max", variadic<B::Max>},
    {"Min", variadic<B::Min>},
    {"Mod", binary<B::Mod>},
    {"Mul", binary<B::Mul>},
    {"Neg", unary<U::Neg>},
    {"Not", unary<U::Not>},
    {"OneHot", op_one_hot},
    {"Or", binary<B::Or>},
    {"Pow", op_pow},
    {"Range", op_range},
    {"Reciprocal", unary<U::Reciprocal>},
    {"ReduceMax", reduce<R::Max>},
    {"ReduceMean", reduce<R::Mean>},
    {"ReduceMin", reduce<R::Min>},
    {"ReduceProd", reduce<R::Prod>},
    {"ReduceSum", reduce<R::Sum>},
    {"Relu", unary<U::Relu>},
    {"Reshape", op_reshape},
    {"ScatterElements", op_scatter_elements},
    {"Shape", op_shape},
    {"Sigmoid", unary<U::Sigmoid>},
    {"Sign", unary<U::Sign>},
    {"Sin", unary<U::Sin>},
    {"Slice", op_slice},
    {"Softmax", op_softmax},
    {"Split", op_split},
    {"Sqrt", unary<U::Sqrt>},
    {"Squeeze", op_squeeze},
    {"Sub", binary<B::Sub>},
    {"Tanh", unary<U::Tanh>},
    {"Tile", op_tile},
    {"Transpose", op_transpose},
    {"Trilu", op_trilu},
    {"Unsqueeze", op_unsqueeze},
    {"Where", op_where},
    {"Xor", binary<B::Xor>},
};

}  // namespace

bool can_evaluate(const Node& n) {
  std::string_view domain = n.domain();
  if (!domain.empty() && domain != "ai.onnx") return false;
  return kEvaluators.find(n.op_type()) != kEvaluators.end();
}

std::vector<kernels::Tensor> evaluate_node(const Node& n, const std::vector<const kernels::Tensor*>& inputs) {
  auto it = kEvaluators.find(n.op_type());
  if (it == kEvaluators.end()) throw Error("cannot evaluate operator " + std::string(n.op_type()));
  return it->second(n, inputs);
}

}  // namespace nf::graph
