// arcl: turns the dynamic-KV source decoder into static graphs, one per (AR, CL[, SCL])
// variant, sharing the source's weights. See README.md for the graph contract.
#include <npuforge/plugin.hpp>

#include "draft_tree.h"
#include "kv_prefix.h"
#include "model_info.h"
#include "static_variant.h"
#include "variants.h"

namespace arcl {
namespace {

nlohmann::json io_metadata(const ModelInfo& info, const ArclOptions& opts, const std::vector<Variant>& variants,
                           const std::string& prefix) {
  nlohmann::json vs = nlohmann::json::array();
  for (const Variant& v : variants)
    vs.push_back({{"graph", prefix + v.graph_name()},
                  {"ar", v.ar},
                  {"cl", v.cl},
                  {"scl", v.scl ? nlohmann::json(*v.scl) : nlohmann::json(nullptr)}});
  nlohmann::json io{{"layout", "static"},
                    {"kv_layout", opts.kv_layout},
                    {"mask_value", static_cast<int64_t>(kMaskValue)},
                    {"layers", info.layers},
                    {"kv_heads", info.kv_heads},
                    {"head_dim", info.head_dim},
                    {"vocab", info.vocab},
                    {"sliding_window", info.sliding_window ? nlohmann::json(*info.sliding_window) : nlohmann::json(nullptr)},
                    {"sliding_layers", info.sliding_layers},
                    {"variants", vs}};
  if (info.first_layer != 0) io["first_layer"] = info.first_layer;
  if (info.prefix_rows) io["kv_prefix_rows"] = info.prefix_rows;
  return io;
}

// A role entry's "tree" (graph_roles.hpp draft_tree); throws nf::Error when malformed.
std::optional<nf::roles::DraftTree> draft_tree_request(const nlohmann::json& role) {
  try {
    return nf::roles::draft_tree_of(role);
  } catch (const std::runtime_error& e) {
    throw nf::Error("arcl: " + std::string(e.what()));
  }
}

// Replaces `source` by its static variants, named prefix + ar{AR}_cl{CL}[_scl{SCL}]; returns
// the runner's io metadata for them.
// `kv_prefix`: the target's variants hold the model set's KV prefix (role kv_prefix).
// `tree_io`: when `role` (its entry) asks for the draft's depth loop as one graph, the tree
// graphs are added too, named prefix + "tree_" + ..., and their io variants go there.
nlohmann::json make_variants(nf::ModelSet& ms, nf::Graph source, const nlohmann::json& config, const std::string& prefix,
                             const ArclOptions& opts, nf::Context& ctx, bool kv_prefix = false,
                             const nlohmann::json& role = nullptr, nlohmann::json* tree_io = nullptr) {
  const std::string source_name = source.name();
  // Data-dependent shapes cannot be made static; the one decoder export that has them is HF's
  // per-expert MoE loop, which the moe transform makes dense.
  for (const nf::Node& n : source.nodes())
    if (n.op_type() == "NonZero")
      throw nf::Error("arcl: graph " + source_name + ": NonZero '" + std::string(n.name()) +
                      "' gives data-dependent shapes (a mixture of experts' per-expert dispatch loop); list the moe "
                      "transform before arcl");
  ModelInfo info = read_model_info(source, config);
  const std::optional<KvPrefix> rows = kv_prefix ? read_kv_prefix(ms, info) : std::nullopt;
  if (rows) info.prefix_rows = rows->rows;
  std::vector<Variant> variants = plan_variants(opts, info, ctx);
  if (tree_io) {
    const std::optional<nf::roles::DraftTree> tree = draft_tree_request(role);
    const std::vector<int64_t> head_tokens = role.value("head_tokens", std::vector<int64_t>{});
    *tree_io = tree ? make_draft_trees(ms, source, info, variants, opts.kv_layout, *tree, head_tokens, prefix + "tree_", ctx)
                    : nlohmann::json::array();
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    ctx.progress(i, variants.size(), prefix + v.graph_name());
    nf::Graph g = ms.add_graph(prefix + v.graph_name(), &source);
    build_static_variant(g, v, info, opts.kv_layout, rows ? &*rows : nullptr);
  }
  if (rows) drop_kv_prefix_role(ms, *rows);
  ctx.progress(variants.size(), variants.size(), "done");
  ms.remove_graph(source_name);
  return io_metadata(info, opts, variants, prefix);
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_context* ctx_handle) {
  return NF_TRY({
    nf::ModelSet ms(handle);
    nf::Context ctx(ctx_handle);
    ArclOptions opts = parse_options(nf::Options(options_json));
    const std::vector<nf::Graph> targets = ms.target_graphs();
    if (targets.size() != 1)
      throw nf::Error("arcl: expects a model set with one source graph, got " + std::to_string(targets.size()) +
                      " (run arcl before split)");
    if (const nlohmann::json roles = ms.metadata(nf::roles::kMetadataKey); roles.is_object())
      for (const auto& [role, entry] : roles.items()) draft_tree_request(entry);  // refused before anything changes
    ms.set_metadata("io", make_variants(ms, targets[0], ms.metadata("config"), "", opts, ctx, /*kv_prefix=*/true));
    nlohmann::json roles = ms.metadata(nf::roles::kMetadataKey);  // without kv_prefix: the target's variants hold it
    // A graph of another role (a draft) gets the same variants, named after it, and its own io.
    if (!roles.is_object()) return nullptr;
    nlohmann::json trees = nlohmann::json::object();  // role draft_tree, when a draft asks for it
    for (auto& [role, entry] : roles.items()) {
      const nlohmann::json graphs = entry.value("graphs", nlohmann::json::array());
      if (graphs.size() != 1 || !graphs[0].is_string())
        throw nf::Error("arcl: role '" + role + "' lists " + std::to_string(graphs.size()) +
                        " graphs; arcl makes the variants of one source graph per role");
      const std::string name = graphs[0];
      nf_graph* source = nf::host().model_set_find_graph(ms.get(), name.c_str());
      if (!source) throw nf::Error("arcl: role '" + role + "' names graph '" + name + "', which the model set lacks");
      nlohmann::json tree_io;
      entry["io"] = make_variants(ms, nf::Graph(source), entry.value("config", nlohmann::json()), name + "_", opts, ctx, false,
                                  entry, &tree_io);
      auto graph_names = [](const nlohmann::json& io) {
        nlohmann::json names = nlohmann::json::array();
        for (const auto& v : io["variants"]) names.push_back(v["graph"]);
        return names;
      };
      entry["graphs"] = graph_names(entry["io"]);
      if (tree_io.empty()) continue;
      nlohmann::json io = entry["io"];
      io["variants"] = tree_io;
      trees = {{"graphs", graph_names(io)}, {"decoder", entry.value("decoder", "")}, {"tree", entry["tree"]}, {"io", io},
               {"shares_cache_of", role}};  // the draft's cache: the runner of one feeds the other
    }
    if (!trees.empty()) roles[nf::roles::kDraftTree] = trees;
    ms.set_metadata(nf::roles::kMetadataKey, roles);
  });
}

// What apply refuses before building anything: the options, and the variants they plan on
// this model (AR < CL, sliding context lengths, native KV ARs).
nf_status* validate(const char* options_json, const nf_model_set* handle, nf_context* ctx_handle) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    ArclOptions opts = parse_options(nf::Options(options_json));
    const std::vector<nf::Graph> targets = ms.target_graphs();
    if (targets.size() == 1) {
      ModelInfo info = read_model_info(targets[0], ms.metadata("config"));
      info.prefix_rows = kv_prefix_rows(ms);
      plan_variants(opts, info, nf::Context(ctx_handle));
    }
  });
}

const nf_transform_api kApi = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, validate};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_TRANSFORM,
    "arcl",
    "0.6.0",
    "static AR/CL variants of a decoder: fixed KV cache buffers, explicit attention mask, folded shapes",
    options_schema(),
    &kApi,
};

}  // namespace
}  // namespace arcl

NF_PLUGIN_LIBRARY(&arcl::kDescriptor)
