// ONNX Runtime GenAI's model builder normalizes q and k per head (Qwen3's q_norm / k_norm,
// and every model it builds with them) on a view that folds the heads into the rows:
//   Reshape(q [b, rows, heads x d], [0, -1, d]) -> RMS norm over the last axis
//   -> Reshape(.., [0, -1, heads x d]) -> (the attention's) Reshape to [b, rows, heads, d]
// Each norm reads one (row, head) pair's d values alone, so the same ops on a
// [b, rows, heads, d] view compute the same numbers. This pass gives the span that view and
// lets the attention read it directly: the layout torch's exports have (the norm between the
// heads' view and their transpose), which the head-split matcher knows. A span is rewritten
// only when every node in it works along the last axis: element-wise ops whose other operands
// are constant along every other axis, and reductions of the last axis that keep it.
#include "row_head_views.h"

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/infer_shapes.h>

#include <set>

#include "graph_edit.h"

namespace mha2sha {
namespace {

const std::set<std::string> kElementwise{"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Cast", "Identity"};
const std::set<std::string> kReductions{"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2"};

struct Span {
  Dims heads_view;                   // [b, rows, heads, d]
  nf::Node entry;                    // the Reshape to [b, rows x heads, d]
  std::vector<nf::Node> nodes;       // the ops between
  std::vector<nf::Node> reductions;  // of them, the reductions
  std::vector<nf::Node> exits;       // Reshapes back to [b, rows, heads x d]
};

// The view Reshape(x [b, rows, heads x d]) -> [b, rows x heads, d] folds heads into rows.
std::optional<Dims> folds_heads(const nf::Graph& g, const nf::Node& n) {
  if (n.op_type() != "Reshape") return std::nullopt;
  auto in = known_dims(g, n.input(0)), out = known_dims(g, n.output(0));
  if (!in || !out || in->size() != 3 || out->size() != 3 || (*in)[0] != (*out)[0]) return std::nullopt;
  const int64_t rows = (*in)[1], width = (*in)[2], d = (*out)[2];
  if (d <= 0 || rows <= 0 || width % d != 0 || width / d < 2 || (*out)[1] != rows * (width / d)) return std::nullopt;
  return Dims{(*in)[0], rows, width / d, d};
}

// An operand from outside the span that broadcasts alike against [b, rows x heads, d] and
// [b, rows, heads, d]: every axis but the last has size 1 (a scalar, a [d] weight).
bool along_last_only(const nf::Graph& g, const std::string& v) {
  auto d = known_dims(g, v);
  if (!d) return false;
  for (size_t i = 0; i + 1 < d->size(); ++i)
    if ((*d)[i] != 1) return false;
  return true;
}

// Whether a Reshape reads [b, rows, heads, d] as it reads [b, rows x heads, d]: its target
// copies no input dim but the batch (a 0 elsewhere would).
bool rank_free_back(const nf::graph::GraphView& view, const nf::Node& n, const Dims& flat) {
  if (n.op_type() != "Reshape" || known_dims(view.graph(), n.output(0)) != flat) return false;
  const std::vector<int64_t> target = view.constant_ints(n.input(1));
  for (size_t i = 1; i < target.size(); ++i)
    if (target[i] == 0) return false;
  return !target.empty();
}

// The span from `entry`; nothing when a node in it does not work along the last axis alone.
std::optional<Span> span_from(const nf::graph::GraphView& view, const nf::Node& entry, const Dims& heads_view) {
  const nf::Graph& g = view.graph();
  const Dims flat{heads_view[0], heads_view[1], heads_view[2] * heads_view[3]};
  Span s{heads_view, entry, {}, {}, {}};
  std::set<std::string> inside{entry.output(0)};
  std::set<nf_node*> seen;
  std::vector<std::string> todo{entry.output(0)};
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    if (view.is_output(v)) return std::nullopt;
    for (const nf::Node& u : view.consumers(v)) {
      if (!seen.insert(u.get()).second) continue;
      if (rank_free_back(view, u, flat)) {
        s.exits.push_back(u);
        continue;
      }
      const std::string op(u.op_type());
      if (kReductions.count(op)) {
        const std::vector<int64_t> axes = axes_of(view, u);
        if (axes.size() != 1 || normalize_axis(axes[0], 3) != 2 || u.attr_int("keepdims", 1) != 1) return std::nullopt;
        s.reductions.push_back(u);
      } else if (!kElementwise.count(op)) {
        return std::nullopt;
      }
      s.nodes.push_back(u);
      for (const std::string& out : u.outputs()) {
        inside.insert(out);
        todo.push_back(out);
      }
    }
  }
  // Every operand from outside (a reduction's axes aside) must be constant along the rows and heads.
  for (const nf::Node& u : s.nodes)
    for (size_t i = 0; i < u.input_count(); ++i) {
      const std::string& in = u.input(i);
      const bool axes = i == 1 && kReductions.count(std::string(u.op_type()));
      if (!in.empty() && !inside.count(in) && !axes && !along_last_only(g, in)) return std::nullopt;
    }
  if (s.exits.empty()) return std::nullopt;
  return s;
}

}  // namespace

size_t row_head_views(nf::Graph g) {
  nf::graph::GraphView view(g);
  std::vector<Span> spans;
  for (const nf::Node& n : view.nodes())
    if (auto heads_view = folds_heads(g, n))
      if (auto s = span_from(view, n, *heads_view)) spans.push_back(std::move(*s));
  if (spans.empty()) return 0;
  GraphEditor ed(g, "/mha2sha/row_head_view/");
  for (Span& s : spans) {
    s.entry.set_input(1, ed.int64_constant(s.heads_view));
    for (nf::Node& r : s.reductions) {  // the last axis is 3 now: name it from the end
      if (r.input_count() > 1 && !r.input(1).empty()) r.set_input(1, ed.int64_constant({-1}));
      else r.set_attr("axes", std::vector<int64_t>{-1});
    }
  }
  nf::graph::infer_shapes(g);  // the spans' values are rank 4 now
  // The attention views each exit as [b, rows, heads, d] again: it reads the span's end instead.
  view.refresh();
  for (const Span& s : spans)
    for (const nf::Node& back : s.exits)
      for (const nf::Node& again : std::vector<nf::Node>(view.consumers(back.output(0))))
        if (again.op_type() == "Reshape" && known_dims(g, again.output(0)) == s.heads_view)
          view.replace_uses(again.output(0), back.input(0));
  return finish_rewrite(g, spans.size());
}

}  // namespace mha2sha
