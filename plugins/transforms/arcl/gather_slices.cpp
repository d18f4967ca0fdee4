#include "gather_slices.h"

#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>
#include <npuforge/graph/value_types.h>

namespace arcl {
namespace {

using Dims = std::vector<int64_t>;

std::optional<Dims> dims_of(const nf::Graph& g, const std::string& v) {
  auto t = nf::graph::get_value_type(g, v);
  if (!t || !t->dims) return std::nullopt;
  return *t->dims;
}

}  // namespace

size_t gather_slices(nf::Graph g) {
  nf::graph::GraphView view(g);
  nf::graph::UniqueNames names(g);
  size_t rewritten = 0;
  for (const nf::Node& n : view.nodes()) {
    if (n.op_type() != "GatherElements" || n.input_count() != 2) continue;
    auto data = dims_of(g, n.input(0)), index = dims_of(g, n.input(1));
    auto spread = view.producer(n.input(1));
    if (!data || !index || !spread || (spread->op_type() != "Tile" && spread->op_type() != "Expand")) continue;
    auto positions = dims_of(g, spread->input(0));
    const int64_t rank = static_cast<int64_t>(data->size());
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (!positions || static_cast<int64_t>(index->size()) != rank || static_cast<int64_t>(positions->size()) != rank ||
        axis < 0 || axis >= rank || (*positions)[axis] != (*index)[axis])
      continue;
    bool slices = true;  // one position per slot along `axis`, covering data's other axes
    for (int64_t a = 0; a < rank; ++a)
      if (a != axis && ((*positions)[a] != 1 || (*index)[a] != (*data)[a])) slices = false;
    if (!slices) continue;
    const int64_t count = (*index)[axis];
    const std::string shape = names.make(std::string(n.name()) + "/positions_shape");
    nf::graph::set_int64_initializer(g, shape, {count});
    const std::string flat = names.make(spread->input(0) + "/flat");
    g.add_node("Reshape", {spread->input(0), shape}, {flat}, names.make(std::string(n.name()) + "/Reshape"));
    auto pos_type = nf::graph::get_value_type(g, spread->input(0));
    nf::graph::set_value_type(g, flat, pos_type->dtype, {count});
    const std::vector<std::string> gather_in{n.input(0), flat}, gather_out{n.output(0)};
    const std::string label = std::string(n.name());
    g.remove_node(n);
    g.add_node("Gather", gather_in, gather_out, label).set_attr("axis", axis);
    ++rewritten;
  }
  if (rewritten) {
    g.sort();
    nf::graph::eliminate_dead_nodes(g);
  }
  return rewritten;
}

}  // namespace arcl
