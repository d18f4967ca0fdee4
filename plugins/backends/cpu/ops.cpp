// ONNX operator adapters: attributes and opset differences are resolved here; the math is
// in npuforge::kernels.
#include "ops.h"

#include <npuforge/kernels/conv.h>
#include <npuforge/kernels/elementwise.h>
#include <npuforge/kernels/exact.h>
#include <npuforge/kernels/matmul.h>
#include <npuforge/kernels/movement.h>
#include <npuforge/kernels/quantize.h>
#include <npuforge/kernels/reduce.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace nf::cpu {

int64_t NodeDef::i(const char* a, int64_t dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.i;
}
float NodeDef::f(const char* a, float dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.f;
}
std::string NodeDef::s(const char* a, const std::string& dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.s;
}
std::vector<int64_t> NodeDef::ints(const char* a, std::vector<int64_t> dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.ints;
}

namespace {

using Ins = std::vector<const k::Tensor*>;
using Outs = std::vector<k::Tensor>;

const k::Tensor& need(const NodeDef& n, const Ins& in, size_t i) {
  if (i >= in.size() || !in[i])
    throw k::KernelError(n.op + " (node " + n.name + "): input " + std::to_string(i) + " is required");
  return *in[i];
}
const k::Tensor* opt(const Ins& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

// ---- element-wise ----------------------------------------------------------------------
template <k::Binary B>
void op_binary(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::binary(B, need(n, in, 0), need(n, in, 1));
}
template <k::Unary U>
void op_unary(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::unary(U, need(n, in, 0));
}
// Max / Min are variadic.
template <k::Binary B>
void op_variadic(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  k::Tensor acc = need(n, in, 0);
  for (size_t i = 1; i < in.size(); ++i) acc = k::binary(B, acc, need(n, in, i));
  out[0] = acc;
}
void op_pow(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  k::Tensor y = k::cast(need(n, in, 1), x.dtype());
  // Float exponents of an integer base: compute in float like numpy, then cast back.
  if (x.dtype() != NF_DTYPE_FLOAT32 && x.dtype() != NF_DTYPE_FLOAT64 && in[1]->dtype() == NF_DTYPE_FLOAT32)
    out[0] = k::cast(k::binary(k::Binary::Pow, k::cast(x, NF_DTYPE_FLOAT64), k::cast(*in[1], NF_DTYPE_FLOAT64)), x.dtype());
  else
    out[0] = k::binary(k::Binary::Pow, x, y);
}
void op_identity(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) { out[0] = need(n, in, 0); }
void op_where(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::where(need(n, in, 0), need(n, in, 1), need(n, in, 2));
}
void op_cast(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::cast(need(n, in, 0), static_cast<nf_dtype>(n.i("to", 0)));
}
void op_clip(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  if (n.opset < 11) {
    k::Tensor lo = k::cast(k::Tensor::scalar(NF_DTYPE_FLOAT32, n.f("min", -std::numeric_limits<float>::max())), x.dtype());
    k::Tensor hi = k::cast(k::Tensor::scalar(NF_DTYPE_FLOAT32, n.f("max", std::numeric_limits<float>::max())), x.dtype());
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
void op_shape(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Dims& d = need(n, in, 0).dims();
  int64_t r = static_cast<int64_t>(d.size());
  int64_t s = n.i("start", 0), e = n.i("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, s, r);
  out[0] = k::Tensor::from(NF_DTYPE_INT64, {e - s}, std::vector<int64_t>(d.begin() + s, d.begin() + e));
}
void op_reshape(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> shape = need(n, in, 1).to_int64s();
  bool allow_zero = n.i("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= x.rank()) throw k::KernelError("Reshape (node " + n.name + "): 0 copies a missing dim");
      shape[i] = x.dim(i);
    }
    if (shape[i] == -1) {
      if (infer >= 0) throw k::KernelError("Reshape (node " + n.name + "): more than one -1");
      infer = static_cast<int64_t>(i);
    } else known *= shape[i];
  }
  if (infer >= 0) shape[infer] = known ? x.numel() / known : 0;
  out[0] = x.reshaped(shape);
}
void op_flatten(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  int64_t r = static_cast<int64_t>(x.rank()), a = n.i("axis", 1);
  if (a < 0) a += r;
  int64_t outer = 1;
  for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
  out[0] = x.reshaped({outer, outer ? x.numel() / outer : 0});
}
std::vector<int64_t> axes_of(const NodeDef& n, const Ins& in, size_t input) {
  if (const k::Tensor* t = opt(in, input)) return t->to_int64s();
  return n.ints("axes");
}
void op_squeeze(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  int64_t r = static_cast<int64_t>(x.rank());
  std::vector<bool> drop(r, false);
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) drop[i] = x.dim(i) == 1;
  for (int64_t a : axes) {
    int64_t ax = k::norm_axis(a, r, "Squeeze");
    if (x.dim(ax) != 1) throw k::KernelError("Squeeze (node " + n.name + "): axis " + std::to_string(a) + " is not 1");
    drop[ax] = true;
  }
  k::Dims d;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) d.push_back(x.dim(i));
  out[0] = x.reshaped(d);
}
void op_unsqueeze(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
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
void op_transpose(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::transpose(need(n, in, 0), n.ints("perm"));
}
void op_concat(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  std::vector<const k::Tensor*> xs;
  for (size_t i = 0; i < in.size(); ++i) xs.push_back(&need(n, in, i));
  out[0] = k::concat(xs, n.i("axis", 0));
}
void op_split(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  int64_t ax = k::norm_axis(n.i("axis", 0), x.rank(), "Split");
  std::vector<int64_t> sizes = opt(in, 1) ? in[1]->to_int64s() : n.ints("split");
  if (sizes.empty()) {
    int64_t parts = static_cast<int64_t>(out.size()), len = x.dim(ax);
    int64_t each = (len + parts - 1) / parts;  // opset 18: the last part may be smaller
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, len - p * each));
  }
  std::vector<k::Tensor> parts = k::split(x, ax, sizes);
  if (parts.size() != out.size()) throw k::KernelError("Split (node " + n.name + "): split count does not match outputs");
  for (size_t i = 0; i < parts.size(); ++i) out[i] = parts[i];
}
void op_slice(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  if (n.opset < 10) {
    out[0] = k::slice(x, n.ints("starts"), n.ints("ends"), n.ints("axes"), {});
    return;
  }
  std::vector<int64_t> starts = need(n, in, 1).to_int64s(), ends = need(n, in, 2).to_int64s();
  std::vector<int64_t> axes = opt(in, 3) ? in[3]->to_int64s() : std::vector<int64_t>{};
  std::vector<int64_t> steps = opt(in, 4) ? in[4]->to_int64s() : std::vector<int64_t>{};
  out[0] = k::slice(x, starts, ends, axes, steps);
}
void op_gather(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::gather(need(n, in, 0), need(n, in, 1), n.i("axis", 0));
  if (n.table_grid) {
    const k::Tensor& table = need(n, in, 0);
    std::vector<int64_t> idx = need(n, in, 1).to_int64s();
    for (int64_t& i : idx)
      if (i < 0) i += table.dim(0);
    n.table_grid->apply(out[0].mut<float>(), idx, table.dim(1));
  }
}
void op_gather_elements(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::gather_elements(need(n, in, 0), need(n, in, 1), n.i("axis", 0));
}
void op_one_hot(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  std::vector<int64_t> depth = k::cast(need(n, in, 1), NF_DTYPE_INT64).to_int64s();
  if (depth.size() != 1) throw k::KernelError("OneHot (node " + n.name + "): depth is not one number");
  out[0] = k::one_hot(need(n, in, 0), depth[0], need(n, in, 2), n.i("axis", -1));
}
k::ScatterReduce reduction_of(const NodeDef& n) {
  std::string r = n.s("reduction", "none");
  if (r == "add") return k::ScatterReduce::Add;
  if (r == "mul") return k::ScatterReduce::Mul;
  if (r == "max") return k::ScatterReduce::Max;
  if (r == "min") return k::ScatterReduce::Min;
  if (r == "none") return k::ScatterReduce::None;
  throw k::KernelError(n.op + " (node " + n.name + "): reduction '" + r + "' is not supported");
}
void op_scatter_elements(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::scatter_elements(need(n, in, 0), need(n, in, 1), need(n, in, 2), n.i("axis", 0), reduction_of(n));
}
void op_scatter_nd(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::scatter_nd(need(n, in, 0), need(n, in, 1), need(n, in, 2), reduction_of(n));
}
void op_expand(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::expand(need(n, in, 0), need(n, in, 1).to_int64s());
}
void op_tile(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::tile(need(n, in, 0), need(n, in, 1).to_int64s());
}
void op_trilu(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  int64_t kk = opt(in, 1) ? in[1]->to_int64s().at(0) : 0;
  out[0] = k::trilu(need(n, in, 0), kk, n.i("upper", 1) != 0);
}
void op_range(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::range(need(n, in, 0), need(n, in, 1), need(n, in, 2));
}
void op_constant(const NodeDef& n, const Ins&, Outs& out, const RunCtx&) {
  auto it = n.attrs.find("value");
  if (it != n.attrs.end()) out[0] = it->second.t;
  else if (n.has("value_float")) out[0] = k::Tensor::scalar(NF_DTYPE_FLOAT32, n.f("value_float", 0));
  else if (n.has("value_int")) out[0] = k::Tensor::scalar(NF_DTYPE_INT64, n.i("value_int", 0));
  else if (n.has("value_floats")) {
    const auto& v = n.attrs.at("value_floats").floats;
    out[0] = k::Tensor::from(NF_DTYPE_FLOAT32, {static_cast<int64_t>(v.size())}, v);
  } else if (n.has("value_ints")) {
    const auto& v = n.attrs.at("value_ints").ints;
    out[0] = k::Tensor::from(NF_DTYPE_INT64, {static_cast<int64_t>(v.size())}, v);
  } else throw k::KernelError("Constant (node " + n.name + "): no supported value attribute");
}
void op_constant_of_shape(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  k::Dims shape = need(n, in, 0).to_int64s();
  auto it = n.attrs.find("value");
  k::Tensor v = it != n.attrs.end() ? it->second.t : k::Tensor::scalar(NF_DTYPE_FLOAT32, 0.f);
  k::Tensor y(v.dtype(), shape);
  size_t es = k::dtype_size(v.dtype());
  auto* d = static_cast<uint8_t*>(y.mut_raw());
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(d + i * es, v.raw(), es);
  out[0] = y;
}

// ---- reductions and normalization -----------------------------------------------------
template <k::Reduce R>
void op_reduce(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  std::vector<int64_t> axes = axes_of(n, in, 1);
  if (axes.empty() && n.i("noop_with_empty_axes", 0)) {
    out[0] = x;
    return;
  }
  out[0] = k::reduce(R, x, axes, n.i("keepdims", 1) != 0);
}
void op_softmax(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  if (n.opset < 13) {  // old semantics: coerce to 2-D at axis
    int64_t a = n.i("axis", 1);
    if (a < 0) a += static_cast<int64_t>(x.rank());
    int64_t outer = 1;
    for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
    out[0] = k::softmax(x.reshaped({outer, outer ? x.numel() / outer : 0}), 1).reshaped(x.dims());
    return;
  }
  out[0] = n.exact.on ? k::softmax_fixed(x, n.i("axis", -1)) : k::softmax(x, n.i("axis", -1));
}
void op_layer_norm(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  k::LayerNormResult r = k::layer_norm(need(n, in, 0), need(n, in, 1), opt(in, 2), n.i("axis", -1), n.f("epsilon", 1e-5f));
  out[0] = r.y;
  if (out.size() > 1) out[1] = r.mean;
  if (out.size() > 2) out[2] = r.inv_std_dev;
}
void op_cumsum(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::cumsum(need(n, in, 0), need(n, in, 1).to_int64s().at(0), n.i("exclusive", 0) != 0, n.i("reverse", 0) != 0);
}
void op_topk(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  auto [v, i] = k::topk(need(n, in, 0), need(n, in, 1).to_int64s().at(0), n.i("axis", -1), n.i("largest", 1) != 0,
                        n.i("sorted", 1) != 0);
  out[0] = v;
  if (out.size() > 1) out[1] = i;
}

// ---- linear algebra and nn -------------------------------------------------------------
// A packed linear layer in integer mode: exact integer sums when the input is on a grid and
// the weight is integer; otherwise each row alone through the GEMV, so a row's result does
// not depend on how many rows share the call.
k::Tensor linear_layout_independent(const NodeDef& n, const k::Tensor& a, const float* bias, const RunCtx& ctx) {
  const k::PackedWeight& w = *n.linear->w;
  if (n.exact.a_scale > 0 && w.format != k::WeightFormat::F32) return k::linear_exact(a, n.exact.a_scale, w, bias, ctx.threads);
  if (a.dtype() != NF_DTYPE_FLOAT32 || a.rank() < 1 || a.dims().back() != w.K) return k::linear(a, w, bias, ctx.threads);
  k::Dims dims = a.dims();
  dims.back() = w.N;
  k::Tensor y(NF_DTYPE_FLOAT32, dims);
  const int64_t rows = a.numel() / w.K;
  for (int64_t r = 0; r < rows; ++r) k::linear(a.data<float>() + r * w.K, 1, w, bias, y.mut<float>() + r * w.N, ctx.threads);
  return y;
}

void op_matmul(const NodeDef& n, const Ins& in, Outs& out, const RunCtx& ctx) {
  const k::Tensor& a = need(n, in, 0);
  if (n.linear) {
    out[0] = n.exact.on ? linear_layout_independent(n, a, nullptr, ctx) : k::linear(a, *n.linear->w, nullptr, ctx.threads);
    return;
  }
  const k::Tensor& b = need(n, in, 1);
  // Attention's Q*K^T and P*V in integer mode: K and V are on the KV cache's grid.
  if (n.exact.b_scale > 0 && a.dtype() == NF_DTYPE_FLOAT32 && b.dtype() == NF_DTYPE_FLOAT32 && a.rank() >= 2 &&
      b.rank() >= 2) {
    out[0] = k::matmul_fixed(a, b, n.trans_b, n.exact.b_scale);
    return;
  }
  out[0] = k::matmul(a, b, n.trans_b);
}
void op_gemm(const NodeDef& n, const Ins& in, Outs& out, const RunCtx& ctx) {
  const k::Tensor& a = need(n, in, 0);
  if (n.linear) {
    const float* bias = n.linear->bias.empty_handle() ? nullptr : n.linear->bias.data<float>();
    out[0] = n.exact.on ? linear_layout_independent(n, a, bias, ctx) : k::linear(a, *n.linear->w, bias, ctx.threads);
    return;
  }
  out[0] = k::gemm(a, need(n, in, 1), opt(in, 2), n.f("alpha", 1.f), n.f("beta", 1.f), n.i("transA", 0) != 0,
                   n.i("transB", 0) != 0);
}
void op_conv(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  const k::Tensor& x = need(n, in, 0);
  const k::Tensor& w = need(n, in, 1);
  k::ConvParams p;
  p.strides = n.ints("strides");
  p.dilations = n.ints("dilations");
  p.group = n.i("group", 1);
  std::string auto_pad = n.s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET") {
    k::Dims spatial(x.dims().begin() + 2, x.dims().end()), kernel(w.dims().begin() + 2, w.dims().end());
    p.pads = k::conv_auto_pads(auto_pad, spatial, kernel, p.strides, p.dilations);
  } else p.pads = n.ints("pads");
  out[0] = k::conv(x, w, opt(in, 2), p);
}
void op_quantize(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::quantize_linear(need(n, in, 0), need(n, in, 1), opt(in, 2), n.i("axis", 1));
}
void op_dequantize(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  out[0] = k::dequantize_linear(need(n, in, 0), need(n, in, 1), opt(in, 2), n.i("axis", 1));
}

