// How the cpu engine runs a node: the SDK's operator table evaluates every operator; the
// four that read what the planner prepared (packed weights, integer mode, encoded tables)
// have a kernel of this backend in front of it.
#include "npuforge/engine/ops.h"

#include <npuforge/kernels/exact.h>
#include <npuforge/kernels/matmul.h>

namespace nf::engine {

int64_t NodeDef::attr_int(const char* a, int64_t dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.i;
}
float NodeDef::attr_float(const char* a, float dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.f;
}
std::string NodeDef::attr_string(const char* a, const std::string& dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.s;
}
std::vector<int64_t> NodeDef::attr_ints(const char* a, std::vector<int64_t> dflt) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? dflt : it->second.ints;
}
std::vector<float> NodeDef::attr_floats(const char* a) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? std::vector<float>{} : it->second.floats;
}
k::Tensor NodeDef::attr_tensor(const char* a) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? k::Tensor() : it->second.t;
}

void NodeDef::run(const std::vector<const k::Tensor*>& ins, std::vector<k::Tensor>& outs, const RunCtx& ctx) const {
  if (kernel) kernel(*this, ins, outs, ctx);
  else def->evaluate(*this, ins, outs);
}

namespace {

using Ins = std::vector<const k::Tensor*>;
using Outs = std::vector<k::Tensor>;

const k::Tensor& need(const NodeDef& n, const Ins& in, size_t i) {
  if (i >= in.size() || !in[i])
    throw k::KernelError(n.op + " (node " + n.node_name + "): input " + std::to_string(i) + " is required");
  return *in[i];
}

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

void matmul(const NodeDef& n, const Ins& in, Outs& out, const RunCtx& ctx) {
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
void gemm(const NodeDef& n, const Ins& in, Outs& out, const RunCtx& ctx) {
  if (!n.linear) return n.def->evaluate(n, in, out);
  const k::Tensor& a = need(n, in, 0);
  const float* bias = n.linear->bias.empty_handle() ? nullptr : n.linear->bias.data<float>();
  out[0] = n.exact.on ? linear_layout_independent(n, a, bias, ctx) : k::linear(a, *n.linear->w, bias, ctx.threads);
}
// Rows looked up in an encoded table are rounded onto its grid, as the device stores it.
void gather(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  n.def->evaluate(n, in, out);
  if (!n.table_grid) return;
  const k::Tensor& table = need(n, in, 0);
  std::vector<int64_t> idx = need(n, in, 1).to_int64s();
  for (int64_t& i : idx)
    if (i < 0) i += table.dim(0);
  n.table_grid->apply(out[0].mut<float>(), idx, table.dim(1));
}
void softmax(const NodeDef& n, const Ins& in, Outs& out, const RunCtx&) {
  if (!n.exact.on || n.onnx_opset < 13) return n.def->evaluate(n, in, out);
  out[0] = k::softmax_fixed(need(n, in, 0), n.attr_int("axis", -1));
}

}  // namespace

bool bind_operator(NodeDef& d) {
  d.def = graph::find_operator(d.op);
  if (!d.def || !d.def->evaluate) return false;
  d.kernel = d.op == "MatMul" ? matmul : d.op == "Gemm" ? gemm : d.op == "Gather" ? gather : d.op == "Softmax" ? softmax : nullptr;
  return true;
}

bool supports_op(std::string_view op_type) {
  const graph::Operator* op = graph::find_operator(op_type);
  return op && op->evaluate;
}

}  // namespace nf::engine
