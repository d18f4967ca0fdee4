#include "static_variant.h"

#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/make_static.h>
#include <npuforge/graph/unique_names.h>
#include <npuforge/graph/value_types.h>
#include <npuforge/graph_roles.hpp>

#include <algorithm>
#include <set>

#include "attention_sites.h"
#include "cache_positions.h"
#include "gather_slices.h"
#include "key_positions.h"
#include "length_switches.h"

namespace arcl {
namespace {

using Dims = std::vector<int64_t>;

bool uses_sliding_cache(const Variant& v, const ModelInfo& info, int64_t layer) {
  return v.scl.has_value() && info.is_sliding(layer);
}

// Sliding layers read their own mask whenever they cannot share attention_mask: with a
// shorter sliding cache, or when some layers attend to the full context.
bool uses_sliding_mask(const Variant& v, const ModelInfo& info, int64_t layer) {
  if (!info.is_sliding(layer)) return false;
  return v.scl.has_value() || static_cast<int64_t>(info.sliding_layers.size()) < info.layers;
}

// From the htp IO layout to the graph's [1, kv_heads, len, head_dim] and back; both
// permutations are their own inverse.
const Dims kHtpKeyPerm{1, 0, 3, 2};
const Dims kHtpValuePerm{1, 0, 2, 3};

struct KvRewrite {
  nf::Graph g;
  nf::graph::GraphView& view;
  nf::graph::UniqueNames& names;
  bool htp;

  // Past input -> Concat as before (through a Transpose for htp); the present output
  // becomes only the new rows, and the Concat's users read a renamed full value.
  // Identity and Cast-to-the-cache's-dtype nodes from the Concat to the present output
  // (Phi-2's `key_states.to(torch.float32)`, which torch names as the output): dropped, so
  // the Concat's value is the full cache its readers see. False when there is no such chain.
  bool drop_noop_chain(const std::string& full, const std::string& past, const std::string& present) {
    auto past_type = nf::graph::get_value_type(g, past);
    std::vector<nf::Node> chain;
    for (std::string v = present; v != full;) {
      auto p = view.producer(v);
      const bool noop = p && chain.size() < 8 && (p->op_type() == "Identity" ||
                              (p->op_type() == "Cast" && past_type && p->attr_int("to", 0) == past_type->dtype));
      if (!noop || p->input_count() != 1) return false;
      chain.push_back(*p);
      v = p->input(0);
    }
    for (const nf::Node& n : chain) {
      for (nf::Node user : view.consumers(n.output(0)))
        for (size_t i = 0; i < user.input_count(); ++i)
          if (user.input(i) == n.output(0)) user.set_input(i, full);
      g.remove_node(n);
    }
    view.refresh();
    return !chain.empty();
  }

