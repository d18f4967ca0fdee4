// What spinquant needs to know about a decoder graph: producers and consumers of values,
// float weights, and the RMSNorms, residual stream and attention blocks it rewrites.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <string>
#include <vector>

namespace spinquant {

struct Use {
  nf::Node node;
  size_t input;
};

class GraphView {
 public:
  explicit GraphView(nf::Graph g);
  nf::Graph graph;
  const nf::Node* producer(const std::string& v) const;
  const std::vector<Use>& consumers(const std::string& v) const;
  bool is_initializer(const std::string& v) const { return inits_.count(v) != 0; }
  bool is_output(const std::string& v) const;
  // The float32 initializer `name` (empty Tensor when absent or another dtype).
  nf::Tensor float_initializer(const std::string& name) const;
  // The last dimension of `v` as shape inference over the graph finds it (run once, on the
  // first call); -1 when it is not known.
  int64_t last_dim(const std::string& v) const;

 private:
  mutable bool shapes_inferred_ = false;
  std::vector<nf::Node> nodes_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<Use>> consumers_;
  std::map<std::string, bool> inits_;
  std::vector<std::string> outputs_;
  std::vector<Use> none_;
};

// A linear layer: MatMul (B [K, N]) or Gemm (transB: [N, K]) with a constant 2-D weight.
struct Linear {
  std::string input;  // the activation (input 0)
  std::string node_output;
  std::string weight;
  std::string bias;  // Gemm C or a following Add of a 1-D constant; "" when none
  bool nk = false;
  int64_t K = 0, N = 0;
};

// The linear layer of node `n` when it is one (input 0 activation, input 1 a 2-D float weight).
bool as_linear(const GraphView& gv, const nf::Node& n, Linear* out);

// One RMSNorm: out = gain * x / sqrt(mean(x^2) + eps) (torch.onnx pattern, Casts allowed).
struct RmsNorm {
  std::string input;   // x (the residual stream value the norm reads)
  std::string output;  // the gain Mul's output
  std::string gain;    // 1-D initializer
  // What the gain Mul reads: the initializer, or an Identity of it (torch's export keeps one
  // initializer of equal parameters and reads it through Identity nodes elsewhere).
  std::string gain_input;
};
std::vector<RmsNorm> find_rms_norms(const GraphView& gv);
// Those whose gain has `size` entries (the hidden size: the norms of the residual stream and of
// its writers' outputs).
std::vector<RmsNorm> find_rms_norms(const GraphView& gv, int64_t size);

// Linear layers reading `value` (through Cast/Identity, Reshapes and scalar scalings: the
// caller checks each layer's K against the size of the axis it rotates); throws when anything
// but a linear layer or a Shape reads it.
std::vector<Linear> linear_readers(const GraphView& gv, const std::string& value, const std::string& what);

// Cast and Identity: the value goes through unchanged.
bool passthrough(std::string_view op);

// `value` before the Casts and Identities that make it (itself when none does).
std::string through_casts(const GraphView& gv, std::string value);

// The other operand of a Mul by, or a Div by, a one-element constant (initializer or
// Constant node); "" when `n` is not that. A rotation commutes with such a scaling.
std::string scaled_operand(const GraphView& gv, const nf::Node& n);

// The linear layer whose output reaches `value` through Reshape/Identity/Cast/Transpose,
// bias Adds and scalar scalings (Granite's residual_multiplier); false when there is none.
bool linear_writer(const GraphView& gv, const std::string& value, Linear* out);

// Attention blocks: the value projection (its output reaches Softmax(...) @ V) and the
// output projection (reads that product).
struct Attention {
  Linear v_proj, o_proj;
};
std::vector<Attention> find_attention(const GraphView& gv);

// Dense float helpers on weights.
std::vector<float> read_floats(const nf::Tensor& t);
void write_initializer(nf::Graph& g, const std::string& name, const std::vector<int64_t>& dims,
                       const std::vector<float>& values);

}  // namespace spinquant
