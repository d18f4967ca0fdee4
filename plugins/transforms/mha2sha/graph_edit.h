// Small graph edits mha2sha needs beyond npuforge::graph: copying a node with its
// attributes, int64 constants, static dims, and transposes that skip no-op layouts.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>
#include <npuforge/plugin.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mha2sha {

using Dims = std::vector<int64_t>;

// Static dims of a value; throws nf::Error naming `what` when the type is unknown or dynamic.
Dims static_dims(const nf::Graph& g, const std::string& value, const std::string& what);
// The same, or nothing (for the passes that only rewrite what they recognise).
std::optional<Dims> known_dims(const nf::Graph& g, const std::string& value);
int64_t numel(const Dims& d);
// `axis` of a rank-`rank` tensor as a non-negative index.
int64_t normalize_axis(int64_t axis, int64_t rank);

// The axes a Squeeze, Unsqueeze or Reduce* node names: its axes input (opset 13+; 18+ for
// the reductions) or its attribute.
std::vector<int64_t> axes_of(const nf::graph::GraphView& view, const nf::Node& n);
// The index of a Gather that takes one slice (a scalar constant index), if it is one.
std::optional<int64_t> scalar_index(const nf::graph::GraphView& view, const nf::Node& gather);

// After a pass rewrote `count` places of `g` (none: nothing to do): drops what they left dead
// and sorts the graph. Returns `count`.
size_t finish_rewrite(nf::Graph g, size_t count);

// Values read through the ABI once per graph: int64 constant initializers by content.
class GraphEditor {
 public:
  GraphEditor(nf::Graph g, std::string prefix);

  nf::Graph graph() const { return g_; }
  std::string fresh(const std::string& base) { return names_.make(base); }
  void reserve(const std::string& name) { names_.reserve(name); }
  // An int64 initializer holding `values` (one per distinct content and graph).
  std::string int64_constant(const std::vector<int64_t>& values);
  // Adds a node; its name is prefix + `label`, made unique.
  nf::Node add(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
               const std::string& label);
  // A copy of `src` reading `inputs` and writing `outputs`, all attributes copied.
  nf::Node clone(const nf::Node& src, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                 const std::string& label);
  // `value` (dims `dims`) permuted by `perm`. When only size-1 axes move, the bytes do not:
  // a Reshape (or nothing) stands in for the Transpose. Equal requests share one result.
  std::string permute(const std::string& value, const Dims& dims, const Dims& perm, const std::string& label);
  // Replaces `node` by a Slice of `x` over [begin, end) on `axis` that writes the node's
  // output under its name (the cut forms of a fused projection, rewritten to the common one).
  void replace_by_slice(nf::Node node, const std::string& x, int64_t begin, int64_t end, int64_t axis);
  // `value` reshaped to `dims` (nothing when it already has them).
  std::string reshape(const std::string& value, const Dims& from, const Dims& to, const std::string& label);

 private:
  nf::Graph g_;
  std::string prefix_;
  nf::graph::UniqueNames names_;
  std::map<std::vector<int64_t>, std::string> constants_;
  std::map<std::string, std::string> permuted_;
};

}  // namespace mha2sha
