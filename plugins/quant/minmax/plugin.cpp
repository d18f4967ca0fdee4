// minmax: the baseline quant recipe. Symmetric weight encodings from each weight's range
// (per output channel or per tensor), activation and KV-cache encodings from the min/max
// seen over the calibration batches. Weights stay float; backends quantize them with
// exactly these encodings (the cpu backend runs them on its int8/int4 kernels).
#include <npuforge/plugin.hpp>
#include <npuforge/quant/helpers.h>

namespace minmax {
namespace {

const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "weight_bw": {"type": "integer", "enum": [4, 8], "default": 8,
                  "description": "bits of the symmetric weight encodings"},
    "weight_granularity": {"type": "string", "enum": ["per_channel", "per_tensor"], "default": "per_channel",
                           "description": "one scale per output channel or one per weight"},
    "activation_bw": {"type": "integer", "enum": [8, 16], "default": 16,
                      "description": "bits of the asymmetric activation encodings (needs [calibration])"},
    "kv_bw": {"type": "integer", "enum": [4, 8, 16], "default": 8,
              "description": "bits of the KV-cache encodings (needs [calibration])"},
    )json" NF_QUANT_ACTIVATION_RANGE_SCHEMA ", " NF_QUANT_LOGITS_BW_SCHEMA R"json(,
    "overrides": {"type": "array", "default": [],
                  "description": "per-weight bit widths: the first pattern (regex on the weight name) that matches wins",
                  "items": {"type": "object", "additionalProperties": false, "required": ["pattern", "weight_bw"],
                            "properties": {"pattern": {"type": "string"},
                                           "weight_bw": {"type": "integer", "enum": [4, 8]}}}}
  }
})json";

std::vector<nf::quant::LinearWeight> weights_of(const nf::ModelSet& ms) {
  auto weights = nf::quant::linear_weights(ms, false, /*every_role=*/true);
  if (weights.empty()) throw nf::Error("minmax: no MatMul/Gemm with a constant 2-D float weight in the model set");
  return weights;
}

void quantize(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx_handle) {
  nf::ModelSet ms(handle);
  nf::Context ctx(ctx_handle);
  nf::Options opts(options_json);
  const int weight_bw = opts.get<int>("weight_bw", 8);
  const bool per_channel = opts.get<std::string>("weight_granularity", "per_channel") == "per_channel";
  const int act_bw = opts.get<int>("activation_bw", 16);
  const int kv_bw = opts.get<int>("kv_bw", 8);
  std::vector<std::string> patterns;
  std::vector<int> override_bw;
  for (const auto& o : opts.json().value("overrides", nlohmann::json::array())) {
    patterns.push_back(o.at("pattern").get<std::string>());
    override_bw.push_back(o.at("weight_bw").get<int>());
  }
  auto regexes = nf::quant::compile_patterns("minmax", patterns);

  auto weights = weights_of(ms);
  std::map<int, int> per_bw;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& lw = weights[i];
    ctx.progress(i, weights.size(), lw.name);
    int bw = weight_bw;
    for (size_t p = 0; p < regexes.size(); ++p)
      if (std::regex_search(lw.name, regexes[p])) {
        bw = override_bw[p];
        break;
      }
    nf::Tensor w;
    for (const nf::Graph& g : ms.graphs())
      if ((w = g.initializer(lw.name))) break;
    auto enc = nf::quant::symmetric_weight_encoding(lw, w, bw, per_channel);
    ms.set_encoding(lw.name, enc.view());
    ++per_bw[bw];
  }
  std::string summary;
  for (auto [bw, n] : per_bw) summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " at W" + std::to_string(bw);
  ctx.info(std::to_string(weights.size()) + " weights encoded " +
           (per_channel ? "per channel" : "per tensor") + " (" + summary + ")");

  if (!calib) {
    ctx.warn("no [calibration] in the manifest: activation and KV encodings are not set");
    return;
  }
  size_t n = nf::quant::encode_activations(ms, calib, weights, act_bw, kv_bw, ctx, nf::quant::ActivationRange::from(opts),
                                           opts.get<int>("logits_bw", 16));
  ctx.info(std::to_string(n) + " activation/KV encodings (A" + std::to_string(act_bw) + ", KV" +
           std::to_string(kv_bw) + ") from " + std::to_string(nf::host().calibration_batch_count(calib)) +
           " calibration batches");
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx) {
  return NF_TRY(quantize(options_json, handle, calib, ctx));
}

// The weights' encodings need no calibration; the activations' ranges split by batches.
nf_status* shard_count(const char*, size_t wanted, size_t* count) { return NF_TRY(*count = std::max<size_t>(wanted, 1)); }

nf_status* apply_shard(const char*, nf_model_set* handle, nf_calibration* calib, nf_context* ctx, size_t index,
                       size_t count) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    nf::quant::calibrate_activation_part(ms, calib, weights_of(ms), nf::Context(ctx), index, count);
  });
}

const nf_quant_api kApi = {NF_ABI_VERSION, sizeof(nf_quant_api), apply, nullptr, shard_count, apply_shard};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_QUANT,
    "minmax",
    "0.2.0",
    "baseline quantization: symmetric min/max weight encodings, calibrated min/max activation and KV encodings",
    kSchema,
    &kApi,
};

}  // namespace
}  // namespace minmax

NF_PLUGIN_LIBRARY(&minmax::kDescriptor)
