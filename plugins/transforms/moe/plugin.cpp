// moe: top-k routed expert blocks in a form NPUs run: routing by a float gate mask (no
// indices, no one-hot), every kept expert computed densely; optional expert subselection.
// See README.md.
#include <npuforge/graph/dense_dispatch.h>
#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/infer_shapes.h>
#include <npuforge/graph/unique_names.h>
#include <npuforge/plugin.hpp>

#include <algorithm>
#include <optional>
#include <regex>
#include <set>

#include "expert_selection.h"
#include "gate_mask.h"
#include "moe_block.h"
#include "options.h"

namespace moe {
namespace {

// The experts `opts` removes from block `b`.
std::set<int64_t> removed_experts(const MoeOptions& opts, const MoeBlock& b, const std::optional<std::regex>& predicate,
                                  std::set<int64_t>& layers_seen, bool& predicate_hit) {
  layers_seen.insert(b.layer);
  std::set<int64_t> removed;
  const std::vector<int64_t>* keep = nullptr;
  std::string option;
  if (auto it = opts.per_layer.find(b.layer); it != opts.per_layer.end()) {
    keep = &it->second;
    option = "overridden_subselection for layer " + std::to_string(b.layer);
  } else if (opts.all_layers) {
    keep = &*opts.all_layers;
    option = "overridden_subselection";
  }
  if (keep) {
    for (int64_t e : *keep)
      if (e >= b.experts)
        throw nf::Error("moe: option '" + option + "' names expert " + std::to_string(e) + " but layer " +
                        std::to_string(b.layer) + " has " + std::to_string(b.experts) + " experts (0.." +
                        std::to_string(b.experts - 1) + ")");
    for (int64_t e = 0; e < b.experts; ++e)
      if (std::find(keep->begin(), keep->end(), e) == keep->end()) removed.insert(e);
  }
  if (predicate)
    for (const Expert& e : b.expert_terms)
      for (const std::string& n : e.nodes)
        if (std::regex_search(n, *predicate)) {
          removed.insert(e.index);
          predicate_hit = true;
          break;
        }
  return removed;
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_context* ctx_handle) {
  return NF_TRY({
    nf::ModelSet ms(handle);
    nf::Context ctx(ctx_handle);
    MoeOptions opts = parse_options(nf::Options(options_json));
    std::optional<std::regex> predicate;
    if (!opts.remove_op_predicate.empty()) predicate.emplace(opts.remove_op_predicate);
    const bool is_static = ms.metadata("io").is_object() && ms.metadata("io").value("layout", "") == "static";
    size_t blocks = 0, removed_total = 0, dispatch_loops = 0;
    std::set<int64_t> layers_seen;
    bool predicate_hit = false;
    const std::vector<nf::Graph> graphs = ms.target_graphs();
    const size_t n = graphs.size();
    for (size_t i = 0; i < n; ++i) {
      nf::Graph g = graphs[i];
      ctx.progress(i, n, g.name());
      const size_t densified = nf::graph::densify_dispatch(g);  // HF's per-expert loop (NonZero) first
      dispatch_loops += densified;
      // The routing probe needs the ranks of the routing values; an export may not record
      // them (dims the graph does not fix stay symbolic).
      if (!is_static || densified) nf::graph::infer_shapes(g);
      nf::graph::GraphView view(g);
      nf::graph::UniqueNames names(g);
      std::vector<MoeBlock> found = find_moe_blocks(view);
      for (const MoeBlock& b : found) {
        std::set<int64_t> removed = removed_experts(opts, b, predicate, layers_seen, predicate_hit);
        rewrite_gate(view, names, b);
        remove_experts(view, names, b, removed);
        removed_total += removed.size();
        view.refresh();
      }
      blocks += found.size();
      if (found.empty()) continue;
      nf::graph::eliminate_dead_nodes(g);
      g.sort();
      if (is_static) {
        auto types = nf::graph::infer_shapes(g);
        if (!types.not_static.empty())
          throw nf::Error("moe: graph " + g.name() + ": '" + types.not_static[0] + "' has no static shape after the rewrite");
      }
    }
    ctx.progress(n, n, "done");
    if (blocks == 0) throw nf::Error("moe: found no top-k routed expert block (no TopK over a router Softmax) in any graph");
    for (const auto& [layer, list] : opts.per_layer)
      if (!layers_seen.count(layer))
        throw nf::Error("moe: option 'overridden_subselection' names layer " + std::to_string(layer) + ", which has no MoE block");
    if (predicate && !predicate_hit)
      throw nf::Error("moe: option 'remove_op_predicate' \"" + opts.remove_op_predicate + "\" matches no expert's node");
    ctx.info("moe: " + std::to_string(blocks) + " routed blocks rewritten to a gate mask over " + std::to_string(n) +
             " graphs; " + std::to_string(removed_total) + " expert instances removed" +
             (dispatch_loops ? "; " + std::to_string(dispatch_loops) + " experts of a per-expert dispatch loop made dense" : ""));
  });
}

const nf_transform_api kApi = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, nullptr};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_TRANSFORM,
    "moe",
    "0.1.0",
    "top-k routed experts as static dense compute under a float gate mask (no indices); optional expert subselection",
    options_schema(),
    &kApi,
};

}  // namespace
}  // namespace moe

NF_PLUGIN_LIBRARY(&moe::kDescriptor)
