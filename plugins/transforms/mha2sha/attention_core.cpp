#include "attention_core.h"

#include <algorithm>
#include <set>

namespace mha2sha {
namespace {

using nf::graph::GraphView;

struct Reject : nf::Error {
  using nf::Error::Error;
};

const std::set<std::string> kHeadwiseOps = {"Add", "Sub", "Mul", "Div", "Neg", "Cast", "Identity", "Slice", "Concat",
                                            "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Relu", "Abs", "Pow", "Clip"};
// Between the score MatMul and the Softmax: scaling, the mask, casts, and Gemma-2's logit
// soft-capping (Div, Tanh, Mul).
const std::set<std::string> kScoreOps = {"Add", "Sub", "Mul", "Div", "Cast", "Identity", "Softmax", "Where", "Tanh"};

// Between a head split's Reshape and its Transpose: nodes that stay within the last axis
// (head_dim), such as an RMSNorm of each head (Pow, ReduceMean over -1, Add, Sqrt, Div, Mul),
// or OLMo-1's clamp of q, k and v (Clip, also before the head view).
const std::set<std::string> kLastAxisOps = {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Cast",
                                            "Identity", "ReduceMean", "Clip"};

std::string node_name(const nf::Node& n) { return std::string(n.name()); }

// ReduceMean over the last axis, kept: within each head's head_dim values (or, before the
// head view, within one row of all heads).
bool reduces_last_axis(const GraphView& view, const nf::Node& n) {
  std::vector<int64_t> axes = axes_of(view, n);
  const int64_t rank = static_cast<int64_t>(static_dims(view.graph(), n.input(0), "ReduceMean input").size());
  return axes.size() == 1 && normalize_axis(axes[0], rank) == rank - 1 && n.attr_int("keepdims", 1) == 1;
}

bool is_perm(const nf::Node& n, const Dims& perm) {
  return n.op_type() == "Transpose" && n.attr_ints("perm") == perm;
}

// An operand shared by every head's copy must not itself carry heads: in the
// [1, heads, rows, head_dim] alignment its head axis (if it reaches that far) is 1.
void check_shared_operand(const GraphView& view, const std::string& v, const std::string& where) {
  if (v.empty() || view.is_initializer(v)) {
    if (v.empty()) return;
    Dims d = view.graph().initializer(v).dims();
    if (d.size() >= 3 && d[d.size() - 3] != 1) throw Reject(where + ": operand '" + v + "' varies per head");
    return;
  }
  Dims d = static_dims(view.graph(), v, "operand");
  if (d.size() >= 3 && d[d.size() - 3] != 1) throw Reject(where + ": operand '" + v + "' varies per head");
}

// Checks that a head-wise node works on one head as on all: no axis of its own on the
// batch or head axes. Unsqueeze and Reshape may reshape what follows the head axis (Cohere's
// rotary pairs neighbouring dims: [.., hd/2] -> Unsqueeze -> Concat -> Reshape [.., hd]); a
// Reshape keeps [1, heads] in front, and each head's copy reshapes to its static output
// dims with [1, 1] in front.
void check_headwise(const GraphView& view, const nf::Node& n) {
  const std::string op(n.op_type());
  if (op == "Unsqueeze") {
    std::vector<int64_t> axes = axes_of(view, n);
    if (axes.empty()) throw Reject("Unsqueeze '" + node_name(n) + "' has non-constant axes");
    const int64_t rank = static_cast<int64_t>(static_dims(view.graph(), n.output(0), "Unsqueeze output").size());
    for (int64_t a : axes)
      if (normalize_axis(a, rank) < 2) throw Reject("Unsqueeze '" + node_name(n) + "' adds an axis before the heads");
    return;
  }
  if (op == "Reshape") {
    const Dims in = static_dims(view.graph(), n.input(0), "Reshape input"), out = static_dims(view.graph(), n.output(0), "Reshape output");
    if (in.size() < 2 || out.size() < 2 || in[0] != 1 || out[0] != 1 || in[1] != out[1])
      throw Reject("Reshape '" + node_name(n) + "' does not keep [1, heads] in front");
    return;
  }
  if (op == "ReduceMean") {  // Gemma-3's q_norm / k_norm after the head transpose
    if (!reduces_last_axis(view, n)) throw Reject("ReduceMean '" + node_name(n) + "' reduces other than head_dim");
    return;
  }
  if (!kHeadwiseOps.count(op)) throw Reject("node '" + node_name(n) + "' (" + op + ") between a projection and the attention");
  if (op == "Concat") {
    if (normalize_axis(n.attr_int("axis", 0), 4) < 2) throw Reject("Concat '" + node_name(n) + "' joins along the heads");
  } else if (op == "Slice") {
    std::vector<int64_t> axes = view.is_initializer(n.input(3)) ? view.constant_ints(n.input(3)) : std::vector<int64_t>{};
    if (n.input(3).empty()) axes = {0, 1, 2, 3};  // all axes: only fine if untouched, reject
    if (axes.empty()) throw Reject("Slice '" + node_name(n) + "' has non-constant axes");
    for (int64_t a : axes)
      if (normalize_axis(a, 4) < 2) throw Reject("Slice '" + node_name(n) + "' cuts the batch or head axis");
  }
}

// The columns [begin, begin + width) of a fused projection that a Slice or Split of the last
// axis of a rank-`rank` value takes (q/k/v from one qkv_proj). Rejects any other cut.
int64_t fused_columns(const GraphView& view, const nf::Node& cut, const std::string& taken, int64_t total, int64_t rank = 3) {
  const std::string where = std::string(cut.op_type()) + " '" + node_name(cut) + "'";
  if (cut.op_type() == "Slice") {
    std::vector<int64_t> starts = view.constant_ints(cut.input(1)), ends = view.constant_ints(cut.input(2));
    std::vector<int64_t> axes = view.constant_ints(cut.input(3)), steps = view.constant_ints(cut.input(4));
    if (starts.size() != 1 || ends.size() != 1 || axes.size() > 1 || (axes.size() == 1 && normalize_axis(axes[0], rank) != rank - 1) ||
        (!steps.empty() && steps != std::vector<int64_t>{1}) || (axes.empty() && cut.input_count() > 3))
      throw Reject(where + " does not take a constant column range of the projection");
    return std::clamp<int64_t>(starts[0] < 0 ? starts[0] + total : starts[0], 0, total);
  }
  if (normalize_axis(cut.attr_int("axis", 0), rank) != rank - 1) throw Reject(where + " does not cut the projection's columns");
  std::vector<int64_t> sizes = cut.input_count() > 1 ? view.constant_ints(cut.input(1)) : cut.attr_ints("split");
  const int64_t parts = static_cast<int64_t>(cut.output_count());
  if (sizes.empty() && total % parts == 0) sizes.assign(static_cast<size_t>(parts), total / parts);
  if (static_cast<int64_t>(sizes.size()) != parts) throw Reject(where + " has no constant split sizes");
  int64_t begin = 0;
  for (int64_t i = 0; i < parts; ++i) {
    if (cut.output(static_cast<size_t>(i)) == taken) return begin;
    begin += sizes[static_cast<size_t>(i)];
  }
  throw Reject(where + " does not write '" + taken + "'");
}

// Whether node `n`, reading values of the head view [1, rows, heads, ...] (the first three
// axes kept by every such value), works on each (row, head) alone: it reads, cuts, joins,
// adds or folds axes after the head axis only, and its other operands are the same for every
// head. Returns 0 when not; 1 when it also works on one head's [1, 1, rows, head_dim] (within
// the last axis: element-wise with operands that vary along the last axis at most, or
// ReduceMean over it); 2 when it needs the head's [1, rows, 1, ...] layout (GPT-J rotates q
// and k before the head transpose: per-row sin / cos, slices with steps, a pairwise
// Unsqueeze, Concat and Reshape).
int headwise_before_transpose(const GraphView& view, const nf::Node& n, const std::set<std::string>& derived,
                              std::string* why) {
  const std::string op(n.op_type());
  const Dims out = static_dims(view.graph(), n.output(0), "value before the head transpose");
  const int64_t rank = static_cast<int64_t>(out.size());
  auto after_heads = [&](const std::vector<int64_t>& axes, int64_t r) {
    if (axes.empty()) return false;
    for (int64_t a : axes)
      if (normalize_axis(a, r) < 3) return false;
    return true;
  };
  if (op == "ReduceMean") {
    if (reduces_last_axis(view, n)) return 1;
    *why = "reduces other than the last axis";
    return 0;
  }
  if (op == "Slice") {
    if (n.input_count() > 3 && view.is_initializer(n.input(3)) && after_heads(view.constant_ints(n.input(3)), rank)) return 2;
    *why = "cuts other than the axes after the heads";
    return 0;
  }
  if (op == "Concat") {
    if (after_heads({n.attr_int("axis", 0)}, rank)) return 2;
    *why = "joins other than the axes after the heads";
    return 0;
  }
  if (op == "Unsqueeze") {
    std::vector<int64_t> axes = axes_of(view, n);
    if (after_heads(axes, rank)) return 2;
    *why = "adds an axis before the heads";
    return 0;
  }
  if (op == "Reshape") {
    const Dims in = static_dims(view.graph(), n.input(0), "Reshape input");
    if (in.size() >= 4 && rank >= 4 && std::equal(in.begin(), in.begin() + 3, out.begin())) return 2;
    *why = "does not keep [1, rows, heads] in front";
    return 0;
  }
  if (!kLastAxisOps.count(op)) {
    *why = "does not stay within each head";
    return 0;
  }
  int kind = 1;
  for (size_t i = 0; i < n.input_count(); ++i) {
    const std::string in = n.input(i);
    if (in.empty() || derived.count(in)) continue;
    Dims d = view.is_initializer(in) ? view.graph().initializer(in).dims() : static_dims(view.graph(), in, "operand");
    // Right-aligned against the output: operand axis a is output axis a + rank - d.size().
    for (size_t a = 0; a < d.size(); ++a) {
      const int64_t axis = static_cast<int64_t>(a) + rank - static_cast<int64_t>(d.size());
      if (d[a] == 1 || axis == rank - 1) continue;
      if (axis == 2) {
        *why = "operand '" + in + "' varies per head";
        return 0;
      }
      kind = 2;
    }
  }
  return kind;
}

// The nodes on paths from `split` ([1, rows, heads, head_dim]) to `end`, in graph order, when
// each works within the last axis: element-wise with operands that vary along the last axis
// at most, or ReduceMean over the last axis. Their values feed nothing outside the paths.
// With `row_layout` (the region between a head view and its transpose), nodes may also work
// on each (row, head) in the head view's layout (headwise_before_transpose); *row_layout says
// whether one did.
std::vector<nf_node*> last_axis_region(const GraphView& view, const std::string& split, const std::string& end,
                                       bool* row_layout = nullptr) {
  std::vector<nf_node*> region;
  if (row_layout) *row_layout = false;
  if (end == split) return region;
  std::set<std::string> upstream;
  for (std::vector<std::string> todo{end}; !todo.empty();) {
    std::string v = todo.back();
    todo.pop_back();
    if (v == split || v.empty() || view.is_initializer(v) || !upstream.insert(v).second) continue;
    if (auto p = view.producer(v))
      for (const std::string& in : p->inputs()) todo.push_back(in);
  }
  std::set<std::string> derived{split};
  std::set<nf_node*> inside;
  for (const nf::Node& n : view.nodes()) {
    bool reads = false;
    for (const std::string& in : n.inputs()) reads |= derived.count(in) != 0;
    if (!reads || !upstream.count(n.output(0))) continue;
    const std::string op(n.op_type()), where = "node '" + node_name(n) + "' (" + op + ") before the head transpose";
    if (n.output_count() != 1) throw Reject(where + " does not stay within each head");
    std::string why;
    const int kind = headwise_before_transpose(view, n, derived, &why);
    if (kind == 0) throw Reject(where + " " + why);
    if (kind == 2 && !row_layout) throw Reject(where + " does not stay within the last axis");
    if (kind == 2) *row_layout = true;
    derived.insert(n.output(0));
    inside.insert(n.get());
    region.push_back(n.get());
  }
  if (!derived.count(end)) throw Reject("'" + end + "' is not computed from the head split '" + split + "'");
  for (const std::string& v : derived)
    for (const nf::Node& u : view.consumers(v))
      if (v != end && !inside.count(u.get()))
        throw Reject("'" + v + "' inside a head split also feeds node '" + node_name(u) + "'");
  return region;
}

// The nearest producer above `v` that `is_it` accepts, walking up through the `through` ops.
template <class Pred>
std::optional<nf::Node> nearest_above(const GraphView& view, const std::string& v, Pred is_it,
                                      const std::set<std::string>& through = kLastAxisOps) {
  for (std::vector<std::string> todo{v}; !todo.empty();) {
    auto p = view.producer(todo.back());
    todo.pop_back();
    if (!p) continue;
    if (is_it(*p)) return p;
    if (through.count(std::string(p->op_type())))
      for (const std::string& in : p->inputs())
        if (!in.empty() && !view.is_initializer(in)) todo.push_back(in);
  }
  return std::nullopt;
}

// A Reshape that views a projection's rows [1, rows, columns] as heads [1, rows, heads, head_dim].
bool is_head_view(const GraphView& view, const nf::Node& n) {
  if (n.op_type() != "Reshape") return false;
  auto in = nf::graph::get_value_type(view.graph(), n.input(0)), out = nf::graph::get_value_type(view.graph(), n.output(0));
  return in && out && in->dims && out->dims && in->dims->size() == 3 && out->dims->size() == 4;
}

// A linear layer on rows flattened to 2-D: Gemm(Reshape(x [1, rows, in] -> [rows, in]),
// W [in, cols], bias [cols]), plain (GPT-2's Conv1D, whose addmm exports so). Returns x.
std::string flat_gemm_input(const GraphView& view, const nf::Node& n) {
  if (n.op_type() != "Gemm" || n.input_count() < 2 || n.attr_int("transA", 0) != 0 || n.attr_int("transB", 0) != 0 ||
      n.attr_float("alpha", 1.f) != 1.f || n.attr_float("beta", 1.f) != 1.f || !view.is_initializer(n.input(1)) ||
      (n.input_count() > 2 && !n.input(2).empty() && !view.is_initializer(n.input(2))))
    return "";
  auto flat = view.producer(n.input(0));
  if (!flat || flat->op_type() != "Reshape") return "";
  Dims d = static_dims(view.graph(), flat->input(0), "Gemm input");
  return d.size() == 3 && d[0] == 1 ? flat->input(0) : "";
}

// The first of the heads a Slice or Gather of axis 2 of the head view [1, rows, heads, hd]
// keeps, when it keeps a constant run of them (Falcon's multi-query view [rows, heads + 2, hd]:
// queries [:-2], the key [[-2]], the value [[-1]]).
std::optional<int64_t> first_head_kept(const GraphView& view, const nf::Node& cut, int64_t heads) {
  std::vector<int64_t> first;
  if (cut.op_type() == "Gather" && cut.input_count() == 2 && normalize_axis(cut.attr_int("axis", 0), 4) == 2) {
    first = view.constant_ints(cut.input(1));
    for (size_t i = 1; i < first.size(); ++i)
      if (normalize_axis(first[i], heads) != normalize_axis(first[0], heads) + static_cast<int64_t>(i)) return std::nullopt;
    // A scalar index drops the axis: not a run of heads.
    if (first.empty() || static_dims(view.graph(), cut.output(0), "head cut").size() != 4) return std::nullopt;
  } else if (cut.op_type() == "Slice" && cut.input_count() >= 4) {
    std::vector<int64_t> axes = view.constant_ints(cut.input(3)), steps = cut.input_count() > 4 ? view.constant_ints(cut.input(4)) : std::vector<int64_t>{};
    if (axes.size() != 1 || normalize_axis(axes[0], 4) != 2 || (cut.input_count() > 4 && steps != std::vector<int64_t>{1}))
      return std::nullopt;
    first = view.constant_ints(cut.input(1));
    if (first.size() != 1) return std::nullopt;
  } else {
    return std::nullopt;
  }
  return std::clamp<int64_t>(first[0] < 0 ? first[0] + heads : first[0], 0, heads);
}

// InternLM2's grouped view of its fused wqkv: Reshape [1, rows, C] -> [1, rows, groups, per,
// head_dim] (each KV group's query heads, then its key, then its value), cut on axis 3 by a
// scalar Gather (one head a group: the key or the value, [1, rows, groups, head_dim]) or by a
// Slice of a run of entries that a Reshape folds into [1, rows, groups * kept, head_dim] (the
// query heads). Head h of that view is entry first + h % kept of group h / kept.
struct GroupCut {
  std::string packed;  // the projection output [1, rows, C]
  int64_t first = 0, kept = 1, per = 0;
};

std::optional<GroupCut> grouped_heads(const GraphView& view, const nf::Node& head_view) {
  std::optional<nf::Node> cut;
  if (head_view.op_type() == "Gather")
    cut = head_view;  // a key or a value
  else if (head_view.op_type() == "Reshape")
    cut = view.producer(head_view.input(0));  // the queries, folded
  if (!cut || (cut->op_type() == "Slice") != (head_view.op_type() == "Reshape")) return std::nullopt;
  auto grouped = view.producer(cut->input(0));
  if (!grouped || grouped->op_type() != "Reshape") return std::nullopt;
  auto in = known_dims(view.graph(), grouped->input(0)), g = known_dims(view.graph(), grouped->output(0));
  auto out = known_dims(view.graph(), head_view.output(0));
  if (!in || !g || !out || in->size() != 3 || g->size() != 5 || (*in)[0] != 1 || (*g)[0] != 1 || (*g)[1] != (*in)[1] ||
      (*g)[2] * (*g)[3] * (*g)[4] != (*in)[2])
    return std::nullopt;
  GroupCut c{grouped->input(0), 0, 1, (*g)[3]};
  if (cut->op_type() == "Gather") {
    const std::optional<int64_t> index = scalar_index(view, *cut);
    if (!index || normalize_axis(cut->attr_int("axis", 0), 5) != 3) return std::nullopt;
    c.first = *index < 0 ? *index + c.per : *index;
  } else {
    if (cut->input_count() < 4) return std::nullopt;
    std::vector<int64_t> starts = view.constant_ints(cut->input(1)), ends = view.constant_ints(cut->input(2));
    std::vector<int64_t> axes = view.constant_ints(cut->input(3));
    std::vector<int64_t> steps = cut->input_count() > 4 ? view.constant_ints(cut->input(4)) : std::vector<int64_t>{1};
    if (starts.size() != 1 || ends.size() != 1 || axes.size() != 1 || normalize_axis(axes[0], 5) != 3 ||
        steps != std::vector<int64_t>{1})
      return std::nullopt;
    auto at = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + c.per : i, 0, c.per); };
    c.first = at(starts[0]);
    c.kept = at(ends[0]) - c.first;
  }
  if (c.first < 0 || c.kept < 1 || c.first + c.kept > c.per || *out != Dims{1, (*g)[1], (*g)[2] * c.kept, (*g)[4]})
    return std::nullopt;
  return c;
}

