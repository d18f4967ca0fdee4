// lpbq: low-power blockwise quantization of MatMul/Gemm weights (AIMET's LLM recipe):
// 4-bit blocks along the input channels whose scales are small integers times one
// per-channel scale, so the NPU runs an ordinary W8 per-channel kernel. Excluded weights
// (by default the LM head) get int8 per-channel; activations and the KV cache get
// calibrated min/max encodings (16 / 8 bits). The formula is in lpbq_math.h.
#include <npuforge/plugin.hpp>
#include <npuforge/quant/helpers.h>

#include "lpbq/lpbq_math.h"

namespace lpbq {
namespace {

const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "block_size": {"type": "integer", "minimum": 1, "default": 64,
                   "description": "input channels per block; must divide every quantized weight's input channels (see indivisible)"},
    "indivisible": {"type": "string", "enum": ["error", "per_channel"], "default": "error",
                    "description": "a weight whose input channels block_size does not divide: fail the build, or keep it at int8 per channel"},
    "bw": {"type": "integer", "minimum": 2, "maximum": 8, "default": 4, "description": "bits of the stored blocks"},
    "decompressed_bw": {"type": "integer", "minimum": 3, "maximum": 16, "default": 8,
                        "description": "bits of the per-channel grid the blocks expand to (> bw)"},
    "symmetric": {"type": "boolean", "default": true, "description": "must be true: LPBQ is symmetric only"},
    "exclude": {"type": "array", "items": {"type": "string"}, "default": [],
                "description": "regexes on weight names kept at int8 per channel instead"},
    "exclude_lm_head": {"type": "boolean", "default": true,
                        "description": "keep the linear layer producing logits at int8 per channel"},
    "activation_bw": {"type": "integer", "enum": [8, 16], "default": 16,
                      "description": "bits of the activation encodings (needs [calibration])"},
    "kv_bw": {"type": "integer", "enum": [4, 8, 16], "default": 8,
              "description": "bits of the KV-cache encodings (needs [calibration])"},
    )json" NF_QUANT_ACTIVATION_RANGE_SCHEMA ", " NF_QUANT_LOGITS_BW_SCHEMA R"json(
  }
})json";

struct Planned {
  std::string weight;
  nf::quant::EncodingData enc;
};

struct Settings {
  int64_t block_size;
  int bw, dbw;
  std::vector<std::regex> excludes;
  bool indivisible_per_channel, exclude_lm_head;
};

Settings read_settings(const nf::Options& opts) {
  Settings s{opts.get<int64_t>("block_size", 64), opts.get<int>("bw", 4), opts.get<int>("decompressed_bw", 8),
             nf::quant::compile_patterns("lpbq", opts.get<std::vector<std::string>>("exclude", {})),
             opts.get<std::string>("indivisible", "error") == "per_channel", opts.get<bool>("exclude_lm_head", true)};
  if (!opts.get<bool>("symmetric", true)) throw nf::Error("lpbq: LPBQ is symmetric only (symmetric = false)");
  if (s.dbw <= s.bw)
    throw nf::Error("lpbq: decompressed_bw (" + std::to_string(s.dbw) + ") must be larger than bw (" +
                    std::to_string(s.bw) + ")");
  return s;
}

// Throws when a weight lpbq would block has input channels block_size does not divide.
void check_divisible(const Settings& s, const nf::quant::LinearWeight& lw, bool is_excluded) {
  if (lw.K % s.block_size == 0 || is_excluded || s.indivisible_per_channel) return;
  throw nf::Error("lpbq: block_size " + std::to_string(s.block_size) + " does not divide the " + std::to_string(lw.K) +
                  " input channels of weight '" + lw.name + "' [" + std::to_string(lw.nk ? lw.N : lw.K) + ", " +
                  std::to_string(lw.nk ? lw.K : lw.N) +
                  "] (indivisible = \"per_channel\" keeps such weights at int8 per channel)");
}

std::vector<nf::quant::LinearWeight> weights_of(const nf::ModelSet& ms, bool any_float) {
  auto weights = nf::quant::linear_weights(ms, any_float, /*every_role=*/true);
  if (weights.empty()) throw nf::Error("lpbq: no MatMul/Gemm with a constant 2-D float weight in the model set");
  return weights;
}

