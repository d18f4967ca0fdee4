// split: cuts every static AR/CL graph arcl made into `num_splits` parts at the same
// boundaries (embedding | decoder layers, balanced | LM head), named {graph}_{i}_of_{n}.
// Parts chain by value name: a part's outputs feed the inputs of that name in later
// parts. See README.md.
#include <npuforge/graph/graph_view.h>

#include <npuforge/hf_config.hpp>
#include <npuforge/plugin.hpp>
#include <set>

#include "boundaries.h"
#include "options.h"
#include "partition.h"

namespace split {
namespace {

struct Cuts {
  std::vector<std::string> values;  // the boundaries, in order
  int64_t num_splits = 0;
};

int64_t parameter_bytes(const nf::Graph& g) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const std::string& name : g.initializer_names()) {
    nf::Tensor t = g.initializer(name);
    if (seen.insert(t.data()).second) bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

// Refuses a num_splits that leaves no decoder part, or more parts than `available` layers
// (negative: not known).
void check_num_splits(const SplitOptions& opts, int64_t available, const std::string& source) {
  if (!opts.num_splits) return;
  const int64_t n = *opts.num_splits, fixed = (opts.split_embedding ? 1 : 0) + (opts.split_lm_head ? 1 : 0);
  if (n < fixed + 1)
    throw nf::Error("split: option 'num_splits' = " + std::to_string(n) +
                    " leaves no part for the decoder layers (split_embedding and split_lm_head take " +
                    std::to_string(fixed) + "); use at least " + std::to_string(fixed + 1) + " or turn them off");
  if (available >= 0 && n - fixed > available)
    throw nf::Error("split: option 'num_splits' = " + std::to_string(n) + " needs " + std::to_string(n - fixed) +
                    " decoder parts, but the graph has only " + std::to_string(available) + " " + source +
                    "; use at most " + std::to_string(available + fixed));
}

// Chooses the boundaries on the first variant graph; every variant is cut at the same.
Cuts plan_cuts(const SplitOptions& opts, const nf::graph::GraphView& view, int64_t layers, const nf::Context& ctx) {
  const int64_t fixed = (opts.split_embedding ? 1 : 0) + (opts.split_lm_head ? 1 : 0);
  std::string embedding;
  if (opts.split_embedding || !opts.layer_boundary_name_regex) embedding = find_embedding_output(view);
  std::vector<std::string> ends = opts.layer_boundary_name_regex
                                      ? regex_layer_ends(view, *opts.layer_boundary_name_regex)
                                      : residual_layer_ends(view, embedding, layers);
  const int64_t available = static_cast<int64_t>(ends.size());
  const std::string source = opts.layer_boundary_name_regex ? "node(s) matched by layer_boundary_name_regex"
                                                            : "decoder layers (residual-Add heuristic)";
  Cuts c;
  if (opts.num_splits) {
    check_num_splits(opts, available, source);
    c.num_splits = *opts.num_splits;
  } else {
    const int64_t bytes = parameter_bytes(view.graph());
    c.num_splits = default_num_splits(opts, bytes);
    ctx.info("split: num_splits " + std::to_string(c.num_splits) + " = " + std::to_string(fixed) + " + 1 + " +
             std::to_string(bytes) + " parameter bytes // 2 GiB");
    if (c.num_splits - fixed > available) {
      c.num_splits = available + fixed;
      ctx.info("split: num_splits lowered to " + std::to_string(c.num_splits) + ": one decoder part per " +
               (opts.layer_boundary_name_regex ? "match" : "layer") + " at most");
    }
  }

  const int64_t decoder_parts = c.num_splits - fixed;
  if (opts.split_embedding) c.values.push_back(embedding);
  std::vector<int64_t> last_layer;  // per decoder part: index into `ends` of its last boundary
  for (int64_t k = 1; k <= decoder_parts; ++k) last_layer.push_back(k * available / decoder_parts - 1);
  for (int64_t k = 0; k + 1 < decoder_parts; ++k) c.values.push_back(ends[static_cast<size_t>(last_layer[k])]);
  if (opts.split_lm_head) c.values.push_back(ends.back());
  return c;
}

std::vector<int64_t> layers_of(const PartPlan& p) {
  std::vector<int64_t> layers;
  for (const std::string& o : p.graph_outputs) {
    if (o.rfind("present.", 0) != 0 || !o.ends_with(".key")) continue;
    layers.push_back(std::stoll(o.substr(8, o.size() - 12)));
  }
  return layers;
}

nlohmann::json part_json(const PartPlan& p, const std::string& graph) {
  nlohmann::json from = nlohmann::json::array();
  for (size_t i = 0; i < p.chained_inputs.size(); ++i)
    from.push_back({{"name", p.chained_inputs[i]}, {"part", p.chained_from[i] + 1}});
  return {{"graph", graph},
          {"layers", layers_of(p)},
          {"inputs_from_runner", p.runner_inputs},
          {"inputs_from_parts", from},
          {"outputs_to_parts", p.chained_outputs},
          {"outputs", p.graph_outputs}};
}

nf::Graph find_graph(nf::ModelSet& ms, const std::string& name) {
  nf_graph* g = nf::host().model_set_find_graph(ms.get(), name.c_str());
  if (!g) throw nf::Error("split: metadata io names graph '" + name + "', which is not in the model set");
  return nf::Graph(g);
}

void split_model_set(nf::ModelSet& ms, const nf::Context& ctx, const char* options_json) {
  SplitOptions opts = parse_options(nf::Options(options_json));
  nlohmann::json io = ms.metadata("io");
  if (!io.is_object() || io.value("layout", "") != "static" || !io.contains("variants") || !io["variants"].is_array() ||
      io["variants"].empty())
    throw nf::Error(
        "split: the model set has no static AR/CL graphs (metadata io.layout is not \"static\"); run arcl before "
        "split");
  for (const auto& v : io["variants"])
    if (v.value("splits", 1) > 1)
      throw nf::Error("split: the graphs are already split (" + v.at("graph").get<std::string>() + ")");
  const int64_t layers = io.value("layers", int64_t{0});

  nf::Graph first = find_graph(ms, io["variants"][0].at("graph").get<std::string>());
  first.sort();
  Cuts cuts = plan_cuts(opts, nf::graph::GraphView(first), layers, ctx);
  const int64_t n = cuts.num_splits;
  nlohmann::json split_meta = {
      {"num_splits", n},
      {"split_embedding", opts.split_embedding},
      {"split_lm_head", opts.split_lm_head},
      {"boundaries", cuts.values},
      {"heuristic", opts.layer_boundary_name_regex ? "layer_boundary_name_regex" : "residual_add"},
      {"parameter_bytes", parameter_bytes(first)}};
  if (n == 1) {
    ctx.info("split: num_splits 1: graphs stay whole");
    io["split"] = split_meta;
    ms.set_metadata("io", io);
    return;
  }

  nlohmann::json part_layers = nlohmann::json::array();
  size_t done = 0, total = io["variants"].size() * static_cast<size_t>(n);
  for (auto& v : io["variants"]) {
    const std::string base = v.at("graph");
    nf::Graph g = find_graph(ms, base);
    g.sort();
    std::vector<PartPlan> plans = plan_parts(nf::graph::GraphView(g), cuts.values);
    nlohmann::json parts = nlohmann::json::array();
    for (size_t i = 0; i < plans.size(); ++i) {
      std::string name = base + "_" + std::to_string(i + 1) + "_of_" + std::to_string(n);
      ctx.progress(done++, total, name);
      build_part(ms, g, plans[i], name);
      parts.push_back(part_json(plans[i], name));
      if (&v == &io["variants"][0]) part_layers.push_back(layers_of(plans[i]));
    }
    ms.remove_graph(base);
    v["splits"] = n;
    v["parts"] = parts;
  }
  ctx.progress(total, total, "done");
  split_meta["part_layers"] = part_layers;
  io["split"] = split_meta;
  ms.set_metadata("io", io);
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_context* ctx_handle) {
  return NF_TRY({
    nf::ModelSet ms(handle);
    split_model_set(ms, nf::Context(ctx_handle), options_json);
  });
}

// Before arcl has run: the options, and the layer count config.json gives (without a regex).
nf_status* validate(const char* options_json, const nf_model_set* handle, nf_context*) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    SplitOptions opts = parse_options(nf::Options(options_json));
    const int64_t layers = opts.layer_boundary_name_regex
                               ? -1
                               : nf::hf_config::get_int(ms.metadata("config"), "num_hidden_layers").value_or(-1);
    check_num_splits(opts, layers, "decoder layers (num_hidden_layers in config.json)");
  });
}

const nf_transform_api kApi = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, validate};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_TRANSFORM,
    "split",
    "0.1.0",
    "cuts each static AR/CL graph into parts (embedding, balanced decoder layers, LM head) that chain by hidden state "
    "and share weights",
    options_schema(),
    &kApi,
};

}  // namespace
}  // namespace split

NF_PLUGIN_LIBRARY(&split::kDescriptor)
