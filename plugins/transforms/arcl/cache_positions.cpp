#include "cache_positions.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/value_types.h>

namespace arcl {

size_t read_cache_positions(nf::Graph g, nf::graph::UniqueNames& names, const ModelInfo& info) {
  nf::graph::GraphView view(g);
  auto from_cache_length = [&](const std::string& start) {
    if (!view.computed_without_inputs(start)) return false;
    const auto from = view.upstream(start);
    for (int64_t l = 0; l < info.layers; ++l)
      if (from.count(info.past_key(l)) || from.count(info.past_value(l))) return true;
    return false;
  };
  std::string row;  // position_ids as a 1-D int64 row
  size_t replaced = 0;
  for (nf::Node range : view.nodes()) {
    if (range.op_type() != "Range" || range.input_count() != 3 || !from_cache_length(range.input(0))) continue;
    const auto step = view.constant_ints(range.input(2));
    if (step.size() != 1 || step[0] != 1) continue;
    if (row.empty()) {
      const std::string shape = names.make("position_ids.row_shape");
      nf::graph::set_int64_initializer(g, shape, {-1});
      row = names.make("position_ids.row");
      g.add_node("Reshape", {nf::decoder::kPositionIds, shape}, {row}, names.make("/arcl/position_ids/Reshape"));
    }
    std::string positions = row;
    auto type = nf::graph::get_value_type(g, range.input(0));
    if (type && type->dtype != NF_DTYPE_UNDEFINED && type->dtype != NF_DTYPE_INT64) {
      positions = names.make("position_ids.row_cast");
      g.add_node("Cast", {row}, {positions}, names.make("/arcl/position_ids/Cast")).set_attr("to", int64_t{type->dtype});
    }
    const std::string out = range.output(0);
    g.remove_node(range);
    view.refresh();
    view.replace_uses(out, positions);
    ++replaced;
  }
  return replaced;
}

}  // namespace arcl
