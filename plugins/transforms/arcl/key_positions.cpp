#include "key_positions.h"

#include <npuforge/decoder_io.hpp>

#include <cstring>

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
    // The count has the dtype of what it sums: the mask, or the mask after a Cast.
    nf_dtype dtype = mask_dtype;
    if (cumsum->input(0) != source_mask) {
      auto cast = view.producer(cumsum->input(0));
      if (!cast || cast->op_type() != "Cast" || cast->input(0) != source_mask)
        throw nf::Error("arcl: '" + std::string(cumsum->name()) + "' sums something computed from attention_mask; "
                        "only the mask itself (or its Cast) maps to key_positions");
      dtype = static_cast<nf_dtype>(cast->attr_int("to", 0));
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

}  // namespace arcl
