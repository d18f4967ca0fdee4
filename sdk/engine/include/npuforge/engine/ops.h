// The cpu backend's nodes: a definition copied out of the host graph once (so running never
// calls back into the host for attributes), run by the SDK's operator table
// (npuforge/graph/operators.h) or, for the few operators that read what the planner
// prepared (packed weights, integer mode, encoded tables), by this backend's own kernel.
#pragma once

#include <npuforge/graph/operators.h>
#include <npuforge/kernels/linear.h>
#include <npuforge/kernels/tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nf::engine {

namespace k = nf::kernels;

struct Attr {
  nf_attr_type type = NF_ATTR_UNDEFINED;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  k::Tensor t;
};

struct NodeDef;
struct RunCtx {
  int threads = 0;
};
// A backend kernel: inputs are null for omitted optional inputs; outputs come sized to the
// node's output count and the function fills the ones it produces.
using KernelFn = void (*)(const NodeDef& n, const std::vector<const k::Tensor*>& in, std::vector<k::Tensor>& out,
                          const RunCtx& ctx);

// Prepared state of a MatMul/Gemm whose weight is constant.
struct LinearState {
  std::shared_ptr<const k::PackedWeight> w;  // shared by every graph of the session using the weight
  k::Tensor bias;  // Gemm C as [N] when foldable into the product, else empty
};

// The integer grid of a PER_TENSOR activation encoding: real = (q + offset) * scale with q in
// [0, 2^bw - 1] (AIMET convention).
struct ActivationGrid {
  float scale = 1;
  float offset = 0;
  float qmax = 255;
  // Rounds x onto the grid (round half to even, clamped), as the integer chip stores it.
  void apply(const float* x, float* y, int64_t n) const;
};

// Integer mode (the session runs activation encodings): the planner marks MatMul, Gemm and
// Softmax to run their layout-independent forms (npuforge/kernels/exact.h), with the grid
// steps of the inputs that lie on a grid (0 = not on a grid).
struct ExactMode {
  bool on = false;
  float a_scale = 0;  // input 0, when its codes fit 16 bits
  float b_scale = 0;  // input 1 of a MatMul without packed weights
};

// The grid of an encoded 2-D table read by Gather along axis 0 (a tied embedding that also
// serves as the LM head; the engine's weights.h weight_grid with the rows as channels): element
// (r, c) has step scale[r * blocks + c / block] and zero zero[...]. Gathered rows are
// rounded onto it, so the lookup reads what the device stores.
struct TableGrid {
  int64_t block = 0, blocks = 1;  // columns per group and groups per row
  float qmin = -128, qmax = 127;
  std::vector<float> scale, zero;
  // Rounds `rows` (row i taken from table row indices[i]) of `cols` columns in place.
  void apply(float* rows, const std::vector<int64_t>& indices, int64_t cols) const;
};

struct NodeDef final : graph::OpNode {
  std::string op, node_name;
  int64_t onnx_opset = 0;
  std::vector<int> in, out;  // value slots; -1 = omitted
  std::map<std::string, Attr> attrs;
  const graph::Operator* def = nullptr;  // the table's entry
  KernelFn kernel = nullptr;             // this backend's kernel, when it has one for the op
  std::shared_ptr<LinearState> linear;  // set by the planner for packed weights
  bool trans_b = false;                 // MatMul reads B through a folded Transpose
  std::shared_ptr<const TableGrid> table_grid;  // Gather of an encoded constant table
  ExactMode exact;

  // Computes the node (the backend's kernel, else the table's evaluation).
  void run(const std::vector<const k::Tensor*>& ins, std::vector<k::Tensor>& outs, const RunCtx& ctx) const;

  std::string_view op_type() const override { return op; }
  std::string_view name() const override { return node_name; }
  int64_t opset() const override { return onnx_opset; }
  size_t input_count() const override { return in.size(); }
  bool has_input(size_t i) const override { return i < in.size() && in[i] >= 0; }
  size_t output_count() const override { return out.size(); }
  bool has_attr(const char* a) const override { return attrs.count(a) != 0; }
  int64_t attr_int(const char* a, int64_t dflt) const override;
  float attr_float(const char* a, float dflt) const override;
  std::string attr_string(const char* a, const std::string& dflt) const override;
  std::vector<int64_t> attr_ints(const char* a, std::vector<int64_t> dflt = {}) const override;
  std::vector<float> attr_floats(const char* a) const override;
  k::Tensor attr_tensor(const char* a) const override;
};

// Prepares a node of `op_type` (ai.onnx) to run; false when no table entry evaluates it.
bool bind_operator(NodeDef& d);
// Whether this backend runs `op_type` (every operator of the SDK's table).
bool supports_op(std::string_view op_type);

}  // namespace nf::engine
