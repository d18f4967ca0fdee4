#include "key_positions.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/value_types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

namespace arcl {
namespace {

nf::Tensor filled(nf_dtype dtype, const std::vector<int64_t>& dims, int64_t value) {
  nf::Tensor t = nf::Tensor::create(dtype, dims);
  const size_t n = static_cast<size_t>(t.numel());
  if (dtype == NF_DTYPE_INT64) {
    auto* p = static_cast<int64_t*>(t.mutable_data());
    std::fill(p, p + n, value);
  } else if (dtype == NF_DTYPE_INT32) {
    auto* p = static_cast<int32_t*>(t.mutable_data());
    std::fill(p, p + n, static_cast<int32_t>(value));
  } else if (dtype == NF_DTYPE_FLOAT32) {
    auto* p = static_cast<float*>(t.mutable_data());
    std::fill(p, p + n, static_cast<float>(value));
  } else if (dtype == NF_DTYPE_BOOL) {
    std::memset(t.mutable_data(), value ? 1 : 0, n);
  } else {
    throw nf::Error("arcl: attention_mask of an unsupported dtype feeds the ALiBi positions");
  }
  return t;
}

}  // namespace

bool read_key_positions(nf::Graph g, nf::graph::GraphView& view, nf::graph::UniqueNames& names,
                        const std::vector<LayerSites>& sites, const std::string& source_mask, nf_dtype mask_dtype,
                        int64_t cl) {
  // The bias's data (where the count is) and everything it borrows shapes from (the mask's
  // length), which must read the mask's static stand-in too.
  std::set<std::string> bias_data, bias_values;
  for (const LayerSites& site : sites)
    for (const MaskUse& use : site.position_biases) {
      const std::string& bias = nf::Node(use.add).input(use.mask_slot);
      auto data = view.upstream(bias, false), all = view.upstream(bias);
      bias_data.insert(data.begin(), data.end());
      bias_values.insert(all.begin(), all.end());
    }
  if (bias_data.empty()) return false;

  using nf::decoder::kKeyPositions;
  std::string plus_one;  // key_positions + 1: what the cumulative count of a full mask gives
  for (const std::string& v : bias_data) {
    auto cumsum = view.producer(v);
    if (!cumsum || cumsum->op_type() != "CumSum" || !view.upstream(cumsum->input(0)).count(source_mask)) continue;
    const auto axis = view.constant_ints(cumsum->input(1));
    if (axis.size() != 1 || (axis[0] != -1 && axis[0] != 1) || cumsum->attr_int("exclusive", 0) ||
        cumsum->attr_int("reverse", 0))
      throw nf::Error("arcl: '" + std::string(cumsum->name()) +
                      "' counts positions from attention_mask other than as an inclusive sum along the keys");
    // The count has the dtype of what it sums: the mask, or the mask after Casts (the last
    // one's type).
    nf_dtype dtype = mask_dtype;
    bool cast_seen = false;
    for (std::string v = cumsum->input(0); v != source_mask;) {
      auto cast = view.producer(v);
      if (!cast || cast->op_type() != "Cast")
        throw nf::Error("arcl: '" + std::string(cumsum->name()) + "' sums something computed from attention_mask; "
                        "only the mask itself (or its Casts) maps to key_positions");
      if (!cast_seen) dtype = static_cast<nf_dtype>(cast->attr_int("to", 0)), cast_seen = true;
      v = cast->input(0);
    }
    if (plus_one.empty()) {
      const std::string one = names.make("key_positions.one");
      g.set_initializer(one, filled(NF_DTYPE_INT64, {}, 1));
      plus_one = names.make("key_positions.plus_one");
      g.add_node("Add", {kKeyPositions, one}, {plus_one}, names.make("/arcl/key_positions/Add"));
    }
    std::string counted = plus_one;
    if (dtype != NF_DTYPE_INT64) {
      counted = names.make("key_positions.plus_one.cast");
      g.add_node("Cast", {plus_one}, {counted}, names.make("/arcl/key_positions/Cast")).set_attr("to", int64_t{dtype});
    }
    view.refresh();
    view.replace_uses(cumsum->output(0), counted);
  }
  if (plus_one.empty())
    throw nf::Error("arcl: a bias added to the attention scores is computed from attention_mask without counting "
                    "positions along it; it has no place in the static layout");

  // What else of the bias reads the mask (padding factor, shapes) sees every column as a key.
  const std::string ones = names.make("attention_mask.all_keys");
  g.set_initializer(ones, filled(mask_dtype, {1, cl}, 1));
  view.refresh();
  for (nf::Node user : std::vector<nf::Node>(view.consumers(source_mask))) {
    bool in_bias = false;
    for (const std::string& out : user.outputs()) in_bias |= bias_values.count(out) != 0;
    if (!in_bias) continue;
    for (size_t i = 0; i < user.input_count(); ++i)
      if (user.input(i) == source_mask) user.set_input(i, ones);
  }
  view.refresh();
  return true;
}

bool bias_from_key_positions(nf::Graph g, const std::vector<SlotBias>& biases, int64_t cl, const std::string& what) {
  nf::graph::UniqueNames names(g);
  std::map<size_t, std::string> positions_of_rank;  // key_positions as float [1, .., 1, cl]
  for (const auto& [add_name, slot, mask] : biases) {
    std::optional<nf::Node> add;
    for (const nf::Node& n : g.nodes())
      if (n.name() == add_name) add = n;
    if (!add) throw nf::Error(what + ": the scores' Add '" + add_name + "' is gone after folding");
    const std::string bias = add->input(slot);
    const nf::Tensor t = g.initializer(bias);
    const std::vector<int64_t> d = t ? t.dims() : std::vector<int64_t>{};
    auto refuse = [&](const std::string& why) {
      throw nf::Error(what + ": '" + bias + "', added to the scores, is computed from constants cut to the key length (a "
                      "position bias from a buffer, as MPT's ALiBi) and " + why + "; in the static layout a cache slot is "
                      "not a position");
    };
    if (!t || t.dtype() != NF_DTYPE_FLOAT32 || d.size() < 2 || d.back() != cl) refuse("did not fold to float32 [.., " + std::to_string(cl) + "]");
    const int64_t cols = d.back(), rows = t.numel() / cols;
    const float* v = t.data_as<float>();
    if (std::all_of(v, v + t.numel(), [](float x) { return x == 0.f || x <= -1e4f; })) {
      add->set_input(slot, mask);
      continue;
    }
    // A slope per row (every axis but the last).
    std::vector<float> slopes(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = v + r * cols;
      const float s = cols > 1 ? row[1] - row[0] : 0.f;
      for (int64_t j = 0; j < cols; ++j)
        if (std::abs(row[j] - (row[0] + s * static_cast<float>(j))) > 1e-3f * (1.f + std::abs(row[j])))
          refuse("is not linear along the keys");
      slopes[static_cast<size_t>(r)] = s;
    }
    std::vector<int64_t> slope_dims = d;
    slope_dims.back() = 1;
    nf::Tensor slope_t = nf::Tensor::create(NF_DTYPE_FLOAT32, slope_dims);
    std::copy(slopes.begin(), slopes.end(), slope_t.mutable_as<float>());
    const std::string slope_name = names.make(bias + ".slopes");
    g.set_initializer(slope_name, slope_t);
    std::vector<int64_t> pos_dims(d.size(), 1);
    pos_dims.back() = cl;
    std::string& positions = positions_of_rank[d.size()];
    if (positions.empty()) {
      const std::string as_float = names.make("key_positions.float"), shape = names.make("key_positions.shape");
      positions = names.make("key_positions.keys");
      g.add_node("Cast", {nf::decoder::kKeyPositions}, {as_float}, names.make("/arcl/key_positions/Cast"))
          .set_attr("to", int64_t{NF_DTYPE_FLOAT32});
      nf::graph::set_int64_initializer(g, shape, pos_dims);
      g.add_node("Reshape", {as_float, shape}, {positions}, names.make("/arcl/key_positions/Reshape"));
      g.set_value_type(as_float, NF_DTYPE_FLOAT32, {1, cl});
      g.set_value_type(positions, NF_DTYPE_FLOAT32, pos_dims);
    }
    const std::string by_position = names.make(bias + ".by_key_position");
    g.add_node("Mul", {slope_name, positions}, {by_position}, names.make("/arcl/key_positions/Mul"));
    g.set_value_type(by_position, NF_DTYPE_FLOAT32, d);
    add->set_input(slot, by_position);
  }
  g.sort();
  return !positions_of_rank.empty();
}

}  // namespace arcl