// Whether Transpose `t` splits a linear projection into heads:
// MatMul(x, W) [+ bias] (or a flat Gemm, reshaped back) [-> Slice/Split of the columns] ->
// Reshape [1, rows, heads, head_dim]
// [-> nodes within the last axis] -> Transpose(0, 2, 1, 3). Fills the projection fields of
// `b` when it does.
bool match_head_split(const GraphView& view, const nf::Node& t, HeadBranch& b) {
  if (!is_perm(t, {0, 2, 1, 3})) return false;
  // The Reshape: the Transpose's input, or the nearest one above it through last-axis nodes,
  // or above a cut of the head axis, which takes the columns of the heads it keeps.
  std::optional<nf::Node> r, head_cut;
  int64_t first_head = 0;
  if (auto c = view.producer(t.input(0)); c && (c->op_type() == "Slice" || c->op_type() == "Gather")) {
    auto hr = view.producer(c->input(0));
    if (hr && hr->op_type() == "Reshape") {
      Dims hd = static_dims(view.graph(), hr->output(0), "head view");
      if (auto f = hd.size() == 4 ? first_head_kept(view, *c, hd[2]) : std::nullopt) {
        r = hr;
        head_cut = c;
        first_head = *f;
      }
    }
  }
  // Through what a head view may hold before its transpose (headwise_before_transpose).
  static const std::set<std::string> kBeforeTranspose = [] {
    std::set<std::string> s = kLastAxisOps;
    s.insert({"Slice", "Concat", "Unsqueeze", "Reshape"});
    return s;
  }();
  std::optional<GroupCut> grouped;
  if (auto p = view.producer(t.input(0)); !r && p && (grouped = grouped_heads(view, *p))) r = p;
  if (!r) r = nearest_above(view, t.input(0), [&](const nf::Node& n) { return is_head_view(view, n); }, kBeforeTranspose);
  if (!r) return false;
  std::string packed = grouped ? grouped->packed : r->input(0);
  auto cut = view.producer(packed);
  std::optional<nf::Node> column_cut;
  if (!grouped && cut && (cut->op_type() == "Slice" || cut->op_type() == "Split")) {
    column_cut = cut;
    packed = cut->input(0);
  }
  auto m = view.producer(packed);
  std::string bias, x;
  bool bias_first = false;
  if (m && m->op_type() == "Reshape") {
    auto g = view.producer(m->input(0));
    if (g && !(x = flat_gemm_input(view, *g)).empty()) {
      if (g->input_count() > 2) bias = g->input(2);
      m = g;
    }
  }
  if (m && m->op_type() == "Add" && x.empty()) {
    for (size_t i = 0; i < 2 && bias.empty(); ++i)
      if (view.is_initializer(m->input(i))) {
        bias = m->input(i);
        bias_first = i == 0;
      }
    if (bias.empty()) return false;
    m = view.producer(m->input(bias_first ? 1 : 0));
  }
  auto is_projection = [&](const nf::Node& n) {
    return (n.op_type() == "MatMul" && view.is_initializer(n.input(1)) && !view.is_initializer(n.input(0))) ||
           !x.empty();
  };
  // A normalization over all heads between the projection and the head view (OLMo-2's q_norm
  // / k_norm): the projection stays whole and each head takes its columns of the result.
  std::vector<nf_node*> shared_region;
  if (m && !is_projection(*m) && !column_cut && bias.empty() && kLastAxisOps.count(std::string(m->op_type()))) {
    if (auto p = nearest_above(view, packed, is_projection)) {
      shared_region = last_axis_region(view, p->output(0), packed);
      m = p;
    }
  }
  if (!m || !is_projection(*m)) return false;
  // It is a projection: from here on a mismatch is an error, not another kind of node.
  Dims rd = static_dims(view.graph(), r->output(0), "head split");
  Dims wd = view.graph().initializer(m->input(1)).dims();
  if (rd.size() != 4 || rd[0] != 1 || wd.size() != 2)
    throw Reject("Reshape '" + node_name(*r) + "' does not split [1, rows, heads*head_dim] into heads");
  b.shared_out = shared_region.empty() ? "" : packed;
  b.split_out = head_cut ? head_cut->output(0) : r->output(0);
  b.split_end = t.input(0);
  b.split_region = last_axis_region(view, b.split_out, b.split_end, &b.split_row_layout);
  b.heads_out = t.output(0);
  b.rows = rd[1];
  b.heads = head_cut ? static_dims(view.graph(), head_cut->output(0), "head cut")[2] : rd[2];
  b.head_dim = rd[3];
  b.x = x.empty() ? m->input(0) : x;
  b.weight = m->input(1);
  b.bias = bias;
  b.bias_first = bias_first;
  b.proj_out = x.empty() ? m->output(0) : "";  // a Gemm has no value before its bias
  b.biased_out = bias.empty() ? "" : packed;
  b.weight_columns = wd[1];
  b.first_column = (column_cut ? fused_columns(view, *column_cut, r->input(0), wd[1]) : 0) + first_head * b.head_dim;
  if (grouped) {
    b.first_column = grouped->first * b.head_dim;
    b.group_heads = grouped->kept;
    b.group_stride = grouped->per * b.head_dim;
  }
  if (b.columns().of(b.heads - 1) + b.head_dim > wd[1] ||
      (!column_cut && !head_cut && !grouped && wd[1] != b.heads * b.head_dim))
    throw Reject("weight '" + b.weight + "' [" + std::to_string(wd[0]) + ", " + std::to_string(wd[1]) +
                 "] does not hold the " + std::to_string(b.heads) + " x " + std::to_string(b.head_dim) +
                 " columns that Reshape '" + node_name(*r) + "' splits into heads");
  if (!bias.empty() && view.graph().initializer(bias).dims() != Dims{wd[1]})
    throw Reject("bias '" + bias + "' does not match the weight's columns");
  return true;
}

