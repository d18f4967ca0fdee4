// lpbq: low-power blockwise quantization of MatMul/Gemm weights (AIMET's LLM recipe):
// 4-bit blocks along the input channels whose scales are small integers times one
// per-channel scale, so the NPU runs an ordinary W8 per-channel kernel. Excluded weights
// (by default the LM head) get int8 per-channel; activations and the KV cache get
// calibrated min/max encodings (16 / 8 bits). The formula is in lpbq_math.h.
#include <npuforge/parts.hpp>
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

// A weight's encoding and how it was made (the stage's summary counts them).
enum class Made { lpbq, from_blocks, indivisible, excluded };

struct Planned {
  std::string weight;
  nf::quant::EncodingData enc;
  Made made = Made::lpbq;
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

// What the stage encodes and how: the weights, the LM head, the ones kept per channel.
struct Work {
  Settings settings;
  std::vector<nf::quant::LinearWeight> weights;
  std::string lm_head;
  std::set<std::string> kept;
};

Work plan_work(const nf::ModelSet& ms, const nf::Options& opts) {
  Work w{read_settings(opts), weights_of(ms, false), "", {}};
  w.lm_head = w.settings.exclude_lm_head ? nf::quant::lm_head_weight(ms, w.weights) : "";
  w.kept = nf::quant::per_channel_weights(ms, w.weights, w.lm_head, w.settings.excludes);
  return w;
}

// Weight `lw`'s encoding from its floats.
Planned encode_weight(const Work& work, const nf::ModelSet& ms, const nf::quant::LinearWeight& lw) {
  const Settings& settings = work.settings;
  const int64_t block_size = settings.block_size;
  const int bw = settings.bw, dbw = settings.dbw;
  nf::Tensor w;
  for (const nf::Graph& g : ms.graphs())
    if ((w = g.initializer(lw.name))) break;
  const bool is_excluded = work.kept.count(lw.name) > 0;
  const bool indivisible = lw.K % block_size != 0;
  check_divisible(settings, lw, is_excluded);
  if (is_excluded || indivisible)
    return {lw.name, nf::quant::symmetric_weight_encoding(lw, w, 8, true), is_excluded ? Made::excluded : Made::indivisible};
  // A PER_BLOCK encoding of the same blocks (seqmse's per-block search) gives the block
  // scales; otherwise they come from each block's absmax.
  const nf_encoding* prior = ms.encoding(lw.name);
  const bool from_blocks = prior && prior->enc_type == NF_ENC_PER_BLOCK && prior->is_sym && prior->bw == bw &&
                           prior->block_size == block_size && prior->axis == lw.axis() &&
                           prior->block_axis == lw.block_axis() &&
                           prior->num_scales == static_cast<size_t>(lw.N * (lw.K / block_size));
  auto r = from_blocks ? nf::quant::lpbq_from_block_scales(w.data_as<float>(), lw.K, lw.N, lw.nk, block_size, bw, dbw,
                                                           std::vector<float>(prior->scale, prior->scale + prior->num_scales), false)
                       : nf::quant::lpbq_quantize(w.data_as<float>(), lw.K, lw.N, lw.nk, block_size, bw, dbw, false);
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
  return {lw.name, std::move(e), from_blocks ? Made::from_blocks : Made::lpbq};
}

// A part's encoding of a weight is a checkpoint of the stage (whose key fixes the model, the
// options and any prior encoding), named by the weight.
std::string weight_checkpoint(const std::string& name) {
  return nf::CheckpointName("weight-").add(name.data(), name.size()).str();
}

void save_weight(const nf::Context& ctx, const Planned& p) {
  ctx.checkpoint_save(weight_checkpoint(p.weight),
                      nlohmann::json::to_cbor({{"name", p.weight},
                                               {"made", static_cast<int>(p.made)},
                                               {"encoding", nf::quant::encoding_to_json(p.enc)}}));
}

// The part's encoding of `lw`, when one is there and fits the weight (else a warning, and
// the stage encodes it).
bool load_weight(const nf::Context& ctx, const Work& work, const nf::quant::LinearWeight& lw, Planned* p) {
  std::vector<uint8_t> bytes;
  if (!ctx.checkpoint_load(weight_checkpoint(lw.name), &bytes)) return false;
  try {
    const nlohmann::json j = nlohmann::json::from_cbor(bytes);
    const int made = j.at("made").get<int>();
    if (j.at("name").get<std::string>() != lw.name || made < 0 || made > static_cast<int>(Made::excluded))
      throw std::runtime_error("another weight");
    *p = {lw.name, nf::quant::encoding_from_json(j.at("encoding")), static_cast<Made>(made)};
    const bool blocked = p->made == Made::lpbq || p->made == Made::from_blocks;
    const size_t channels = static_cast<size_t>(lw.N);
    const size_t blocks = blocked ? static_cast<size_t>(lw.K / work.settings.block_size) * channels : 0;
    if (p->enc.scale.size() != channels || p->enc.offset.size() != channels || p->enc.block_ints.size() != blocks ||
        p->enc.type != (blocked ? NF_ENC_LPBQ : NF_ENC_PER_CHANNEL) || p->enc.axis != lw.axis())
      throw std::runtime_error("not this weight's shape");
    return true;
  } catch (const std::exception& e) {
    ctx.warn("lpbq: checkpoint " + weight_checkpoint(lw.name) + " of weight '" + lw.name + "' holds other values (" +
             e.what() + "); encoding the weight again");
    return false;
  }
}

void quantize(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx_handle) {
  nf::ModelSet ms(handle);
  nf::Context ctx(ctx_handle);
  nf::Options opts(options_json);
  const Work work = plan_work(ms, opts);
  const auto& weights = work.weights;
  const std::string& lm_head = work.lm_head;
  const int64_t block_size = work.settings.block_size;
  const int bw = work.settings.bw, dbw = work.settings.dbw;

  // Plan every encoding first (taking those the stage's parts made): a weight that cannot be
  // blocked fails the stage before any encoding is set.
  std::vector<Planned> plan;
  for (size_t i = 0; i < weights.size(); ++i) {
    ctx.progress(i, weights.size(), weights[i].name);
    Planned p;
    if (!load_weight(ctx, work, weights[i], &p)) p = encode_weight(work, ms, weights[i]);
    plan.push_back(std::move(p));
  }
  size_t n_lpbq = 0, n_from_blocks = 0, n_indivisible = 0;
  for (const auto& p : plan) {
    n_lpbq += p.made == Made::lpbq || p.made == Made::from_blocks;
    n_from_blocks += p.made == Made::from_blocks;
    n_indivisible += p.made == Made::indivisible;
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

// A part encodes a contiguous share of the weights (about equal value counts) and
// calibrates its share of the batches.
nf_status* shard_count(const char*, size_t wanted, size_t* count) { return NF_TRY(*count = std::max<size_t>(wanted, 1)); }

nf_status* apply_shard(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx_handle,
                       size_t index, size_t count) {
  return NF_TRY({
    const nf::ModelSet ms = nf::ModelSet::view(handle);
    const nf::Context ctx(ctx_handle);
    const Work work = plan_work(ms, nf::Options(options_json));
    std::vector<uint64_t> values;
    for (const auto& lw : work.weights) values.push_back(static_cast<uint64_t>(lw.K * lw.N));
    for (size_t i : nf::part_share(values, index, count)) save_weight(ctx, encode_weight(work, ms, work.weights[i]));
    nf::quant::calibrate_activation_part(ms, calib, work.weights, ctx, index, count);
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
