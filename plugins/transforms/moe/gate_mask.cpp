#include "gate_mask.h"

#include <npuforge/graph/value_types.h>

#include <cstring>

namespace moe {
namespace {

std::string constant(nf::Graph g, nf::graph::UniqueNames& names, const std::string& base, nf_dtype dtype,
                     const std::vector<int64_t>& dims, const void* data) {
  nf::Tensor t = nf::Tensor::create(dtype, dims);
  std::memcpy(t.mutable_data(), data, t.nbytes());
  std::string name = names.make(base);
  g.set_initializer(name, t);
  return name;
}

}  // namespace

void rewrite_gate(nf::graph::GraphView& view, nf::graph::UniqueNames& names, const MoeBlock& b) {
  nf::Graph g = view.graph();
  const std::string p = b.topk + "/gate_mask/";
  auto probs_type = nf::graph::get_value_type(g, b.probs);
  const nf_dtype dt = probs_type ? probs_type->dtype : NF_DTYPE_FLOAT32;
  if (dt != NF_DTYPE_FLOAT32) throw nf::Error("moe: TopK '" + b.topk + "': router probabilities are " +
                                               std::string(nf::dtype_name(dt)) + ", only float32 is supported");
  if (b.top_values.empty() || nf::Node(*view.producer(b.top_values)).attr_int("sorted", 1) != 1)
    throw nf::Error("moe: TopK '" + b.topk + "' does not sort its values");
  const int64_t k_first = b.k - 1, k_end = b.k, last = -1;
  // kth = the K-th largest probability (TopK's values are sorted, largest first).
  std::string kth = names.make(p + "kth");
  g.add_node("Slice",
             {b.top_values, constant(g, names, p + "starts", NF_DTYPE_INT64, {1}, &k_first),
              constant(g, names, p + "ends", NF_DTYPE_INT64, {1}, &k_end), constant(g, names, p + "axes", NF_DTYPE_INT64, {1}, &last)},
             {kth}, names.make(p + "Slice"));
  std::string chosen = names.make(p + "chosen");
  g.add_node("GreaterOrEqual", {b.probs, kth}, {chosen}, names.make(p + "GreaterOrEqual"));
  const float zero = 0.f;
  std::string gated = names.make(p + "gated");
  g.add_node("Where", {chosen, b.probs, constant(g, names, p + "zero", NF_DTYPE_FLOAT32, {}, &zero)}, {gated},
             names.make(p + "Where"));
  std::string dense = gated;
  if (b.renormalize) {
    std::string sum = names.make(p + "sum");
    if (g.opset() >= 13) {
      g.add_node("ReduceSum", {gated, constant(g, names, p + "sum_axes", NF_DTYPE_INT64, {1}, &last)}, {sum},
                 names.make(p + "ReduceSum")).set_attr("keepdims", int64_t{1});
    } else {
      nf::Node n = g.add_node("ReduceSum", {gated}, {sum}, names.make(p + "ReduceSum"));
      n.set_attr("axes", std::vector<int64_t>{-1});
      n.set_attr("keepdims", int64_t{1});
    }
    dense = names.make(p + "weights");
    g.add_node("Div", {gated, sum}, {dense}, names.make(p + "Div"));
  }
  // Each expert's term reads its column of the new weights instead of the old routing.
  for (const Expert& e : b.expert_terms) {
    const int64_t first = e.index, end = e.index + 1;
    std::string column = names.make(p + "expert" + std::to_string(e.index));
    g.add_node("Slice",
               {dense, constant(g, names, p + "starts", NF_DTYPE_INT64, {1}, &first),
                constant(g, names, p + "ends", NF_DTYPE_INT64, {1}, &end), constant(g, names, p + "axes", NF_DTYPE_INT64, {1}, &last)},
               {column}, names.make(p + "Slice"));
    nf::Node term = *view.producer(e.term);
    for (size_t i = 0; i < term.input_count(); ++i)
      if (term.input(i) == e.weight) term.set_input(i, column);
  }
  view.refresh();
}

}  // namespace moe