  void rewrite(const KvConcat& kv, const std::string& past, const std::string& present, bool is_key) {
    if ((!view.is_output(kv.full) || kv.full != present) && !drop_noop_chain(kv.full, past, present))
      throw nf::Error("arcl: the Concat after '" + past + "' should produce the graph output '" + present + "'");
    nf::Node concat(kv.concat);
    const Dims& perm = is_key ? kHtpKeyPerm : kHtpValuePerm;
    if (htp) {
      std::string hf_past = names.make(past + ".hf_layout");
      g.add_node("Transpose", {past}, {hf_past}, names.make("/arcl/" + past + "/Transpose")).set_attr("perm", perm);
      // The Concat and any Shape reading the cache keep seeing the hf layout.
      for (nf::Node user : view.consumers(past))
        for (size_t i = 0; i < user.input_count(); ++i)
          if (user.input(i) == past) user.set_input(i, hf_past);
    }
    std::string full = names.make(present + ".all_rows");
    for (nf::Node user : view.consumers(kv.full))
      for (size_t i = 0; i < user.input_count(); ++i)
        if (user.input(i) == kv.full) user.set_input(i, full);
    concat.set_output(0, full);
    if (htp)
      g.add_node("Transpose", {kv.new_rows}, {present}, names.make("/arcl/" + present + "/Transpose")).set_attr("perm", perm);
    else
      g.add_node("Identity", {kv.new_rows}, {present}, names.make("/arcl/" + present + "/Identity"));
  }
};

void check_unused(const nf::Graph& g, const std::string& value, const std::string& message) {
  nf::graph::GraphView view(g);
  if (view.is_used(value)) {
    const auto& users = view.consumers(value);
    std::string by = users.empty() ? "a graph output" : "node '" + std::string(users[0].name()) + "'";
    throw nf::Error(message + " (read by " + by + ")");
  }
}

}  // namespace

std::vector<int64_t> cache_io_dims(const ModelInfo& info, bool htp, bool key, int64_t len) {
  if (!htp) return {1, info.kv_heads, len, info.head_dim};
  return key ? Dims{info.kv_heads, 1, info.head_dim, len} : Dims{info.kv_heads, 1, len, info.head_dim};
}

int64_t cache_slots(const Variant& v, const ModelInfo& info, int64_t layer) {
  return (uses_sliding_cache(v, info, layer) ? *v.scl : v.cl) - v.ar - info.prefix_rows;
}

void build_static_variant(nf::Graph g, const Variant& v, const ModelInfo& info, const std::string& kv_layout,
                          const KvPrefix* prefix) {
  const std::string what = "arcl: graph " + g.name();
  const bool htp = kv_layout == "htp";
  const std::vector<std::string> source_inputs = g.inputs();
  nf::graph::UniqueNames names(g);
  nf::graph::GraphView view(g);

  // The float mask input takes the name of the source's integer padding mask, which keeps
  // feeding the old mask subgraph under another name until that subgraph is dead.
  const std::string source_mask = names.make("attention_mask.source");
  view.replace_uses(kAttentionMask, source_mask);
  std::vector<LayerSites> sites = find_attention_sites(view, info, source_mask);
  // MPT's bias from a buffer is rewritten once static (its values known); by node name, since
  // folding replaces values.
  std::vector<SlotBias> slot_biases;
  for (int64_t l = 0; l < info.layers; ++l)
    for (const MaskUse& use : sites[l].slot_biases)
      slot_biases.push_back({std::string(nf::Node(use.add).name()), use.mask_slot,
                             uses_sliding_mask(v, info, l) ? kSlidingAttentionMask : kAttentionMask});
  const bool counted = read_key_positions(g, view, names, sites, source_mask, info.mask_dtype, v.cl);
  auto refuse_with_positions = [&] {
    if (v.scl || prefix)
      throw nf::Error(what + ": ALiBi key positions with " + (prefix ? "a KV prefix" : "a sliding cache (SCL)") +
                      " are not supported");
  };
  if (counted) refuse_with_positions();

  bool any_sliding_mask = false;
  for (int64_t l = 0; l < info.layers; ++l) {
    const bool sliding = uses_sliding_mask(v, info, l);
    any_sliding_mask |= sliding;
    for (const MaskUse& use : sites[l].masks)
      nf::Node(use.add).set_input(use.mask_slot, sliding ? kSlidingAttentionMask : kAttentionMask);
    for (nf_node* w : sites[l].mask_fills) {  // masked_fill(scores, cond, min) -> scores + mask
      nf::Node fill(w);
      const std::string scores = fill.input(2), out = fill.output(0), name(fill.name());
      g.remove_node(fill);
      g.add_node("Add", {scores, sliding ? kSlidingAttentionMask : kAttentionMask}, {out}, name);
      view.refresh();
    }
    for (nf_node* w : sites[l].slot_masks) view.replace_uses(nf::Node(w).output(0), nf::Node(w).input(1));
  }
  KvRewrite kv{g, view, names, htp};
  for (int64_t l = 0; l < info.layers; ++l) {
    kv.rewrite(sites[l].key, info.past_key(l), info.present_key(l), true);
    kv.rewrite(sites[l].value, info.past_value(l), info.present_value(l), false);
  }
  if (prefix)
    for (int64_t l = 0; l < info.layers; ++l) {
      insert_kv_prefix(g, sites[l].key, prefix->keys[l], nf::roles::kv_prefix_output(l, true));
      insert_kv_prefix(g, sites[l].value, prefix->values[l], nf::roles::kv_prefix_output(l, false));
    }

  // Inputs: ids, positions, masks, then the caches in layer order.
  using nf::decoder::kInputIds;
  using nf::decoder::kPositionIds;
  auto ids_type = nf::graph::get_value_type(g, kInputIds);
  auto pos_type = nf::graph::get_value_type(g, kPositionIds);
  std::vector<std::string> inputs{kInputIds};
  g.set_value_type(kInputIds, ids_type ? ids_type->dtype : NF_DTYPE_INT64, {1, v.ar});
  if (info.has_position_ids) {
    inputs.push_back(kPositionIds);
    g.set_value_type(kPositionIds, pos_type ? pos_type->dtype : NF_DTYPE_INT64, {1, v.ar});
  }
  inputs.push_back(kAttentionMask);
  g.set_value_type(kAttentionMask, NF_DTYPE_FLOAT32, {1, 1, v.ar, v.cl});
  if (counted || !slot_biases.empty()) {  // slot biases may turn out to be masks: dropped below if unread
    inputs.push_back(nf::decoder::kKeyPositions);
    g.set_value_type(nf::decoder::kKeyPositions, NF_DTYPE_INT64, {1, v.cl});
  }
  if (any_sliding_mask) {
    inputs.push_back(kSlidingAttentionMask);
    g.set_value_type(kSlidingAttentionMask, NF_DTYPE_FLOAT32, {1, 1, v.ar, v.scl.value_or(v.cl)});
  }
  for (int64_t l = 0; l < info.layers; ++l) {
    int64_t slots = cache_slots(v, info, l);
    inputs.push_back(info.past_key(l));
    inputs.push_back(info.past_value(l));
    g.set_value_type(info.past_key(l), info.kv_dtype, cache_io_dims(info, htp, true, slots));
    g.set_value_type(info.past_value(l), info.kv_dtype, cache_io_dims(info, htp, false, slots));
  }
  for (const auto& [name, width] : info.row_inputs) {
    inputs.push_back(name);
    g.set_value_type(name, NF_DTYPE_FLOAT32, {1, v.ar, width});
  }
  g.set_inputs(inputs);

  // The source's mask subgraph (causal, window and padding parts) must now be dead, and
  // so must every use of inputs the static graph does not have.
  if (fold_length_switches(g, names, source_mask, v.cl, what).per_row) {
    inputs.insert(inputs.begin() + static_cast<std::ptrdiff_t>(info.has_position_ids ? 2 : 1), nf::decoder::kSequenceLengths);
    g.set_value_type(nf::decoder::kSequenceLengths, NF_DTYPE_INT64, {1, v.ar});
    g.set_inputs(inputs);
  }
  nf::graph::eliminate_dead_nodes(g);
  check_unused(g, source_mask, what + ": the source attention_mask is used outside the attention mask subgraph");
  std::set<std::string> kept(inputs.begin(), inputs.end());
  for (const std::string& in : source_inputs)
    if (!kept.count(in) && in != kAttentionMask)
      check_unused(g, in, what + ": the source input '" + in + "' has no place in the static layout");
  if (!info.has_position_ids && read_cache_positions(g, names, info)) {
    inputs.insert(inputs.begin() + 1, kPositionIds);
    g.set_value_type(kPositionIds, NF_DTYPE_INT64, {1, v.ar});
    g.set_inputs(inputs);
    nf::graph::eliminate_dead_nodes(g);
  }

  nf::graph::make_static(g, what);
  gather_slices(g);
  if (!slot_biases.empty()) {
    if (bias_from_key_positions(g, slot_biases, v.cl, what)) refuse_with_positions();
    else if (!counted) {
      inputs.erase(std::find(inputs.begin(), inputs.end(), nf::decoder::kKeyPositions));
      g.set_inputs(inputs);
    }
  }

  // The contract the runner relies on.
  auto expect = [&](const std::string& value, const Dims& dims) {
    auto t = nf::graph::get_value_type(g, value);
    if (!t || !t->dims || *t->dims != dims)
      throw nf::Error(what + ": '" + value + "' came out as " + (t ? nf::graph::to_string(*t) : std::string("untyped")) +
                      ", expected " + nf::graph::to_string({info.kv_dtype, dims}));
  };
  expect(nf::decoder::kLogits, {1, v.ar, info.vocab});
  for (int64_t l = 0; l < info.layers; ++l) {
    expect(info.present_key(l), cache_io_dims(info, htp, true, v.ar));
    expect(info.present_value(l), cache_io_dims(info, htp, false, v.ar));
  }
}

}  // namespace arcl