void quantize(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx_handle) {
  nf::ModelSet ms(handle);
  nf::Context ctx(ctx_handle);
  nf::Options opts(options_json);
  const Settings settings = read_settings(opts);
  const int64_t block_size = settings.block_size;
  const int bw = settings.bw, dbw = settings.dbw;
  auto weights = weights_of(ms, false);
  std::string lm_head = settings.exclude_lm_head ? nf::quant::lm_head_weight(ms, weights) : "";
  const std::set<std::string> kept = nf::quant::per_channel_weights(ms, weights, lm_head, settings.excludes);

  // Plan every encoding first: a weight that cannot be blocked fails the stage before
  // any encoding is set.
  std::vector<Planned> plan;
  size_t n_lpbq = 0, n_from_blocks = 0, n_indivisible = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& lw = weights[i];
    ctx.progress(i, weights.size(), lw.name);
    nf::Tensor w;
    for (const nf::Graph& g : ms.graphs())
      if ((w = g.initializer(lw.name))) break;
    const bool is_excluded = kept.count(lw.name) > 0;
    const bool indivisible = lw.K % block_size != 0;
    check_divisible(settings, lw, is_excluded);
    if (is_excluded || indivisible) {
      n_indivisible += !is_excluded;
      plan.push_back({lw.name, nf::quant::symmetric_weight_encoding(lw, w, 8, true)});
      continue;
    }
    // A PER_BLOCK encoding of the same blocks (seqmse's per-block search) gives the block
    // scales; otherwise they come from each block's absmax.
    const nf_encoding* prior = ms.encoding(lw.name);
    const bool from_blocks = prior && prior->enc_type == NF_ENC_PER_BLOCK && prior->is_sym &&
                             prior->bw == bw && prior->block_size == block_size &&
                             prior->axis == lw.axis() && prior->block_axis == lw.block_axis() &&
                             prior->num_scales == static_cast<size_t>(lw.N * (lw.K / block_size));
    auto r = from_blocks ? nf::quant::lpbq_from_block_scales(w.data_as<float>(), lw.K, lw.N, lw.nk, block_size, bw, dbw,
                                                             std::vector<float>(prior->scale, prior->scale + prior->num_scales), false)
                         : nf::quant::lpbq_quantize(w.data_as<float>(), lw.K, lw.N, lw.nk, block_size, bw, dbw, false);
    n_from_blocks += from_blocks ? 1 : 0;
    nf::quant::EncodingData e;
    e.type = NF_ENC_LPBQ;
    e.bw = dbw;
    e.compressed_bw = bw;
    e.sym = true;
    e.axis = lw.axis();
    e.block_axis = lw.block_axis();
    e.block_size = static_cast<int>(block_size);
    e.scale = std::move(r.channel_scale);
    e.offset.assign(e.scale.size(), -(1 << (dbw - 1)));
    e.block_ints = std::move(r.block_ints);
    plan.push_back({lw.name, std::move(e)});
    ++n_lpbq;
  }
  for (const auto& p : plan) ms.set_encoding(p.weight, p.enc.view());
  ctx.info(std::to_string(n_lpbq) + " weights at W" + std::to_string(bw) + " blocks of " +
           std::to_string(block_size) + " (int" + std::to_string(dbw) + " per channel), " +
           std::to_string(plan.size() - n_lpbq) + " kept at int8 per channel" +
           (n_from_blocks ? ", " + std::to_string(n_from_blocks) + " from prior PER_BLOCK ranges" : std::string()) +
           (n_indivisible ? ", " + std::to_string(n_indivisible) + " of them because block_size does not divide their input channels"
                          : std::string()) +
           (lm_head.empty() ? "" : " (LM head '" + lm_head + "')"));

  if (!calib) {
    ctx.warn("no [calibration] in the manifest: activation and KV encodings are not set");
    return;
  }
  size_t n = nf::quant::encode_activations(ms, calib, weights, opts.get<int>("activation_bw", 16),
                                           opts.get<int>("kv_bw", 8), ctx,
                                           nf::quant::ActivationRange::from(opts), opts.get<int>("logits_bw", 16));
  ctx.info(std::to_string(n) + " activation/KV encodings from " +
           std::to_string(nf::host().calibration_batch_count(calib)) + " calibration batches");
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx) {
  return NF_TRY(quantize(options_json, handle, calib, ctx));
}

// The options and every weight's blocks, on the model's shapes only.
nf_status* validate(const char* options_json, const nf_model_set* handle, nf_context*) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    const Settings settings = read_settings(nf::Options(options_json));
    auto weights = weights_of(ms, true);
    const std::string lm_head = settings.exclude_lm_head ? nf::quant::lm_head_weight(ms, weights) : "";
    const std::set<std::string> kept = nf::quant::per_channel_weights(ms, weights, lm_head, settings.excludes);
    for (const auto& lw : weights) check_divisible(settings, lw, kept.count(lw.name) > 0);
  });
}

// The weights' encodings need no calibration; the activations' ranges split by batches.
nf_status* shard_count(const char*, size_t wanted, size_t* count) { return NF_TRY(*count = std::max<size_t>(wanted, 1)); }

nf_status* apply_shard(const char*, nf_model_set* handle, nf_calibration* calib, nf_context* ctx, size_t index,
                       size_t count) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    nf::quant::calibrate_activation_part(ms, calib, weights_of(ms, false), nf::Context(ctx), index, count);
  });
}

const nf_quant_api kApi = {NF_ABI_VERSION, sizeof(nf_quant_api), apply, validate, shard_count, apply_shard};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_QUANT,
    "lpbq",
    "0.2.0",
    "low-power blockwise quantization: 4-bit weight blocks with integer scales over an int8 per-channel grid",
    kSchema,
    &kApi,
};

}  // namespace
}  // namespace lpbq

NF_PLUGIN_LIBRARY(&lpbq::kDescriptor)
