// The one operator table of npuforge: for each ONNX operator (ai.onnx domain) we support,
// how it is evaluated on the reference kernels and how its output types follow from its
// inputs'. Constant folding, shape inference, transforms that evaluate subgraphs and the
// cpu execution engine (which htp and aries run through) all read this table.
#pragma once

#include <npuforge/kernels/tensor.h>
#include <npuforge/plugin.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "npuforge/graph/value_types.h"

namespace nf::graph {

// What an operator reads of its node. A backend that copies nodes out of the host graph
// implements it over its copies; GraphNode below implements it over a graph's node.
class OpNode {
 public:
  virtual ~OpNode() = default;
  virtual std::string_view op_type() const = 0;
  virtual std::string_view name() const = 0;
  // The graph's ai.onnx opset: operators whose semantics changed read it (Softmax < 13,
  // Clip < 11, Slice < 10).
  virtual int64_t opset() const = 0;
  virtual size_t input_count() const = 0;
  virtual bool has_input(size_t i) const = 0;  // false for an omitted optional input
  virtual size_t output_count() const = 0;
  virtual bool has_attr(const char* name) const = 0;
  virtual int64_t attr_int(const char* name, int64_t dflt) const = 0;
  virtual float attr_float(const char* name, float dflt) const = 0;
  virtual std::string attr_string(const char* name, const std::string& dflt) const = 0;
  virtual std::vector<int64_t> attr_ints(const char* name, std::vector<int64_t> dflt = {}) const = 0;
  virtual std::vector<float> attr_floats(const char* name) const = 0;
  virtual kernels::Tensor attr_tensor(const char* name) const = 0;  // empty handle when absent
};

// An OpNode over a node of a host graph; `opset` 0 = unknown, read as the newest semantics.
class GraphNode final : public OpNode {
 public:
  explicit GraphNode(const Node& n, int64_t opset = 0) : n_(n), opset_(opset) {}
  std::string_view op_type() const override { return n_.op_type(); }
  std::string_view name() const override { return n_.name(); }
  int64_t opset() const override { return opset_ > 0 ? opset_ : kNewestOpset; }
  size_t input_count() const override { return n_.input_count(); }
  bool has_input(size_t i) const override { return !n_.input(i).empty(); }
  size_t output_count() const override { return n_.output_count(); }
  bool has_attr(const char* a) const override { return n_.has_attr(a); }
  int64_t attr_int(const char* a, int64_t d) const override { return n_.attr_int(a, d); }
  float attr_float(const char* a, float d) const override { return n_.attr_float(a, d); }
  std::string attr_string(const char* a, const std::string& d) const override { return n_.attr_string(a, d); }
  std::vector<int64_t> attr_ints(const char* a, std::vector<int64_t> d = {}) const override {
    return n_.attr_ints(a, std::move(d));
  }
  std::vector<float> attr_floats(const char* a) const override { return n_.attr_floats(a); }
  kernels::Tensor attr_tensor(const char* a) const override;

  static constexpr int64_t kNewestOpset = 21;

 private:
  const Node& n_;
  int64_t opset_;
};

using OpInputs = std::vector<const kernels::Tensor*>;  // null = omitted optional input
using OpOutputs = std::vector<kernels::Tensor>;        // sized to the node's output count
using OpTypes = std::vector<TensorType>;

struct Operator {
  std::string_view name;
  // Computes the node's outputs; throws kernels::KernelError naming the node on bad input.
  void (*evaluate)(const OpNode& n, const OpInputs& in, OpOutputs& out);
  // Output types from input types and the values of constant inputs (null when not
  // constant); null when the table knows no rule (outputs stay untyped).
  OpTypes (*infer)(const OpNode& n, const OpTypes& in, const OpInputs& values);
};

// The entry of an operator; null for an unknown operator or a domain other than ai.onnx.
const Operator* find_operator(std::string_view op_type, std::string_view domain = "");
// Every operator of the table, sorted by name.
std::vector<std::string> operator_names();

// The dims a Reshape node gives a value of dims `dims` for the requested `shape` (0 copies a
// dim unless allowzero, one -1 is inferred); the element count is checked by whoever reshapes.
std::vector<int64_t> reshape_node_dims(const OpNode& n, const std::vector<int64_t>& dims, std::vector<int64_t> shape);
// What a Shape node returns for a value of dims `dims` (its start / end attributes): folding
// and subgraph evaluation take it from a static type, without the value.
std::vector<int64_t> shape_node_dims(const OpNode& n, const std::vector<int64_t>& dims);

}  // namespace nf::graph
