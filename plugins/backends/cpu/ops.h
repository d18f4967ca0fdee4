// The cpu backend's operators: a node definition copied out of the host graph once (so
// running never calls back into the host for attributes), and one function per ONNX op.
#pragma once

#include <npuforge/kernels/linear.h>
#include <npuforge/kernels/tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nf::cpu {

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
// Computes a node: inputs are null for omitted optional inputs; outputs come sized to the
// node's output count and the function fills the ones it produces.
using OpFn = void (*)(const NodeDef& n, const std::vector<const k::Tensor*>& in, std::vector<k::Tensor>& out,
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
// serves as the LM head; cpu/weights.h weight_grid with the rows as channels): element
// (r, c) has step scale[r * blocks + c / block] and zero zero[...]. Gathered rows are
// rounded onto it, so the lookup reads what the device stores.
struct TableGrid {
  int64_t block = 0, blocks = 1;  // columns per group and groups per row
  float qmin = -128, qmax = 127;
  std::vector<float> scale, zero;
  // Rounds `rows` (row i taken from table row indices[i]) of `cols` columns in place.
  void apply(float* rows, const std::vector<int64_t>& indices, int64_t cols) const;
};

struct NodeDef {
  std::string op, name;
  int64_t opset = 0;
  std::vector<int> in, out;  // value slots; -1 = omitted
  std::map<std::string, Attr> attrs;
  OpFn fn = nullptr;
  std::shared_ptr<LinearState> linear;  // set by the planner for packed weights
  bool trans_b = false;                 // MatMul reads B through a folded Transpose
  std::shared_ptr<const TableGrid> table_grid;  // Gather of an encoded constant table
  ExactMode exact;

  bool has(const char* a) const { return attrs.count(a) != 0; }
  int64_t i(const char* a, int64_t dflt) const;
  float f(const char* a, float dflt) const;
  std::string s(const char* a, const std::string& dflt) const;
  std::vector<int64_t> ints(const char* a, std::vector<int64_t> dflt = {}) const;
};

// The operator table (one place: ops.cpp). Null when the op is not supported.
OpFn find_op(const std::string& op_type);
std::vector<std::string> supported_ops();

}  // namespace nf::cpu
