// Baichuan2 cuts its fused projection as
//   proj.unflatten(-1, (3, hidden)).unsqueeze(0).transpose(0, -2).squeeze(-2)[i]
// : Reshape [1, rows, 3, hidden], Unsqueeze, Transpose, Squeeze, then a Gather of part i on
// the axis that holds the 3. Whatever the axis moves, part i is columns [i * hidden,
// (i + 1) * hidden) of the projection when the result keeps rows before width: the Slice of
// W's columns the matcher reads for Phi-3's qkv_proj. This pass follows each axis of the
// [1, rows, parts, width] view through Unsqueeze / Transpose / Squeeze and, when every reader
// of the last value is such a Gather giving [1, rows, width], replaces each by that Slice.
#include "part_views.h"

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/value_types.h>

#include "graph_edit.h"

namespace mha2sha {
namespace {

enum class Axis { batch, rows, parts, width, unit };

// Moves `axes` / `dims` through one Unsqueeze, Transpose or Squeeze; false when it cannot.
bool follow(const nf::graph::GraphView& view, const nf::Node& n, std::vector<Axis>& axes, Dims& dims) {
  const std::string op(n.op_type());
  if (op == "Transpose") {
    Dims perm = n.attr_ints("perm");
    if (perm.empty())
      for (int64_t i = static_cast<int64_t>(axes.size()) - 1; i >= 0; --i) perm.push_back(i);
    if (perm.size() != axes.size()) return false;
    std::vector<Axis> a;
    Dims d;
    for (int64_t p : perm) {
      a.push_back(axes[static_cast<size_t>(p)]);
      d.push_back(dims[static_cast<size_t>(p)]);
    }
    axes = a, dims = d;
    return true;
  }
  if (op == "Unsqueeze") {
    std::vector<int64_t> at = axes_of(view, n);
    const int64_t rank = static_cast<int64_t>(axes.size() + at.size());
    for (int64_t& x : at) x = normalize_axis(x, rank);
    std::sort(at.begin(), at.end());
    for (int64_t x : at) {
      axes.insert(axes.begin() + x, Axis::unit);
      dims.insert(dims.begin() + x, 1);
    }
    return true;
  }
  if (op == "Squeeze") {
    std::vector<int64_t> at = axes_of(view, n);
    if (at.empty())
      for (size_t i = 0; i < dims.size(); ++i)
        if (dims[i] == 1) at.push_back(static_cast<int64_t>(i));
    for (int64_t& x : at) x = normalize_axis(x, static_cast<int64_t>(axes.size()));
    std::sort(at.rbegin(), at.rend());
    for (int64_t x : at) {
      if (dims[static_cast<size_t>(x)] != 1) return false;
      axes.erase(axes.begin() + x);
      dims.erase(dims.begin() + x);
    }
    return true;
  }
  return false;
}

}  // namespace

size_t part_views(nf::Graph g) {
  nf::graph::GraphView view(g);
  GraphEditor ed(g, "/mha2sha/part_view/");
  struct Cut {
    std::string projection;  // [1, rows, parts * width]
    int64_t width = 0;
    std::vector<std::pair<int64_t, nf::Node>> gathers;  // (part, Gather)
  };
  std::vector<Cut> found;  // found first: the rewrite removes nodes the view still lists
  for (const nf::Node& r : view.nodes()) {
    if (r.op_type() != "Reshape") continue;
    auto in = known_dims(g, r.input(0)), out = known_dims(g, r.output(0));
    if (!in || !out || in->size() != 3 || out->size() != 4 || (*in)[0] != 1 || (*out)[0] != 1 || (*out)[1] != (*in)[1] ||
        (*out)[2] < 2 || (*out)[2] * (*out)[3] != (*in)[2])
      continue;
    std::vector<Axis> axes{Axis::batch, Axis::rows, Axis::parts, Axis::width};
    Dims dims = *out;
    std::string v = r.output(0);
    bool ok = true;
    for (int hops = 0; ok && hops < 8; ++hops) {
      const auto& users = view.consumers(v);
      if (users.size() != 1 || users[0].op_type() == "Gather" || view.is_output(v)) break;
      ok = follow(view, users[0], axes, dims);
      v = users[0].output(0);
    }
    // What a part keeps must have rows before width for its bytes to be the Slice's.
    std::vector<Axis> rest;
    for (Axis a : axes)
      if (a == Axis::rows || a == Axis::width) rest.push_back(a);
    const auto& readers = view.consumers(v);
    Cut cut{r.input(0), (*out)[3], {}};
    ok &= !readers.empty() && !view.is_output(v) && rest == std::vector<Axis>{Axis::rows, Axis::width};
    for (const nf::Node& u : readers) {
      if (!ok) break;
      const std::optional<int64_t> index = scalar_index(view, u);
      const int64_t axis = normalize_axis(u.attr_int("axis", 0), static_cast<int64_t>(axes.size()));
      ok = index && u.input(0) == v && axes[static_cast<size_t>(axis)] == Axis::parts && *index >= 0 &&
           *index < (*out)[2] && known_dims(g, u.output(0)) == Dims{1, (*out)[1], (*out)[3]};
      if (ok) cut.gathers.emplace_back(*index, u);
    }
    if (ok) found.push_back(std::move(cut));
  }
  size_t rewritten = 0;
  for (const Cut& cut : found)
    for (auto [part, gather] : cut.gathers) {
      ed.replace_by_slice(gather, cut.projection, part * cut.width, (part + 1) * cut.width, 2);
      ++rewritten;
    }
  return finish_rewrite(g, rewritten);
}

}  // namespace mha2sha
