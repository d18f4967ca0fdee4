#include "npuforge/graph/dense_dispatch.h"

#include "npuforge/graph/eliminate_dead_nodes.h"
#include "npuforge/graph/graph_view.h"
#include "npuforge/graph/unique_names.h"
#include "npuforge/graph/value_types.h"

#include <optional>
#include <set>

namespace nf::graph {
namespace {


// Back from `v` through the ops in `through` (their data input).
std::string back_through(const GraphView& view, std::string v, const std::set<std::string>& through) {
  for (auto p = view.producer(v); p && through.count(std::string(p->op_type())); p = view.producer(v)) v = p->input(0);
  return v;
}

// The NonZero that `v` (an index vector) is cut from: NonZero -> Transpose -> Split / Gather /
// Slice -> Squeeze (torch.where's unbind).
std::optional<nf::Node> nonzero_of(const GraphView& view, const std::string& v) {
  static const std::set<std::string> kCut = {"Squeeze", "Split", "Transpose", "Gather", "Slice", "Reshape", "Cast"};
  std::string at = v;
  for (int step = 0; step < 8; ++step) {
    auto p = view.producer(at);
    if (!p) return std::nullopt;
    if (p->op_type() == "NonZero") return p;
    if (!kCut.count(std::string(p->op_type()))) return std::nullopt;
    at = p->input(0);
  }
  return std::nullopt;
}

// A Gather of rows by `rows` (the NonZero's row indices, through Unsqueeze / Reshape / Cast).
bool gathers_by(const GraphView& view, const nf::Node& n, const std::string& rows) {
  static const std::set<std::string> kIndexLayout = {"Unsqueeze", "Reshape", "Cast"};
  return n.op_type() == "Gather" && n.input_count() == 2 && back_through(view, n.input(1), kIndexLayout) == rows;
}

// The Gather of the expert's rows among the values `v` is computed from; none if absent.
std::optional<nf::Node> row_gather_above(const GraphView& view, const std::string& v, const std::string& rows) {
  std::set<std::string> seen;
  for (std::vector<std::string> todo{v}; !todo.empty();) {
    std::string at = todo.back();
    todo.pop_back();
    if (!seen.insert(at).second) continue;
    auto p = view.producer(at);
    if (!p) continue;
    if (gathers_by(view, *p, rows)) return p;
    for (const std::string& in : p->inputs())
      if (!in.empty() && !view.is_initializer(in)) todo.push_back(in);
  }
  return std::nullopt;
}

bool is_zeros(const GraphView& view, const std::string& v) {
  auto p = view.producer(v);
  return p && fills_zeros(*p);
}

}  // namespace

bool fills_zeros(const nf::Node& n) {
  if (n.op_type() != "ConstantOfShape") return false;
  const nf::Tensor value = n.attr_tensor("value");
  if (!value) return true;  // the default is a float 0
  return value.dtype() == NF_DTYPE_FLOAT32 && value.numel() == 1 && static_cast<const float*>(value.data())[0] == 0.f;
}

size_t densify_dispatch(nf::Graph g) {
  GraphView view(g);
  UniqueNames names(g);
  size_t rewritten = 0;
  for (const nf::Node& s : view.nodes()) {
    if (s.op_type() != "ScatterElements" || s.input_count() != 3 || s.attr_int("axis", 0) != 0) continue;
    const std::string reduction = s.attr_string("reduction", "none");
    const bool into_zeros = reduction == "none" && is_zeros(view, s.input(0));
    if (!into_zeros && reduction != "add") continue;
    // The rows: the scatter's indices are the NonZero's row indices spread over the hidden axis.
    const std::string rows = back_through(view, s.input(1), {"Expand", "Unsqueeze", "Reshape", "Cast"});
    auto nz = nonzero_of(view, rows);
    if (!nz) continue;
    // The update: the expert's output times its gathered routing weight.
    auto mul = view.producer(back_through(view, s.input(2), {"Expand", "Cast", "Reshape", "Identity"}));
    if (!mul || mul->op_type() != "Mul" || mul->input_count() != 2) continue;
    std::optional<nf::Node> row_gather;
    size_t expert_side = 2;
    for (size_t i : {size_t{0}, size_t{1}})
      if (auto gth = row_gather_above(view, mul->input(i), rows); gth && !row_gather_above(view, mul->input(1 - i), rows)) {
        row_gather = gth;
        expert_side = i;
      }
    if (!row_gather) continue;
    // The weight side: Gather(Flatten(routing_weights), row * k + slot) -> the routing weights.
    const std::string weight = back_through(view, mul->input(1 - expert_side), {"Reshape", "Cast", "Identity", "Expand"});
    auto weight_gather = view.producer(weight);
    // Gathered at indices computed from the same NonZero (row * k + slot), from the routing
    // weights: anything else is not HF's loop and stays as it is.
    if (!weight_gather || weight_gather->op_type() != "Gather" ||
        !view.upstream(weight_gather->input(1)).count(nz->output(0)))
      continue;
    const std::string routing = back_through(view, weight_gather->input(0), {"Flatten", "Reshape", "Unsqueeze"});
    const std::string mask = back_through(view, nz->input(0), {"Cast"});  // [k, rows], 1 where a row chose the expert

    // The expert on every row: its input is the tensor the rows were gathered from (HF gathers
    // axis 1 of x[None]: then x itself; the expert's Reshape(-1, hidden) follows either way).
    const std::string tag = std::string(s.name()) + "/dense";
    std::string all_rows = row_gather->input(0);
    if (auto u = view.producer(all_rows); u && u->op_type() == "Unsqueeze" && row_gather->attr_int("axis", 0) == 1 &&
                                          view.constant_ints(u->input_count() > 1 ? u->input(1) : "") == std::vector<int64_t>{0})
      all_rows = u->input(0);
    view.replace_uses(row_gather->output(0), all_rows);
    // Its weight per row [rows, 1].
    const std::string mask_t = names.make(tag + "/mask_t"), mask_f = names.make(tag + "/mask_f"),
                      picked = names.make(tag + "/picked"), w = names.make(tag + "/weight"),
                      axes = names.make(tag + "/axes"), product = names.make(tag + "/update"),
                      sum = names.make(tag + "/sum");
    g.add_node("Transpose", {mask}, {mask_t}, names.make(tag + "/Transpose")).set_attr("perm", std::vector<int64_t>{1, 0});
    g.add_node("Cast", {mask_t}, {mask_f}, names.make(tag + "/Cast")).set_attr("to", int64_t{NF_DTYPE_FLOAT32});
    g.add_node("Mul", {mask_f, routing}, {picked}, names.make(tag + "/Mul"));
    set_int64_initializer(g, axes, {-1});
    g.add_node("ReduceSum", {picked, axes}, {w}, names.make(tag + "/ReduceSum")).set_attr("keepdims", int64_t{1});
    std::vector<std::string> factors{mul->input(expert_side), w};
    if (expert_side == 1) std::swap(factors[0], factors[1]);
    g.add_node("Mul", factors, {product}, names.make(tag + "/weighted"));
    if (into_zeros) {
      view.replace_uses(s.output(0), product);
    } else {
      g.add_node("Add", {s.input(0), product}, {sum}, names.make(tag + "/Add"));
      view.replace_uses(s.output(0), sum);
    }
    ++rewritten;
  }
  if (rewritten) {
    g.sort();
    eliminate_dead_nodes(g);
  }
  return rewritten;
}

}  // namespace nf::graph
