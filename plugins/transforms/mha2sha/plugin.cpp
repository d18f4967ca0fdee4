// mha2sha: multi-head attention -> one attention per head (grouped-query aware), the form
// HTP-style NPUs run best. See README.md.
#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/infer_shapes.h>
#include <npuforge/plugin.hpp>

#include <algorithm>
#include <set>

#include "attention_core.h"
#include "head_weights.h"
#include "options.h"
#include "sha_rewrite.h"
#include "fused_head_views.h"
#include "head_batch_views.h"
#include "part_views.h"
#include "row_head_views.h"
#include "unit_head_views.h"

namespace mha2sha {
namespace {

struct GraphResult {
  size_t blocks = 0;
  int64_t heads = 0, kv_heads = 0;
};

// The Softmax names of the blocks to rewrite in `g`: those reading a KV cache, plus the
// start points found here (recorded in `found`).
std::vector<std::string> pick_targets(const nf::graph::GraphView& view, const CoreSearch& search,
                                      const Mha2shaOptions& opts, std::set<std::string>& found) {
  std::vector<std::string> targets;
  auto add = [&](const AttentionCore& c) {
    std::string name(nf::Node(c.softmax).name());
    if (std::find(targets.begin(), targets.end(), name) == targets.end()) targets.push_back(name);
  };
  for (const AttentionCore& c : search.cores)
    if (c.k_past) add(c);
  std::set<std::string> node_names;
  for (const nf::Node& n : view.nodes()) node_names.insert(std::string(n.name()));
  for (const std::string& sp : opts.additional_start_points) {
    if (!node_names.count(sp)) continue;
    found.insert(sp);
    const AttentionCore* c = core_of_node(search.cores, sp);
    if (!c) {
      std::string why;
      for (const Rejection& r : search.rejected)
        if (r.softmax == sp) why = " (" + r.why + ")";
      throw nf::Error("mha2sha: option 'm2s_additional_start_points': node '" + sp + "' in graph " + view.graph().name() +
                      " is not the Softmax, score MatMul or value MatMul of an attention mha2sha can split" + why);
    }
    add(*c);
  }
  return targets;
}

// `rejected`: every Softmax not rewritten, "<graph>: <softmax>: <why>"; `left`: those that are
// attention (left multi-head).
GraphResult rewrite_graph(nf::Graph g, const Mha2shaOptions& opts, HeadWeights& weights, std::set<std::string>& found,
                          std::vector<std::string>& rejected, std::vector<std::string>& left) {
  GraphResult r;
  unit_head_views(g);
  row_head_views(g);
  head_batch_views(g);
  fused_head_views(g);
  part_views(g);
  nf::graph::GraphView view(g);
  CoreSearch search = find_attention_cores(view);
  for (const Rejection& x : search.rejected) {
    rejected.push_back(g.name() + ": " + x.softmax + ": " + x.why);
    if (x.attention) left.push_back(rejected.back());
  }
  std::vector<std::string> targets = pick_targets(view, search, opts, found);
  GraphEditor ed(g, "/mha2sha/");
  ShaOptions sha{opts.permute_kv_cache_io};
  for (const std::string& softmax : targets) {
    // Earlier rewrites removed nodes: match this block again on the current graph.
    view.refresh();
    CoreSearch now = find_attention_cores(view);
    const AttentionCore* c = core_of_node(now.cores, softmax);
    if (!c) throw nf::Error("mha2sha: graph " + g.name() + ": attention '" + softmax + "' no longer matches after earlier rewrites");
    rewrite_core(view, *c, ed, weights, sha);
    nf::graph::eliminate_dead_nodes(g);
    ++r.blocks;
    r.heads = c->q.heads;
    r.kv_heads = c->k.heads;
  }
  if (r.blocks == 0) return r;
  g.sort();
  auto types = nf::graph::infer_shapes(g);
  if (!types.not_static.empty())
    throw nf::Error("mha2sha: graph " + g.name() + ": '" + types.not_static[0] + "' has no static shape after the rewrite");
  return r;
}

// With permute_kv_cache_io every cache input must have taken the HTP layout: the runner
// reads one layout for the whole model set.
void check_permuted(const nf::Graph& g, const nlohmann::json& io) {
  const int64_t kv = io.value("kv_heads", int64_t{0}), hd = io.value("head_dim", int64_t{0});
  for (const std::string& in : g.inputs()) {
    if (in.rfind("past_key_values.", 0) != 0) continue;
    Dims d = static_dims(g, in, "KV cache input");
    bool key = in.ends_with(".key");
    bool htp = d.size() == 4 && d[0] == kv && d[1] == 1 && (key ? d[2] == hd : d[3] == hd);
    if (!htp)
      throw nf::Error("mha2sha: option 'permute_kv_cache_io': graph " + g.name() + " input '" + in +
                      "' is not read by an attention mha2sha rewrote, so it cannot take the HTP layout");
  }
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_context* ctx_handle) {
  return NF_TRY({
    nf::ModelSet ms(handle);
    nf::Context ctx(ctx_handle);
    Mha2shaOptions opts = parse_options(nf::Options(options_json));
    nlohmann::json io = ms.metadata("io");
    if (!io.is_object() || io.value("layout", "") != "static")
      throw nf::Error("mha2sha: the model set has no static graphs (metadata io.layout is not \"static\"); run arcl before mha2sha");
    HeadWeights weights(ms);
    std::set<std::string> found;
    std::vector<std::string> rejected, left;
    size_t blocks = 0;
    int64_t heads = 0, kv_heads = 0;
    const std::vector<nf::Graph> graphs = ms.target_graphs();
    const size_t n = graphs.size();
    for (size_t i = 0; i < n; ++i) {
      nf::Graph g = graphs[i];
      ctx.progress(i, n, g.name());
      GraphResult r = rewrite_graph(g, opts, weights, found, rejected, left);
      blocks += r.blocks;
      if (r.blocks) heads = r.heads, kv_heads = r.kv_heads;
      if (opts.permute_kv_cache_io) check_permuted(g, io);
    }
    ctx.progress(n, n, "done");
    for (const std::string& sp : opts.additional_start_points)
      if (!found.count(sp))
        throw nf::Error("mha2sha: option 'm2s_additional_start_points': no node named '" + sp + "' in any graph");
    if (blocks == 0)
      throw nf::Error("mha2sha: found no attention to split" +
                      (rejected.empty() ? std::string(" (no Softmax in the graphs)") : " (" + rejected[0] + ")"));
    // Attention left multi-head (a pattern mha2sha does not follow) runs slower on the NPU: say so.
    if (!left.empty())
      ctx.warn("mha2sha: " + std::to_string(left.size()) + " attention block(s) left multi-head (first: " + left[0] + ")");
    size_t encodings = weights.finish_encodings();
    if (opts.permute_kv_cache_io && io.value("kv_layout", "hf") != "htp") {
      io["kv_layout"] = "htp";
      ms.set_metadata("io", io);
    }
    ctx.info("mha2sha: " + std::to_string(blocks) + " attention blocks in " + std::to_string(n) + " graphs split into " +
             std::to_string(heads) + " query heads over " + std::to_string(kv_heads) + " KV heads; " +
             std::to_string(weights.sliced_tensors()) + " weights sliced (" +
             std::to_string(weights.bytes_made() >> 10) + " KiB of per-head copies), " + std::to_string(encodings) +
             " encodings sliced");
  });
}

const nf_transform_api kApi = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, nullptr};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_TRANSFORM,
    "mha2sha",
    "0.3.0",
    "multi-head attention as one attention per head (GQA aware), per-head projections with sliced weights and encodings",
    options_schema(),
    &kApi,
};

}  // namespace
}  // namespace mha2sha

NF_PLUGIN_LIBRARY(&mha2sha::kDescriptor)
