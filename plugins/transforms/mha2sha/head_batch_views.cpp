// Bloom computes attention on [batch * heads, rows, d]: q, k and v are reshaped from
// [b, heads, rows, d] to 3-D before the scores, the scores viewed back to 4-D around the
// mask, and the probabilities and context flattened again. In a static batch-1 graph each of
// those views only drops or restores a leading axis of size 1, so the span between them runs
// the same on the 4-D values: MatMul and element-wise ops broadcast from the right, and a
// Transpose or Softmax keeps its meaning with its axes moved by one. This pass removes the
// views and lifts the span (whole, or not at all), leaving heads on axis 1 as everywhere else.
#include "head_batch_views.h"

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/infer_shapes.h>
#include <npuforge/graph/value_types.h>

#include <set>

#include "graph_edit.h"

namespace mha2sha {
namespace {

// A Reshape from [1, x...] to [x...] (drops = true) or from [x...] to [1, x...].
bool unit_view(const nf::Graph& g, const nf::Node& n, bool drops) {
  if (n.op_type() != "Reshape") return false;
  auto in = known_dims(g, n.input(0)), out = known_dims(g, n.output(0));
  if (!in || !out) return false;
  const Dims& big = drops ? *in : *out;
  const Dims& small = drops ? *out : *in;
  return big.size() == 4 && big.size() == small.size() + 1 && big[0] == 1 && Dims(big.begin() + 1, big.end()) == small;
}

const std::set<std::string> kElementwise{"Add", "Sub", "Mul", "Div", "Cast", "Where", "Identity"};

struct Span {
  std::vector<nf::Node> entries, exits, transposes, softmaxes;
  bool ok = true;  // every node of the span keeps its meaning at rank 4
};

// Everything computed from the 3-D values of `entry` up to views back to 4-D.
void grow(const nf::graph::GraphView& view, const nf::Node& entry, Span& s, std::set<nf_node*>& seen) {
  std::vector<std::string> todo{entry.output(0)};
  s.entries.push_back(entry);
  seen.insert(entry.get());
  while (!todo.empty() && s.ok) {
    const std::string v = todo.back();
    todo.pop_back();
    if (view.is_output(v)) s.ok = false;
    for (const nf::Node& u : view.consumers(v)) {
      if (!seen.insert(u.get()).second) continue;
      const std::string op(u.op_type());
      if (unit_view(view.graph(), u, false)) {
        s.exits.push_back(u);
        continue;
      }
      if (op == "Transpose") s.transposes.push_back(u);
      else if (op == "Softmax") s.softmaxes.push_back(u);
      else if (op != "MatMul" && !kElementwise.count(op)) s.ok = false;
      for (const std::string& out : u.outputs()) todo.push_back(out);
    }
  }
}

}  // namespace

size_t head_batch_views(nf::Graph g) {
  nf::graph::GraphView view(g);
  // One span for the graph: q, k and v enter through their own views and meet at the
  // MatMuls, so the span is lifted whole or left as it is.
  std::set<nf_node*> seen;
  Span s;
  for (const nf::Node& n : view.nodes())
    if (!seen.count(n.get()) && unit_view(g, n, true)) grow(view, n, s, seen);
  if (!s.ok || s.exits.empty()) return 0;
  for (nf::Node& t : s.transposes) {
    Dims perm{0};
    for (int64_t p : t.attr_ints("perm", {2, 1, 0})) perm.push_back(p + 1);
    t.set_attr("perm", perm);
  }
  for (nf::Node& sm : s.softmaxes)
    if (int64_t axis = sm.attr_int("axis", -1); axis >= 0) sm.set_attr("axis", axis + 1);
  size_t removed = 0;
  for (std::vector<nf::Node>* views : {&s.entries, &s.exits})
    for (nf::Node& r : *views) {
      view.replace_uses(r.output(0), r.input(0));
      ++removed;
    }
  finish_rewrite(g, removed);
  nf::graph::infer_shapes(g);  // the span's values are rank 4 now
  return removed;
}

}  // namespace mha2sha
