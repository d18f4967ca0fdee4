// The operator table (npuforge/graph/operators.h): each ONNX operator's evaluation on the
// reference kernels, with attributes and opset differences resolved here (the math is in
// npuforge::kernels), beside its shape rule (shape_rules.cpp).
#include "npuforge/graph/operators.h"

#include <npuforge/kernels/conv.h>
#include <npuforge/kernels/elementwise.h>
#include <npuforge/kernels/matmul.h>
#include <npuforge/kernels/movement.h>
#include <npuforge/kernels/quantize.h>
#include <npuforge/kernels/reduce.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "npuforge/graph/kernel_tensors.h"
#include "shape_rules.h"

namespace nf::graph {

kernels::Tensor GraphNode::attr_tensor(const char* a) const {
  Tensor t = n_.attr_tensor(a);
  return t ? to_kernel(t) : kernels::Tensor();
}

namespace {

namespace k = nf::kernels;
namespace s = shape_rules;
using Ins = std::vector<const k::Tensor*>;
using Outs = std::vector<k::Tensor>;

std::string where(const OpNode& n) { return std::string(n.op_type()) + " (node " + std::string(n.name()) + ")"; }

const k::Tensor& need(const OpNode& n, const Ins& in, size_t i) {
  if (i >= in.size() || !in[i])
    throw k::KernelError(where(n) + ": input " + std::to_string(i) + " is required");
  return *in[i];
}
const k::Tensor* opt(const Ins& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

// ---- element-wise ----------------------------------------------------------------------
template <k::Binary B>
void op_binary(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::binary(B, need(n, in, 0), need(n, in, 1));
}
template <k::Unary U>
void op_unary(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::unary(U, need(n, in, 0));
}
// Gelu (opset 20): approximate "none" (erf) or "tanh", as torch's F.gelu exports from opset 20.
void op_gelu(const OpNode& n, const Ins& in, Outs& out) {
  const std::string approximate = n.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    throw k::KernelError(where(n) + ": approximate '" + approximate + "' (not none or tanh)");
  out[0] = k::gelu(need(n, in, 0), approximate == "tanh");
}
// Max / Min are variadic.
template <k::Binary B>
void op_variadic(const OpNode& n, const Ins& in, Outs& out) {
  k::Tensor acc = need(n, in, 0);
  for (size_t i = 1; i < in.size(); ++i) acc = k::binary(B, acc, need(n, in, i));
  out[0] = acc;
}
// Mod follows Python's sign rule unless fmod = 1 (C's fmod, required for floats).
void op_mod(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::binary(n.attr_int("fmod", 0) ? k::Binary::FMod : k::Binary::Mod, need(n, in, 0), need(n, in, 1));
}
void op_pow(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  k::Tensor y = k::cast(need(n, in, 1), x.dtype());
  // Float exponents of an integer base: compute in float like numpy, then cast back.
  if (x.dtype() != NF_DTYPE_FLOAT32 && x.dtype() != NF_DTYPE_FLOAT64 && in[1]->dtype() == NF_DTYPE_FLOAT32)
    out[0] = k::cast(k::binary(k::Binary::Pow, k::cast(x, NF_DTYPE_FLOAT64), k::cast(*in[1], NF_DTYPE_FLOAT64)), x.dtype());
  else
    out[0] = k::binary(k::Binary::Pow, x, y);
}
void op_identity(const OpNode& n, const Ins& in, Outs& out) { out[0] = need(n, in, 0); }
void op_where(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::where(need(n, in, 0), need(n, in, 1), need(n, in, 2));
}
void op_cast(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::cast(need(n, in, 0), static_cast<nf_dtype>(n.attr_int("to", 0)));
}
void op_clip(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  if (n.opset() < 11) {
    k::Tensor lo = k::cast(k::Tensor::scalar(NF_DTYPE_FLOAT32, n.attr_float("min", -std::numeric_limits<float>::max())), x.dtype());
    k::Tensor hi = k::cast(k::Tensor::scalar(NF_DTYPE_FLOAT32, n.attr_float("max", std::numeric_limits<float>::max())), x.dtype());
    out[0] = k::clip(x, &lo, &hi);
    return;
  }
  const k::Tensor* lo = opt(in, 1);
  const k::Tensor* hi = opt(in, 2);
  if (lo && lo->numel() == 0) lo = nullptr;
  if (hi && hi->numel() == 0) hi = nullptr;
  out[0] = k::clip(x, lo, hi);
}

// ---- shapes and movement ---------------------------------------------------------------
void op_shape(const OpNode& n, const Ins& in, Outs& out) {
  std::vector<int64_t> d = shape_node_dims(n, need(n, in, 0).dims());
  const auto rank = static_cast<int64_t>(d.size());
  out[0] = k::Tensor::from(NF_DTYPE_INT64, {rank}, d);
}
void op_reshape(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  out[0] = x.reshaped(reshape_node_dims(n, x.dims(), need(n, in, 1).to_int64s()));
}
void op_flatten(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  int64_t r = static_cast<int64_t>(x.rank()), a = n.attr_int("axis", 1);
  if (a < 0) a += r;
  int64_t outer = 1;
  for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
  out[0] = x.reshaped({outer, outer ? x.numel() / outer : 0});
}
std::vector<int64_t> axes_of(const OpNode& n, const Ins& in, size_t input) {
  if (const k::Tensor* t = opt(in, input)) return t->to_int64s();
  return n.attr_ints("axes");
}
void op_squeeze(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  int64_t r = static_cast<int64_t>(x.rank());
  std::vector<bool> drop(r, false);
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) drop[i] = x.dim(i) == 1;
  for (int64_t a : axes) {
    int64_t ax = k::norm_axis(a, r, "Squeeze");
    if (x.dim(ax) != 1) throw k::KernelError(where(n) + ": axis " + std::to_string(a) + " is not 1");
    drop[ax] = true;
  }
  k::Dims d;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) d.push_back(x.dim(i));
  out[0] = x.reshaped(d);
}
void op_unsqueeze(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  int64_t r = static_cast<int64_t>(x.rank() + axes.size());
  std::vector<bool> add(r, false);
  for (int64_t a : axes) add[k::norm_axis(a, r, "Unsqueeze")] = true;
  k::Dims d;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) d.push_back(add[i] ? 1 : x.dim(j++));
  out[0] = x.reshaped(d);
}
void op_transpose(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())  // default: reverse the dims
    for (int64_t i = static_cast<int64_t>(x.rank()) - 1; i >= 0; --i) perm.push_back(i);
  out[0] = k::transpose(x, perm);
}
void op_concat(const OpNode& n, const Ins& in, Outs& out) {
  std::vector<const k::Tensor*> xs;
  for (size_t i = 0; i < in.size(); ++i) xs.push_back(&need(n, in, i));
  out[0] = k::concat(xs, n.attr_int("axis", 0));
}
void op_split(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  int64_t ax = k::norm_axis(n.attr_int("axis", 0), x.rank(), "Split");
  std::vector<int64_t> sizes = opt(in, 1) ? in[1]->to_int64s() : n.attr_ints("split");
  if (sizes.empty()) {
    int64_t parts = static_cast<int64_t>(out.size()), len = x.dim(ax);
    int64_t each = (len + parts - 1) / parts;  // opset 18: the last part may be smaller
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, len - p * each));
  }
  std::vector<k::Tensor> parts = k::split(x, ax, sizes);
  if (parts.size() != out.size()) throw k::KernelError(where(n) + ": split count does not match outputs");
  for (size_t i = 0; i < parts.size(); ++i) out[i] = parts[i];
}
void op_slice(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  if (n.opset() < 10) {
    out[0] = k::slice(x, n.attr_ints("starts"), n.attr_ints("ends"), n.attr_ints("axes"), {});
    return;
  }
  std::vector<int64_t> starts = need(n, in, 1).to_int64s(), ends = need(n, in, 2).to_int64s();
  std::vector<int64_t> axes = opt(in, 3) ? in[3]->to_int64s() : std::vector<int64_t>{};
  std::vector<int64_t> steps = opt(in, 4) ? in[4]->to_int64s() : std::vector<int64_t>{};
  out[0] = k::slice(x, starts, ends, axes, steps);
}
void op_gather(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::gather(need(n, in, 0), need(n, in, 1), n.attr_int("axis", 0));
}
void op_gather_elements(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::gather_elements(need(n, in, 0), need(n, in, 1), n.attr_int("axis", 0));
}
void op_one_hot(const OpNode& n, const Ins& in, Outs& out) {
  std::vector<int64_t> depth = k::cast(need(n, in, 1), NF_DTYPE_INT64).to_int64s();
  if (depth.size() != 1) throw k::KernelError(where(n) + ": depth is not one number");
  out[0] = k::one_hot(need(n, in, 0), depth[0], need(n, in, 2), n.attr_int("axis", -1));
}
// The indices of the nonzero elements, one row per axis, in row-major order ([rank, count]:
// a data-dependent shape; HF's MoE loop picks each expert's rows so).
void op_non_zero(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor flags = k::cast(need(n, in, 0), NF_DTYPE_BOOL);
  const bool* f = flags.data<bool>();
  const k::Dims& d = flags.dims();
  std::vector<int64_t> at;
  for (int64_t i = 0; i < flags.numel(); ++i)
    if (f[i]) at.push_back(i);
  const int64_t rank = static_cast<int64_t>(d.size()), count = static_cast<int64_t>(at.size());
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(rank, 1) * count));
  for (int64_t c = 0; c < count; ++c)
    for (int64_t a = rank - 1, rest = at[static_cast<size_t>(c)]; a >= 0; --a) {
      idx[static_cast<size_t>(a * count + c)] = rest % d[static_cast<size_t>(a)];
      rest /= d[static_cast<size_t>(a)];
    }
  if (rank == 0) idx.assign(static_cast<size_t>(count), 0);  // a scalar: one row of zeros
  out[0] = k::Tensor::from(NF_DTYPE_INT64, {std::max<int64_t>(rank, 1), count}, idx);
}
k::ScatterReduce reduction_of(const OpNode& n) {
  std::string r = n.attr_string("reduction", "none");
  if (r == "add") return k::ScatterReduce::Add;
  if (r == "mul") return k::ScatterReduce::Mul;
  if (r == "max") return k::ScatterReduce::Max;
  if (r == "min") return k::ScatterReduce::Min;
  if (r == "none") return k::ScatterReduce::None;
  throw k::KernelError(where(n) + ": reduction '" + r + "' is not supported");
}
void op_scatter_elements(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::scatter_elements(need(n, in, 0), need(n, in, 1), need(n, in, 2), n.attr_int("axis", 0), reduction_of(n));
}
void op_scatter_nd(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::scatter_nd(need(n, in, 0), need(n, in, 1), need(n, in, 2), reduction_of(n));
}
void op_expand(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::expand(need(n, in, 0), need(n, in, 1).to_int64s());
}
void op_tile(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::tile(need(n, in, 0), need(n, in, 1).to_int64s());
}
void op_trilu(const OpNode& n, const Ins& in, Outs& out) {
  int64_t kk = opt(in, 1) ? in[1]->to_int64s().at(0) : 0;
  out[0] = k::trilu(need(n, in, 0), kk, n.attr_int("upper", 1) != 0);
}
void op_range(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::range(need(n, in, 0), need(n, in, 1), need(n, in, 2));
}
void op_constant(const OpNode& n, const Ins&, Outs& out) {
  if (k::Tensor t = n.attr_tensor("value"); !t.empty_handle()) out[0] = t;
  else if (n.has_attr("value_float")) out[0] = k::Tensor::scalar(NF_DTYPE_FLOAT32, n.attr_float("value_float", 0));
  else if (n.has_attr("value_int")) out[0] = k::Tensor::scalar(NF_DTYPE_INT64, n.attr_int("value_int", 0));
  else if (n.has_attr("value_floats")) {
    std::vector<float> v = n.attr_floats("value_floats");
    out[0] = k::Tensor::from(NF_DTYPE_FLOAT32, {static_cast<int64_t>(v.size())}, v);
  } else if (n.has_attr("value_ints")) {
    std::vector<int64_t> v = n.attr_ints("value_ints");
    out[0] = k::Tensor::from(NF_DTYPE_INT64, {static_cast<int64_t>(v.size())}, v);
  } else throw k::KernelError(where(n) + ": no supported value attribute");
}
void op_constant_of_shape(const OpNode& n, const Ins& in, Outs& out) {
  k::Dims shape = need(n, in, 0).to_int64s();
  k::Tensor v = n.attr_tensor("value");
  if (v.empty_handle()) v = k::Tensor::scalar(NF_DTYPE_FLOAT32, 0.f);
  k::Tensor y(v.dtype(), shape);
  size_t es = k::dtype_size(v.dtype());
  auto* d = static_cast<uint8_t*>(y.mut_raw());
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(d + i * es, v.raw(), es);
  out[0] = y;
}