using B = k::Binary;
using U = k::Unary;
using R = k::Reduce;

// The operators this backend claims. plugins/backends/cpu/README.md lists the same names
// and tests/conformance checks that the two agree.
// BEGIN OPERATORS
const std::map<std::string, OpFn> kOperators = {
    {"Abs", op_unary<U::Abs>},
    {"Add", op_binary<B::Add>},
    {"And", op_binary<B::And>},
    {"Cast", op_cast},
    {"Clip", op_clip},
    {"Concat", op_concat},
    {"Constant", op_constant},
    {"ConstantOfShape", op_constant_of_shape},
    {"Conv", op_conv},
    {"Cos", op_unary<U::Cos>},
    {"CumSum", op_cumsum},
    {"DequantizeLinear", op_dequantize},
    {"Div", op_binary<B::Div>},
    {"Equal", op_binary<B::Equal>},
    {"Erf", op_unary<U::Erf>},
    {"Exp", op_unary<U::Exp>},
    {"Expand", op_expand},
    {"Flatten", op_flatten},
    {"Gather", op_gather},
    {"GatherElements", op_gather_elements},
    {"Gemm", op_gemm},
    {"Greater", op_binary<B::Greater>},
    {"GreaterOrEqual", op_binary<B::GreaterOrEqual>},
    {"Identity", op_identity},
    {"LayerNormalization", op_layer_norm},
    {"Less", op_binary<B::Less>},
    {"LessOrEqual", op_binary<B::LessOrEqual>},
    {"Log", op_unary<U::Log>},
    {"MatMul", op_matmul},
    {"Max", op_variadic<B::Max>},
    {"Min", op_variadic<B::Min>},
    {"Mul", op_binary<B::Mul>},
    {"Neg", op_unary<U::Neg>},
    {"Not", op_unary<U::Not>},
    {"OneHot", op_one_hot},
    {"Or", op_binary<B::Or>},
    {"Pow", op_pow},
    {"QuantizeLinear", op_quantize},
    {"Range", op_range},
    {"Reciprocal", op_unary<U::Reciprocal>},
    {"ReduceMax", op_reduce<R::Max>},
    {"ReduceMean", op_reduce<R::Mean>},
    {"ReduceSum", op_reduce<R::Sum>},
    {"Relu", op_unary<U::Relu>},
    {"Reshape", op_reshape},
    {"ScatterElements", op_scatter_elements},
    {"ScatterND", op_scatter_nd},
    {"Shape", op_shape},
    {"Sigmoid", op_unary<U::Sigmoid>},
    {"Sin", op_unary<U::Sin>},
    {"Slice", op_slice},
    {"Softmax", op_softmax},
    {"Split", op_split},
    {"Sqrt", op_unary<U::Sqrt>},
    {"Squeeze", op_squeeze},
    {"Sub", op_binary<B::Sub>},
    {"Tanh", op_unary<U::Tanh>},
    {"Tile", op_tile},
    {"TopK", op_topk},
    {"Transpose", op_transpose},
    {"Trilu", op_trilu},
    {"Unsqueeze", op_unsqueeze},
    {"Where", op_where},
};
// END OPERATORS

}  // namespace

OpFn find_op(const std::string& op_type) {
  auto it = kOperators.find(op_type);
  return it == kOperators.end() ? nullptr : it->second;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> r;
  for (auto& [name, fn] : kOperators) r.push_back(name);
  return r;
}

}  // namespace nf::cpu