// Walks back from `end` ([1, heads, rows, head_dim]) to the one projection whose heads it
// carries. The branch is what lies on paths from that projection's head split to `end`
// (RoPE, scaling, casts): each node must work on one head as on all heads, and whatever
// else it reads (cos/sin, scales) is shared by every head. Found by dataflow, so it does
// not matter how many heads there are (one KV head included) or in which order the
// exporter wrote the nodes.
HeadBranch trace_branch(const GraphView& view, const std::string& end) {
  HeadBranch b;
  b.end = end;
  Dims end_dims = static_dims(view.graph(), end, "attention operand");
  if (end_dims.size() != 4 || end_dims[0] != 1) throw Reject("'" + end + "' is not [1, heads, rows, head_dim]");
  // Every value `end` is computed from, back to (and including) head splits.
  std::set<std::string> upstream;
  std::vector<std::string> todo{end};
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    if (v.empty() || view.is_initializer(v) || !upstream.insert(v).second) continue;
    auto p = view.producer(v);
    if (!p || p->op_type() == "Shape") continue;
    HeadBranch candidate;
    if (match_head_split(view, *p, candidate)) {
      if (!b.heads_out.empty() && b.heads_out != candidate.heads_out)
        throw Reject("two projections ('" + b.weight + "', '" + candidate.weight + "') meet in '" + end + "'");
      candidate.end = end;
      b = candidate;
      continue;
    }
    for (const std::string& in : p->inputs()) todo.push_back(in);
  }
  if (b.heads_out.empty()) throw Reject("no linear projection split into heads reaches '" + end + "'");
  // Each head's q, k and v side by side: when all that reaches `end` from the head view goes
  // through one output of a Split or Slice of its last axis, that cut takes this branch's
  // columns of every head, and the weights are cut to them directly. (RoPE's rotate_half
  // also slices the last axis, but the head view reaches `end` beside it too.)
  std::vector<std::pair<nf::Node, std::string>> onward;  // (consumer, its output toward end)
  for (const nf::Node& u : view.consumers(b.heads_out))
    for (const std::string& out : u.outputs())
      if (upstream.count(out)) onward.emplace_back(u, out);
  if (onward.size() == 1 && b.split_region.empty() && b.shared_out.empty() && !b.group_heads) {
    const auto& [cut, out] = onward[0];
    if (cut.op_type() == "Split" || cut.op_type() == "Slice") {
      b.first_column += fused_columns(view, cut, out, b.head_dim, 4);
      b.head_stride = b.head_dim;
      b.head_dim = static_dims(view.graph(), out, "head cut").back();
      b.heads_out = out;
    }
  }
  if (end_dims[1] != b.heads || end_dims[2] != b.rows || end_dims[3] != b.head_dim)
    throw Reject("'" + end + "' changed shape after the head split of '" + b.weight + "'");
  // The values derived from the head split, in graph order; their producers are the region.
  std::set<std::string> derived{b.heads_out};
  for (const nf::Node& n : view.nodes()) {
    bool reads = false;
    for (const std::string& in : n.inputs()) reads |= derived.count(in) != 0;
    if (!reads || !upstream.count(n.output(0))) continue;
    for (const std::string& out : n.outputs()) derived.insert(out);
    check_headwise(view, n);
    for (const std::string& in : n.inputs())
      if (!derived.count(in)) check_shared_operand(view, in, "node '" + node_name(n) + "'");
    b.region.push_back(n.get());
  }
  if (!derived.count(end)) throw Reject("'" + end + "' is not computed from the head split of '" + b.weight + "'");
  return b;
}