// ---- reductions and normalization -----------------------------------------------------
template <k::Reduce R>
void op_reduce(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0)) {
    out[0] = x;
    return;
  }
  out[0] = k::reduce(R, x, axes, n.attr_int("keepdims", 1) != 0);
}
// Softmax and LogSoftmax.
template <bool Log>
void op_softmax(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  if (n.opset() < 13) {  // old semantics: coerce to 2-D at axis
    int64_t a = n.attr_int("axis", 1);
    if (a < 0) a += static_cast<int64_t>(x.rank());
    int64_t outer = 1;
    for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
    out[0] = k::softmax(x.reshaped({outer, outer ? x.numel() / outer : 0}), 1, Log).reshaped(x.dims());
    return;
  }
  out[0] = k::softmax(x, n.attr_int("axis", -1), Log);
}
void op_layer_norm(const OpNode& n, const Ins& in, Outs& out) {
  k::LayerNormResult r = k::layer_norm(need(n, in, 0), need(n, in, 1), opt(in, 2), n.attr_int("axis", -1), n.attr_float("epsilon", 1e-5f));
  out[0] = r.y;
  if (out.size() > 1) out[1] = r.mean;
  if (out.size() > 2) out[2] = r.inv_std_dev;
}
void op_cumsum(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::cumsum(need(n, in, 0), need(n, in, 1).to_int64s().at(0), n.attr_int("exclusive", 0) != 0, n.attr_int("reverse", 0) != 0);
}
void op_topk(const OpNode& n, const Ins& in, Outs& out) {
  auto [v, i] = k::topk(need(n, in, 0), need(n, in, 1).to_int64s().at(0), n.attr_int("axis", -1), n.attr_int("largest", 1) != 0,
                        n.attr_int("sorted", 1) != 0);
  out[0] = v;
  if (out.size() > 1) out[1] = i;
}

