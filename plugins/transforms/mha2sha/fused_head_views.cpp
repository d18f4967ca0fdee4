// Bloom views its fused projection as [b, rows, heads, 3, head_dim], takes q, k and v with a
// Gather of index 0, 1, 2 on axis 3 and moves each one's heads first (transpose(1, 2)).
// GPT-NeoX lays out the same columns (each head's q, k and v side by side), views them as
// [b, rows, heads, 3 * head_dim], moves the heads first once and cuts q, k and v with a Slice
// of the last axis: the form the head-split matcher reads (head_stride). This pass rewrites
// the first form into the second, the same bytes.
#include "fused_head_views.h"

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/value_types.h>

#include "graph_edit.h"

namespace mha2sha {

size_t fused_head_views(nf::Graph g) {
  nf::graph::GraphView view(g);
  GraphEditor ed(g, "/mha2sha/fused_head_view/");
  // Found first: the rewrite removes nodes the view still lists.
  struct Found {
    nf::Node view5;  // the [1, rows, heads, parts, head_dim] Reshape
    Dims dims;
    nf_dtype dtype;
    std::vector<std::pair<int64_t, nf::Node>> parts;  // (i, the Transpose after Gather i)
  };
  std::vector<Found> found;
  for (const nf::Node& r : view.nodes()) {
    if (r.op_type() != "Reshape") continue;
    auto t = nf::graph::get_value_type(g, r.output(0));
    if (!t || !t->dims || t->dims->size() != 5 || (*t->dims)[0] != 1) continue;
    const Dims d = *t->dims;  // [1, rows, heads, parts, head_dim]
    const std::vector<nf::Node>& readers = view.consumers(r.output(0));
    // Each reader: Gather(view, scalar i, axis 3) -> Transpose(0, 2, 1, 3).
    std::vector<std::pair<int64_t, nf::Node>> parts;  // (i, the Transpose)
    bool parts_only = !readers.empty() && !view.is_output(r.output(0));
    for (const nf::Node& u : readers) {
      const std::optional<int64_t> index = scalar_index(view, u);
      const std::vector<nf::Node>& next = view.consumers(u.output(0));
      parts_only &= index && u.input(0) == r.output(0) && normalize_axis(u.attr_int("axis", 0), 5) == 3 && *index >= 0 &&
                    *index < d[3] && !view.is_output(u.output(0)) && next.size() == 1 &&
                    next[0].op_type() == "Transpose" && next[0].attr_ints("perm") == Dims{0, 2, 1, 3};
      if (parts_only) parts.emplace_back(*index, next[0]);
    }
    if (parts_only) found.push_back({r, d, t->dtype, parts});
  }
  size_t rewritten = 0;
  for (const auto& [r, d, dtype, parts] : found) {
    const Dims flat{1, d[1], d[2], d[3] * d[4]}, heads_first{1, d[2], d[1], d[3] * d[4]}, part{1, d[2], d[1], d[4]};
    const std::string flat_view = ed.fresh(r.output(0) + "/heads"), moved = ed.fresh(r.output(0) + "/heads_first");
    ed.add("Reshape", {r.input(0), ed.int64_constant(flat)}, {flat_view}, std::string(r.name()));
    ed.add("Transpose", {flat_view}, {moved}, std::string(r.name()) + "/heads_first").set_attr("perm", Dims{0, 2, 1, 3});
    nf::graph::set_value_type(g, flat_view, dtype, flat);
    nf::graph::set_value_type(g, moved, dtype, heads_first);
    for (auto [i, transpose] : parts) {
      const std::string out = transpose.output(0);
      ed.replace_by_slice(transpose, moved, i * d[4], (i + 1) * d[4], 3);
      nf::graph::set_value_type(g, out, dtype, part);
      ++rewritten;
    }
  }
  return finish_rewrite(g, rewritten);
}

}  // namespace mha2sha