// x when `n` is Mul(x, c), Mul(c, x) or Div(x, c) with c a one-element constant (a scale
// that commutes with the matrix product: torch's SDPA export multiplies K^T by Sqrt(scale)
// after the transpose); else "".
std::string scaled_operand(const GraphView& view, const nf::Node& n) {
  if ((n.op_type() != "Mul" && n.op_type() != "Div") || n.input_count() != 2) return "";
  for (size_t i : {0, 1}) {
    const std::string x = n.input(i), c = n.input(1 - i);
    if ((n.op_type() == "Div" && i == 1) || !view.is_initializer(c) || view.is_initializer(x)) continue;
    Dims d = view.graph().initializer(c).dims();
    if (std::all_of(d.begin(), d.end(), [](int64_t e) { return e == 1; })) return x;
  }
  return "";
}

// From a value MatMul's / score MatMul's operand back through repeat_kv (Unsqueeze,
// Expand, Reshape), the key transpose and scalar scales (collected in `scales`, to be applied
// to the product instead) to the [1, n_kv, T, head_dim] tensor.
std::string through_repeat_kv(const GraphView& view, std::string v, bool expect_transpose,
                              std::vector<nf_node*>* scales) {
  bool transposed = false;
  for (int step = 0; step < 10; ++step) {
    auto p = view.producer(v);
    if (!p) break;
    std::string_view op = p->op_type();
    if (op == "Transpose" && expect_transpose && !transposed && is_perm(*p, {0, 1, 3, 2})) {
      transposed = true;
    } else if (std::string x = scaled_operand(view, *p); !x.empty()) {
      if (view.consumers(v).size() != 1) throw Reject("the scaled operand '" + v + "' has other readers");
      scales->push_back(p->get());
      v = x;
      continue;
    } else if (op != "Unsqueeze" && op != "Expand" && op != "Reshape" && op != "Identity") {
      break;
    }
    v = p->input(0);
  }
  if (expect_transpose && !transposed) throw Reject("the key reaches the score MatMul without a Transpose(0, 1, 3, 2)");
  return v;
}