// ---- linear algebra and nn -------------------------------------------------------------
// Plain products: the execution engine runs constant weights packed (sdk/engine/src/ops.cpp) and falls back
// to these.
void op_matmul(const OpNode& n, const Ins& in, Outs& out) { out[0] = k::matmul(need(n, in, 0), need(n, in, 1)); }
void op_gemm(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::gemm(need(n, in, 0), need(n, in, 1), opt(in, 2), n.attr_float("alpha", 1.f), n.attr_float("beta", 1.f),
                   n.attr_int("transA", 0) != 0, n.attr_int("transB", 0) != 0);
}
void op_conv(const OpNode& n, const Ins& in, Outs& out) {
  const k::Tensor& x = need(n, in, 0);
  const k::Tensor& w = need(n, in, 1);
  k::ConvParams p;
  p.strides = n.attr_ints("strides");
  p.dilations = n.attr_ints("dilations");
  p.group = n.attr_int("group", 1);
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET") {
    k::Dims spatial(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
    p.pads = k::conv_auto_pads(auto_pad, spatial, kernel, p.strides, p.dilations);
  } else p.pads = n.attr_ints("pads");
  out[0] = k::conv(x, w, opt(in, 2), p);
}
void op_quantize(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::quantize_linear(need(n, in, 0), need(n, in, 1), opt(in, 2), n.attr_int("axis", 1));
}
void op_dequantize(const OpNode& n, const Ins& in, Outs& out) {
  out[0] = k::dequantize_linear(need(n, in, 0), need(n, in, 1), opt(in, 2), n.attr_int("axis", 1));
}

