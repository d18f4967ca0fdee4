// GPT-BigCode (transformers >= 4.54, multi-query) cuts its fused projection as
//   q, k, v = Split(Unsqueeze(x [1, rows, cols], axes [1]), axis 3)
// so the queries reach their head view as [1, 1, rows, E] and the one KV head's key and
// value are [1, 1, rows, head_dim] with no head view or transpose at all. Every other family
// writes the cut on [1, rows, cols], a Reshape to [1, rows, heads, head_dim] and a
// Transpose(0, 2, 1, 3); this pass rewrites GPT-BigCode's form into that one (same bytes):
// the cut reads x on its last axis, a Reshape of a cut output reads it directly, and any
// other reader gets Transpose(Reshape(cut [1, rows, c] -> [1, rows, 1, c]), (0, 2, 1, 3)),
// which is the Unsqueeze.
#include "unit_head_views.h"

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/value_types.h>

#include "graph_edit.h"

namespace mha2sha {
namespace {

// Whether the cut takes only the last axis of a rank-4 value: by Split's attribute, or a
// Slice's constant axes with unit steps.
bool cuts_last_of_four(const nf::graph::GraphView& view, const nf::Node& cut) {
  if (cut.op_type() == "Split") return normalize_axis(cut.attr_int("axis", 0), 4) == 3;
  if (cut.op_type() != "Slice" || cut.input_count() < 4) return false;
  std::vector<int64_t> axes = view.constant_ints(cut.input(3));
  if (axes.size() != 1 || normalize_axis(axes[0], 4) != 3) return false;
  return cut.input_count() < 5 || cut.input(4).empty() || view.constant_ints(cut.input(4)) == std::vector<int64_t>{1};
}

// A Reshape whose target shape is constant and holds no 0 (which would copy an input dim
// and so depend on the input's rank): it reads [1, rows, c] as it reads [1, 1, rows, c].
bool rank_free_reshape(const nf::graph::GraphView& view, const nf::Node& n) {
  if (n.op_type() != "Reshape" || !view.is_initializer(n.input(1))) return false;
  for (int64_t d : view.constant_ints(n.input(1)))
    if (d == 0) return false;
  return true;
}

}  // namespace

size_t unit_head_views(nf::Graph g) {
  nf::graph::GraphView view(g);
  GraphEditor ed(g, "/mha2sha/unit_head_view/");
  // Found first: the rewrite removes nodes the view still lists.
  std::vector<std::pair<nf::Node, nf::Node>> found;  // (Unsqueeze, cut)
  for (const nf::Node& u : view.nodes()) {
    if (u.op_type() != "Unsqueeze" || u.input_count() != 2 || view.constant_ints(u.input(1)) != std::vector<int64_t>{1})
      continue;
    auto x = known_dims(g, u.input(0));
    const std::vector<nf::Node>& readers = view.consumers(u.output(0));
    if (x && x->size() == 3 && (*x)[0] == 1 && readers.size() == 1 && cuts_last_of_four(view, readers[0]) &&
        readers[0].input(0) == u.output(0))
      found.emplace_back(u, readers[0]);
  }
  for (const auto& [u, cut] : found) {
    // The cut on x's last axis, one [1, rows, c] value per output.
    std::vector<std::string> flat_outs, old_outs;
    for (size_t i = 0; i < cut.output_count(); ++i) {
      old_outs.push_back(cut.output(i));
      flat_outs.push_back(ed.fresh(cut.output(i) + "/rows"));
    }
    std::vector<std::string> cut_in;
    for (size_t i = 0; i < cut.input_count(); ++i) cut_in.push_back(cut.input(i));
    cut_in[0] = u.input(0);
    if (cut.op_type() == "Slice") cut_in[3] = ed.int64_constant({2});
    nf::Node flat = ed.clone(cut, cut_in, flat_outs, std::string(cut.name()));
    if (cut.op_type() == "Split") flat.set_attr("axis", int64_t{2});
    const nf_dtype dtype = nf::graph::get_value_type(g, u.input(0))->dtype;
    for (size_t i = 0; i < old_outs.size(); ++i) {
      auto d4 = known_dims(g, old_outs[i]);
      if (!d4 || d4->size() != 4) throw nf::Error("mha2sha: '" + old_outs[i] + "' has no static 4-D shape");
      const Dims rows_cols{1, (*d4)[2], (*d4)[3]};
      nf::graph::set_value_type(g, flat_outs[i], dtype, rows_cols);
      bool others = false;
      for (nf::Node r : view.consumers(old_outs[i])) {
        if (!rank_free_reshape(view, r)) {
          others = true;
          continue;
        }
        r.set_input(0, flat_outs[i]);
      }
      if (!others && !view.is_output(old_outs[i])) continue;
      // The Unsqueeze itself, as a one-head view and its transpose.
      const Dims one_head_dims{1, (*d4)[2], 1, (*d4)[3]};
      const std::string one_head = ed.reshape(flat_outs[i], rows_cols, one_head_dims, "one_head");
      nf::graph::set_value_type(g, one_head, dtype, one_head_dims);
      ed.add("Transpose", {one_head}, {old_outs[i]}, "heads_first").set_attr("perm", std::vector<int64_t>{0, 2, 1, 3});
    }
    g.remove_node(cut);
  }
  return finish_rewrite(g, found.size());
}

}  // namespace mha2sha