std::optional<PastCache> past_of(const GraphView& view, const nf::Node& concat, std::string* new_rows) {
  if (concat.op_type() != "Concat" || normalize_axis(concat.attr_int("axis", 0), 4) != 2) return std::nullopt;
  // Concat(past, prefix, new): the prefix a constant of the graph.
  const bool with_prefix = concat.input_count() == 3 && view.is_initializer(concat.input(1));
  if (concat.input_count() != 2 && !with_prefix) return std::nullopt;
  const size_t last = concat.input_count() - 1;
  for (size_t i : {size_t{0}, last}) {
    if (with_prefix && i != 0) break;  // the prefix follows the past rows
    std::string past = concat.input(i);
    PastCache pc;
    pc.past_first = i == 0;
    if (with_prefix) pc.prefix = concat.input(1);
    pc.perm = {0, 1, 2, 3};
    if (!view.is_input(past)) {
      auto t = view.producer(past);
      if (!t || t->op_type() != "Transpose" || !view.is_input(t->input(0))) continue;
      pc.perm = t->attr_ints("perm");
      past = t->input(0);
    }
    pc.input = past;
    pc.input_dims = static_dims(view.graph(), past, "KV cache input");
    *new_rows = concat.input(last - i);
    return pc;
  }
  return std::nullopt;
}