using B = k::Binary;
using U = k::Unary;
using R = k::Reduce;

// The table. plugins/backends/cpu/README.md lists the same names and tests/conformance
// checks that the two agree and runs ONNX's node tests of each operator on the cpu backend.
// BEGIN OPERATORS
const Operator kOperators[] = {
    {"Abs", op_unary<U::Abs>, s::same_as_input},
    {"Add", op_binary<B::Add>, s::arithmetic},
    {"And", op_binary<B::And>, s::comparison},
    {"Cast", op_cast, s::cast},
    {"Ceil", op_unary<U::Ceil>, s::same_as_input},
    {"Clip", op_clip, s::same_as_input},
    {"Concat", op_concat, s::concat},
    {"Constant", op_constant, nullptr},
    {"ConstantOfShape", op_constant_of_shape, s::constant_of_shape},
    {"Conv", op_conv, nullptr},
    {"Cos", op_unary<U::Cos>, s::same_as_input},
    {"CumSum", op_cumsum, s::same_as_input},
    {"DequantizeLinear", op_dequantize, nullptr},
    {"Div", op_binary<B::Div>, s::arithmetic},
    {"Equal", op_binary<B::Equal>, s::comparison},
    {"Erf", op_unary<U::Erf>, s::same_as_input},
    {"Exp", op_unary<U::Exp>, s::same_as_input},
    {"Expand", op_expand, s::expand},
    {"Flatten", op_flatten, s::flatten},
    {"Floor", op_unary<U::Floor>, s::same_as_input},
    {"Gather", op_gather, s::gather},
    {"GatherElements", op_gather_elements, s::gather_elements},
    {"Gelu", op_gelu, s::same_as_input},
    {"Gemm", op_gemm, s::gemm},
    {"Greater", op_binary<B::Greater>, s::comparison},
    {"GreaterOrEqual", op_binary<B::GreaterOrEqual>, s::comparison},
    {"Identity", op_identity, s::same_as_input},
    {"LayerNormalization", op_layer_norm, s::layer_norm},
    {"Less", op_binary<B::Less>, s::comparison},
    {"LessOrEqual", op_binary<B::LessOrEqual>, s::comparison},
    {"Log", op_unary<U::Log>, s::same_as_input},
    {"LogSoftmax", op_softmax<true>, s::same_as_input},
    {"MatMul", op_matmul, s::matmul},
    {"Max", op_variadic<B::Max>, s::arithmetic},
    {"Min", op_variadic<B::Min>, s::arithmetic},
    {"Mod", op_mod, s::arithmetic},
    {"Mul", op_binary<B::Mul>, s::arithmetic},
    {"Neg", op_unary<U::Neg>, s::same_as_input},
    {"NonZero", op_non_zero, s::non_zero},
    {"Not", op_unary<U::Not>, s::same_as_input},
    {"OneHot", op_one_hot, s::one_hot},
    {"Or", op_binary<B::Or>, s::comparison},
    {"Pow", op_pow, s::arithmetic},
    {"QuantizeLinear", op_quantize, nullptr},
    {"Range", op_range, nullptr},
    {"Reciprocal", op_unary<U::Reciprocal>, s::same_as_input},
    {"ReduceMax", op_reduce<R::Max>, s::reduce},
    {"ReduceMean", op_reduce<R::Mean>, s::reduce},
    {"ReduceMin", op_reduce<R::Min>, s::reduce},
    {"ReduceProd", op_reduce<R::Prod>, s::reduce},
    {"ReduceSum", op_reduce<R::Sum>, s::reduce},
    {"Relu", op_unary<U::Relu>, s::same_as_input},
    {"Reshape", op_reshape, s::reshape},
    {"ScatterElements", op_scatter_elements, s::same_as_input},
    {"ScatterND", op_scatter_nd, s::same_as_input},
    {"Shape", op_shape, s::shape_op},
    {"Sigmoid", op_unary<U::Sigmoid>, s::same_as_input},
    {"Sign", op_unary<U::Sign>, s::same_as_input},
    {"Sin", op_unary<U::Sin>, s::same_as_input},
    {"Slice", op_slice, s::slice},
    {"Softmax", op_softmax<false>, s::same_as_input},
    {"Softplus", op_unary<U::Softplus>, s::same_as_input},
    {"Split", op_split, s::split},
    {"Sqrt", op_unary<U::Sqrt>, s::same_as_input},
    {"Squeeze", op_squeeze, s::squeeze},
    {"Sub", op_binary<B::Sub>, s::arithmetic},
    {"Tanh", op_unary<U::Tanh>, s::same_as_input},
    {"Tile", op_tile, s::tile},
    {"TopK", op_topk, s::topk},
    {"Transpose", op_transpose, s::transpose},
    {"Trilu", op_trilu, s::same_as_input},
    {"Unsqueeze", op_unsqueeze, s::unsqueeze},
    {"Where", op_where, s::where},
    {"Xor", op_binary<B::Xor>, s::comparison},
};
// END OPERATORS

}  // namespace

