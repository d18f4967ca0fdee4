// arcl: turns the dynamic-KV source decoder into static graphs, one per (AR, CL[, SCL])
// variant, sharing the source's weights. See README.md for the graph contract.
#include <npuforge/plugin.hpp>

#include "model_info.h"
#include "static_variant.h"
#include "variants.h"

namespace arcl {
namespace {

nlohmann::json io_metadata(const ModelInfo& info, const ArclOptions& opts, const std::vector<Variant>& variants) {
  nlohmann::json vs = nlohmann::json::array();
  for (const Variant& v : variants)
    vs.push_back({{"graph", v.graph_name()},
                  {"ar", v.ar},
                  {"cl", v.cl},
                  {"scl", v.scl ? nlohmann::json(*v.scl) : nlohmann::json(nullptr)}});
  return {{"layout", "static"},
          {"kv_layout", opts.kv_layout},
          {"mask_value", -65504},
          {"layers", info.layers},
          {"kv_heads", info.kv_heads},
          {"head_dim", info.head_dim},
          {"vocab", info.vocab},
          {"sliding_window", info.sliding_window ? nlohmann::json(*info.sliding_window) : nlohmann::json(nullptr)},
          {"sliding_layers", info.sliding_layers},
          {"variants", vs}};
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
    nf::Graph source = targets[0];
    const std::string source_name = source.name();
    ModelInfo info = read_model_info(source, ms.metadata("config"));
    std::vector<Variant> variants = plan_variants(opts, info, ctx);

    for (size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      ctx.progress(i, variants.size(), v.graph_name());
      nf::Graph g = ms.add_graph(v.graph_name(), &source);
      build_static_variant(g, v, info, opts.kv_layout);
    }
    ctx.progress(variants.size(), variants.size(), "done");
    ms.remove_graph(source_name);
    ms.set_metadata("io", io_metadata(info, opts, variants));
  });
}

// What apply refuses before building anything: the options, and the variants they plan on
// this model (AR < CL, sliding context lengths, native KV ARs).
nf_status* validate(const char* options_json, const nf_model_set* handle, nf_context* ctx_handle) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    ArclOptions opts = parse_options(nf::Options(options_json));
    const std::vector<nf::Graph> targets = ms.target_graphs();
    if (targets.size() == 1) plan_variants(opts, read_model_info(targets[0], ms.metadata("config")), nf::Context(ctx_handle));
  });
}

const nf_transform_api kApi = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, validate};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_TRANSFORM,
    "arcl",
    "0.1.0",
    "static AR/CL variants of a decoder: fixed KV cache buffers, explicit attention mask, folded shapes",
    options_schema(),
    &kApi,
};

}  // namespace
}  // namespace arcl

NF_PLUGIN_LIBRARY(&arcl::kDescriptor)