// The nodes besides `concat` that read the new K/V rows must only copy them to graph
// outputs (arcl's present.N.* rows).
std::vector<nf_node*> output_copies(const GraphView& view, const HeadBranch& b, const nf::Node& concat) {
  std::vector<nf_node*> r;
  for (const nf::Node& u : view.consumers(b.end)) {
    if (u.get() == concat.get()) continue;
    bool copy = (u.op_type() == "Identity" || u.op_type() == "Transpose") && view.is_output(u.output(0)) &&
                view.consumers(u.output(0)).empty();
    if (!copy) throw Reject("the new rows '" + b.end + "' also feed node '" + node_name(u) + "'");
    r.push_back(u.get());
  }
  return r;
}

// The operand of a score-chain node that carries the scores: the one shaped like the
// probabilities (the mask broadcasts over heads, scales are scalars).
std::string scores_operand(const GraphView& view, const nf::Node& n, const Dims& probs) {
  const size_t first = n.op_type() == "Where" ? 1 : 0;
  for (size_t i = first; i < n.input_count(); ++i) {
    const std::string in = n.input(i);
    if (in.empty() || view.is_initializer(in)) continue;
    auto t = nf::graph::get_value_type(view.graph(), in);
    if (t && t->dims && *t->dims == probs) return in;
  }
  return n.input(first);
}