const Operator* find_operator(std::string_view op_type, std::string_view domain) {
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  auto it = std::lower_bound(std::begin(kOperators), std::end(kOperators), op_type,
                             [](const Operator& o, std::string_view name) { return o.name < name; });
  return it != std::end(kOperators) && it->name == op_type ? it : nullptr;
}

std::vector<int64_t> reshape_node_dims(const OpNode& n, const std::vector<int64_t>& dims, std::vector<int64_t> shape) {
  bool allow_zero = n.attr_int("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= dims.size()) throw k::KernelError(where(n) + ": 0 copies a missing dim");
      shape[i] = dims[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) throw k::KernelError(where(n) + ": more than one -1");
      infer = static_cast<int64_t>(i);
    } else known *= shape[i];
  }
  if (infer >= 0) shape[infer] = known ? k::numel(dims) / known : 0;
  return shape;
}

std::vector<int64_t> shape_node_dims(const OpNode& n, const std::vector<int64_t>& dims) {
  const auto r = static_cast<int64_t>(dims.size());
  int64_t s = n.attr_int("start", 0), e = n.attr_int("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, s, r);
  return {dims.begin() + s, dims.begin() + e};
}

std::vector<std::string> operator_names() {
  std::vector<std::string> r;
  for (const Operator& o : kOperators) r.emplace_back(o.name);
  return r;
}

}  // namespace nf::graph