// A [1, heads, rows, T] Softmax over T: the shape of attention probabilities.
bool attention_shaped(const GraphView& view, const nf::Node& softmax) {
  auto t = nf::graph::get_value_type(view.graph(), softmax.output(0));
  return t && t->dims && t->dims->size() == 4 && normalize_axis(softmax.attr_int("axis", -1), 4) == 3;
}

AttentionCore match_core(const GraphView& view, const nf::Node& softmax) {
  AttentionCore c;
  c.softmax = softmax.get();
  c.label = node_name(softmax);
  if (!attention_shaped(view, softmax)) throw Reject("not a [1, heads, rows, T] Softmax over T");
  Dims sd = static_dims(view.graph(), softmax.output(0), "attention probabilities");
  // Back to the score MatMul.
  std::vector<nf_node*> before;
  std::string v = softmax.input(0);
  for (int step = 0;; ++step) {
    auto p = view.producer(v);
    if (!p || step > 8) throw Reject("no score MatMul before the Softmax");
    if (p->op_type() == "MatMul") {
      c.score = p->get();
      break;
    }
    if (!kScoreOps.count(std::string(p->op_type())) || p->op_type() == "Softmax")
      throw Reject("node '" + node_name(*p) + "' (" + std::string(p->op_type()) + ") between the scores and the Softmax");
    before.push_back(p->get());
    v = scores_operand(view, *p, sd);
  }
  nf::Node score(c.score);
  if (view.is_initializer(score.input(0)) || view.is_initializer(score.input(1))) throw Reject("the score MatMul has a constant operand");
  // Forward to the value MatMul.
  std::vector<nf_node*> after;
  v = softmax.output(0);
  for (int step = 0;; ++step) {
    const auto& users = view.consumers(v);
    if (users.size() != 1 || step > 4) throw Reject("the probabilities do not reach one value MatMul");
    const nf::Node& u = users[0];
    if (u.op_type() == "MatMul" && u.input(0) == v) {
      c.value = u.get();
      break;
    }
    if (u.op_type() != "Cast" && u.op_type() != "Identity") throw Reject("node '" + node_name(u) + "' after the Softmax");
    after.push_back(u.get());
    v = u.output(0);
  }
  std::reverse(before.begin(), before.end());
  c.score_chain = before;
  c.score_chain.push_back(c.softmax);
  c.score_chain.insert(c.score_chain.end(), after.begin(), after.end());
  // Every chain node reads the previous value and shared operands (mask, scale) only, or an
  // operand with each head's own values on the head axis (ALiBi's slopes times positions).
  std::string prev = score.output(0);
  for (nf_node* p : c.score_chain) {
    nf::Node n(p);
    const auto& users = view.consumers(prev);
    if (users.size() != 1) throw Reject("the scores '" + prev + "' have other readers");
    for (const std::string& in : n.inputs()) {
      if (in == prev || in.empty()) continue;
      const Dims d = view.is_initializer(in) ? view.graph().initializer(in).dims() : static_dims(view.graph(), in, "operand");
      const int64_t head_axis = static_cast<int64_t>(d.size()) - 3;
      if (sd[1] > 1 && head_axis >= 0 && d[static_cast<size_t>(head_axis)] == sd[1]) c.per_head_operands.emplace_back(in, head_axis);
      else check_shared_operand(view, in, "node '" + node_name(n) + "'");
    }
    prev = n.output(0);
  }

  c.q = trace_branch(view, score.input(0));
  nf::Node value(c.value);
  std::string k_full = through_repeat_kv(view, score.input(1), true, &c.key_scales);
  std::string v_full = through_repeat_kv(view, value.input(1), false, &c.value_scales);
  for (auto [full, branch, past, outs] : {std::tuple{k_full, &c.k, &c.k_past, &c.k_outputs},
                                          std::tuple{v_full, &c.v, &c.v_past, &c.v_outputs}}) {
    std::string new_rows = full;
    auto prod = view.producer(full);
    if (prod) *past = past_of(view, *prod, &new_rows);
    *branch = trace_branch(view, new_rows);
    if (*past) *outs = output_copies(view, *branch, *prod);
    else if (view.consumers(branch->end).size() != 1 || view.is_output(branch->end))
      throw Reject("the uncached rows '" + branch->end + "' have other readers");
  }
  if (c.k.heads != c.v.heads || c.k.head_dim != c.q.head_dim || c.v.head_dim != c.q.head_dim)
    throw Reject("Q, K and V heads do not line up");
  if (c.q.heads % c.k.heads != 0) throw Reject("query heads are not a multiple of the KV heads");
  if (c.k_past.has_value() != c.v_past.has_value()) throw Reject("only one of K and V has a cache");
  return c;
}

}  // namespace

CoreSearch find_attention_cores(const GraphView& view) {
  CoreSearch s;
  for (const nf::Node& n : view.nodes()) {
    if (n.op_type() != "Softmax") continue;
    try {
      s.cores.push_back(match_core(view, n));
    } catch (const nf::Error& e) {
      // Includes values not typed yet (the copies an earlier rewrite of this graph made).
      s.rejected.push_back({node_name(n), e.what(), attention_shaped(view, n)});
    }
  }
  return s;
}

const AttentionCore* core_of_node(const std::vector<AttentionCore>& cores, const std::string& name) {
  for (const AttentionCore& c : cores)
    for (nf_node* n : {c.softmax, c.score, c.value})
      if (nf::Node(n).name() == name) return &c;
  return nullptr;
}

}  // namespace mha2sha
