// seqmse: sequential MSE choice of weight ranges (aimet seq_mse). Linear layers are taken
// in execution order, grouped by the activation they read (q/k/v share one input); for
// each group the inputs are captured from calibration with every earlier layer already
// quantized ('symqt', 'asym': the calibration runs the weights encoded so far on their
// grids) or from the float model ('symfp'), each weight's clip is searched per channel or
// per block (seqmse_math.h), its encoding is set at the best clip, and the next group runs
// on top (the calibration streams layer by layer, so a group reruns only its own layer).
// Results are encodings: PER_CHANNEL or PER_BLOCK at `weight_bw` for the searched weights,
// int8 PER_CHANNEL for the excluded ones (LM head by default), min/max activation and KV
// encodings. Weights stay float throughout.
//
// Composition with lpbq: run seqmse with granularity = "per_block" and then lpbq with
// the same block_size and bw; lpbq takes each PER_BLOCK scale as its block scale s_blk
// and applies its integer decomposition (see plugins/quant/lpbq/README.md).
#include <npuforge/plugin.hpp>
#include <npuforge/quant/helpers.h>

#include <chrono>
#include <map>

#include "seqmse/seqmse_math.h"

namespace seqmse {
namespace {

const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "num_candidates": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 20,
                       "description": "clip candidates per channel/block: absmax * (i+1)/N, i < N"},
    "num_batches": {"type": "integer", "minimum": 0, "default": 0,
                    "description": "calibration batches the losses use (0: all of [calibration])"},
    "inp_symmetry": {"type": "string", "enum": ["symqt", "symfp", "asym"], "default": "symqt",
                     "description": "symqt: float and quantized layer both on quantized-model inputs; symfp: both on float-model inputs; asym: float layer on float inputs vs quantized layer on quantized inputs"},
    "loss_fn": {"type": "string", "enum": ["mse", "l1", "sqnr"], "default": "mse",
                "description": "output reconstruction loss the search minimizes"},
    "weight_bw": {"type": "integer", "minimum": 2, "maximum": 4, "default": 4,
                  "description": "bits of the searched weights (SeqMSE serves 4 bits or fewer)"},
    "granularity": {"type": "string", "enum": ["per_channel", "per_block"], "default": "per_channel",
                    "description": "one range per output channel, or per (channel, input block); per_block feeds lpbq"},
    "lpbq_decompressed_bw": {"type": "integer", "minimum": 0, "maximum": 16, "default": 0,
                             "description": "per_block feeding lpbq: lpbq's decompressed_bw (8) makes the search score each block on the LPBQ grid (i_blk * s_ch); 0: plain per-block grid"},
    "block_size": {"type": "integer", "minimum": 1, "default": 64,
                   "description": "input channels per block (per_block); must divide every searched weight's input channels"},
    "exclude": {"type": "array", "items": {"type": "string"}, "default": [],
                "description": "regexes on weight names kept at int8 per channel instead"},
    "exclude_lm_head": {"type": "boolean", "default": true,
                        "description": "keep the linear layer producing logits at int8 per channel"},
    "activation_bw": {"type": "integer", "enum": [8, 16], "default": 16,
                      "description": "bits of the activation encodings"},
    "kv_bw": {"type": "integer", "enum": [4, 8, 16], "default": 8, "description": "bits of the KV-cache encodings"},
    )json" NF_QUANT_ACTIVATION_RANGE_SCHEMA ", " NF_QUANT_LOGITS_BW_SCHEMA R"json(
  }
})json";

using nf::quant::LinearWeight;

// The calibration's view of the layers done: with `quantized`, weights that carry an
// encoding run on its grid (model-set metadata calibration_weights = "encoded"), so no
// fake-quantized copy of a weight is kept. Back to float however the search ends.
struct CalibrationWeights {
  nf::ModelSet& ms;
  void set(bool quantized) {
    ms.set_metadata("calibration_weights", quantized ? nlohmann::json("encoded") : nlohmann::json());
  }
  ~CalibrationWeights() {
    try {
      set(false);
    } catch (...) {
    }
  }
};

// Rows [T, K] of activation `name` over the first `batches` calibration batches.
std::vector<float> capture(nf::ModelSet& ms, nf_calibration* calib, const std::string& name, size_t batches,
                           int64_t K, int64_t* rows) {
  std::vector<float> x;
  const char* names[] = {name.c_str()};
  for (size_t b = 0; b < batches; ++b) {
    nf_tensor* out = nullptr;
    nf::check(nf::host().calibration_run(calib, ms.get(), b, names, 1, &out));
    nf::Tensor t = nf::Tensor::adopt(out);
    const size_t count = t.nbytes() / sizeof(float);
    if (t.dtype() != NF_DTYPE_FLOAT32 || count % static_cast<size_t>(K) != 0)
      throw nf::Error("seqmse: input '" + name + "' of a linear layer is not float with " + std::to_string(K) +
                      " features in its last dimension");
    const float* p = t.data_as<float>();
    x.resize(x.size() + count);
    std::copy(p, p + count, x.end() - static_cast<std::ptrdiff_t>(count));
  }
  *rows = static_cast<int64_t>(x.size()) / K;
  return x;
}

// The linear weights and which of them the search covers (not the LM head, an `exclude`
// match or an online rotation's factor). Throws what quantize refuses before calibrating:
// no weight, or a block size that does not divide a searched weight's input channels.
struct Plan {
  std::vector<LinearWeight> weights;
  std::string lm_head;
  std::set<std::string> skipped;
  bool searched(const LinearWeight& lw) const { return !skipped.count(lw.name); }
};

Plan plan_search(const nf::Options& opts, const nf::ModelSet& ms, bool any_float) {
  Plan plan;
  plan.weights = nf::quant::linear_weights(ms, any_float);
  if (plan.weights.empty()) throw nf::Error("seqmse: no MatMul/Gemm with a constant 2-D float weight in the model set");
  plan.lm_head = opts.get<bool>("exclude_lm_head", true) ? nf::quant::lm_head_weight(ms, plan.weights) : "";
  plan.skipped = nf::quant::per_channel_weights(
      ms, plan.weights, plan.lm_head, nf::quant::compile_patterns("seqmse", opts.get<std::vector<std::string>>("exclude", {})));
  const bool per_block = opts.get<std::string>("granularity", "per_channel") == "per_block";
  const int64_t block_size = opts.get<int64_t>("block_size", 64);
  for (const auto& lw : plan.weights)
    if (per_block && plan.searched(lw) && lw.K % block_size != 0)
      throw nf::Error("seqmse: block_size " + std::to_string(block_size) + " does not divide the " +
                      std::to_string(lw.K) + " input channels of weight '" + lw.name + "'");
  return plan;
}

// One group's result: what an interrupted build's rerun takes back from its checkpoint.
struct GroupResult {
  std::vector<nf::quant::EncodingData> encodings;  // one per member, in order
  size_t searched = 0, clip_count = 0;
  double clip_sum = 0;
};

void save_group(const nf::Context& ctx, const std::string& step, const std::vector<const LinearWeight*>& members,
                const GroupResult& r) {
  nlohmann::json j{{"searched", r.searched}, {"clip_sum", r.clip_sum}, {"clip_count", r.clip_count}};
  for (size_t i = 0; i < members.size(); ++i)
    j["weights"].push_back({{"name", members[i]->name}, {"encoding", nf::quant::encoding_to_json(r.encodings[i])}});
  ctx.checkpoint_save(step, nlohmann::json::to_cbor(j));
}

// False (with a warning when one was there) unless the checkpoint holds this group's weights.
bool load_group(const nf::Context& ctx, const std::string& step, const std::vector<const LinearWeight*>& members,
                GroupResult* r) {
  std::vector<uint8_t> bytes;
  if (!ctx.checkpoint_load(step, &bytes)) return false;
  try {
    const nlohmann::json j = nlohmann::json::from_cbor(bytes);
    const auto& weights = j.at("weights");
    if (!weights.is_array() || weights.size() != members.size()) throw std::runtime_error("other weights");
    for (size_t i = 0; i < members.size(); ++i) {
      if (weights[i].at("name").get<std::string>() != members[i]->name) throw std::runtime_error("other weights");
      r->encodings.push_back(nf::quant::encoding_from_json(weights[i].at("encoding")));
      const auto& e = r->encodings.back();
      const int64_t blocks = e.type == NF_ENC_PER_BLOCK && e.block_size > 0 ? members[i]->K / e.block_size : 1;
      if (e.scale.size() != static_cast<size_t>(members[i]->N * blocks)) throw std::runtime_error("scales of another shape");
    }
    r->searched = j.at("searched").get<size_t>();
    r->clip_sum = j.at("clip_sum").get<double>();
    r->clip_count = j.at("clip_count").get<size_t>();
    if (r->searched > members.size()) throw std::runtime_error("more searched weights than the group has");
    return true;
  } catch (const std::exception& e) {
    ctx.warn("checkpoint " + step + " does not fit this model (" + e.what() + "); searching the group again");
    *r = GroupResult{};
    return false;
  }
}

void check_options(const nf::Options& opts) {
  const int bw = opts.get<int>("weight_bw", 4), lpbq_dbw = opts.get<int>("lpbq_decompressed_bw", 0);
  const bool per_block = opts.get<std::string>("granularity", "per_channel") == "per_block";
  if (lpbq_dbw != 0 && (!per_block || lpbq_dbw <= bw))
    throw nf::Error("seqmse: lpbq_decompressed_bw needs granularity = \"per_block\" and a value above weight_bw (" +
                    std::to_string(bw) + ")");
}

// One stage's search: the options, the groups of layers reading one activation (in
// execution order) and how each group is searched.
class Search {
 public:
  Search(const nf::Options& opts, nf::ModelSet& ms, nf_calibration* calib, const nf::Context& ctx)
      : opts_(opts),
        ms_(ms),
        calib_(calib),
        graph_(source_graph(ms, calib)),
        plan_(plan_search(opts, ms, false)),
        calibration_weights_{ms} {
    candidates_ = opts.get<int>("num_candidates", 20);
    symmetry_ = opts.get<std::string>("inp_symmetry", "symqt");
    loss_ = nf::quant::seqmse_loss_from_name(opts.get<std::string>("loss_fn", "mse"));
    bw_ = opts.get<int>("weight_bw", 4);
    per_block_ = opts.get<std::string>("granularity", "per_channel") == "per_block";
    block_size_ = per_block_ ? opts.get<int64_t>("block_size", 64) : 0;
    lpbq_dbw_ = opts.get<int>("lpbq_decompressed_bw", 0);
    available_ = nf::host().calibration_batch_count(calib);
    batches_ = static_cast<size_t>(opts.get<int64_t>("num_batches", 0));
    if (batches_ > available_)
      ctx.warn("num_batches " + std::to_string(batches_) + " > the " + std::to_string(available_) +
               " calibration batches: using all of them");
    if (batches_ == 0 || batches_ > available_) batches_ = available_;
    for (const auto& lw : plan_.weights) {
      if (!groups_.count(lw.input)) order_.push_back(lw.input);
      groups_[lw.input].push_back(&lw);
    }
  }

  size_t group_count() const { return order_.size(); }

  // Group `gi`'s result: from its checkpoint (a shard or an interrupted run of this stage
  // found it) or searched now and saved as one. `resumed` tells which.
  GroupResult group(const nf::Context& ctx, size_t gi, bool* resumed) {
    const std::string step = "group-" + std::to_string(gi);
    GroupResult result;
    *resumed = load_group(ctx, step, members(gi), &result);
    if (!*resumed) {
      result = search(gi);
      save_group(ctx, step, members(gi), result);
    }
    return result;
  }

  // Sets the group's encodings: the layers after it see them (symqt, asym).
  void freeze(size_t gi, const GroupResult& r) {
    for (size_t i = 0; i < members(gi).size(); ++i) ms_.set_encoding(members(gi)[i]->name, r.encodings[i].view());
  }

  const std::vector<const LinearWeight*>& members(size_t gi) const { return groups_.at(order_[gi]); }
  const std::string& input(size_t gi) const { return order_[gi]; }

  // The summary line of a finished search.
  std::string summary(size_t n_searched, size_t n_int8, double clip_sum, size_t clip_count, double secs) const {
    char mean_clip[32], per_group[32];
    std::snprintf(per_group, sizeof per_group, "%.2f", order_.empty() ? 0.0 : secs / static_cast<double>(order_.size()));
    std::snprintf(mean_clip, sizeof mean_clip, "%.3f", clip_count ? clip_sum / static_cast<double>(clip_count) : 1.0);
    return std::to_string(n_searched) + " weights searched at W" + std::to_string(bw_) + " " +
           (per_block_ ? "per block of " + std::to_string(block_size_) : std::string("per channel")) + " (" +
           (lpbq_dbw_ ? "on the LPBQ grid, " : "") + symmetry_ + ", " + opts_.get<std::string>("loss_fn", "mse") + ", " +
           std::to_string(candidates_) + " candidates, " + std::to_string(batches_) + " batches; mean clip " + mean_clip +
           " of absmax) in " + std::to_string(static_cast<int>(secs)) + " s (" + per_group + " s per layer input), " +
           std::to_string(n_int8) + " kept at int8 per channel" +
           (plan_.lm_head.empty() ? "" : " (LM head '" + plan_.lm_head + "')");
  }

  size_t available_batches() const { return available_; }
  const std::vector<LinearWeight>& weights() const { return plan_.weights; }
  void calibrate_on_float() { calibration_weights_.set(false); }

 private:
  // The one decoder graph the search runs on; throws without calibration.
  static nf::Graph source_graph(nf::ModelSet& ms, nf_calibration* calib) {
    if (!calib) throw nf::Error("seqmse: needs [calibration] in the manifest (the search scores layers on calibration inputs)");
    const std::vector<nf::Graph> targets = ms.target_graphs();
    if (targets.size() != 1)
      throw nf::Error("seqmse: runs on the source decoder graph, before the transforms (" +
                      std::to_string(targets.size()) + " graphs in the model set)");
    return targets[0];
  }

  // Captures the input of group `gi` (earlier groups running on their encodings unless
  // symfp) and searches its weights.
  GroupResult search(size_t gi) {
    const auto& group = members(gi);
    bool any_search = false;
    for (auto* lw : group) any_search = any_search || plan_.searched(*lw);
    std::vector<float> x_q, x_ref;
    int64_t T = 0, T_ref = 0;
    const int64_t K = group[0]->K;
    if (any_search) {
      if (symmetry_ == "symfp") {
        x_q = capture(ms_, calib_, order_[gi], batches_, K, &T);
      } else {
        calibration_weights_.set(true);
        x_q = capture(ms_, calib_, order_[gi], batches_, K, &T);
        if (symmetry_ == "asym") {
          calibration_weights_.set(false);
          x_ref = capture(ms_, calib_, order_[gi], batches_, K, &T_ref);
          if (T_ref != T) throw nf::Error("seqmse: float and quantized captures of '" + order_[gi] + "' differ in rows");
        }
      }
    }
    GroupResult result;
    for (auto* lw : group) {
      const nf::Tensor w = graph_.initializer(lw->name);
      nf::quant::EncodingData e;
      if (!plan_.searched(*lw)) {
        e = nf::quant::symmetric_weight_encoding(*lw, w, 8, true);
      } else {
        nf::quant::SeqMseLayer L;
        L.w = w.data_as<float>();
        L.K = lw->K;
        L.N = lw->N;
        L.nk = lw->nk;
        L.bw = bw_;
        L.block_size = block_size_;
        L.candidates = candidates_;
        L.loss = loss_;
        L.x_q = x_q.data();
        L.x_ref = x_ref.empty() ? x_q.data() : x_ref.data();
        L.T = T;
        auto r = lpbq_dbw_ ? nf::quant::seqmse_search_lpbq(L, lpbq_dbw_) : nf::quant::seqmse_search(L);
        for (int c : r.candidate) result.clip_sum += static_cast<double>(c + 1) / candidates_;
        result.clip_count += r.candidate.size();
        e.type = per_block_ ? NF_ENC_PER_BLOCK : NF_ENC_PER_CHANNEL;
        e.bw = bw_;
        e.sym = true;
        e.axis = lw->axis();
        e.block_axis = per_block_ ? lw->block_axis() : -1;
        e.block_size = static_cast<int>(block_size_);
        e.scale = std::move(r.scale);
        e.offset.assign(e.scale.size(), -(1 << (bw_ - 1)));
        ++result.searched;
      }
      result.encodings.push_back(std::move(e));
    }
    return result;
  }

  const nf::Options& opts_;
  nf::ModelSet& ms_;
  nf_calibration* calib_;
  nf::Graph graph_;
  Plan plan_;
  CalibrationWeights calibration_weights_;
  int candidates_ = 20, bw_ = 4, lpbq_dbw_ = 0;
  std::string symmetry_;
  nf::quant::SeqMseLoss loss_{};
  bool per_block_ = false;
  int64_t block_size_ = 0;
  size_t available_ = 0, batches_ = 0;
  std::vector<std::string> order_;
  std::map<std::string, std::vector<const LinearWeight*>> groups_;
};

void quantize(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx_handle) {
  nf::ModelSet ms(handle);
  nf::Context ctx(ctx_handle);
  nf::Options opts(options_json);
  check_options(opts);
  Search search(opts, ms, calib, ctx);

  auto t0 = std::chrono::steady_clock::now();
  size_t n_searched = 0, n_int8 = 0, resumed = 0;
  double clip_sum = 0;
  size_t clip_count = 0;
  for (size_t gi = 0; gi < search.group_count(); ++gi) {
    ctx.progress(gi, search.group_count(), "layer input " + search.input(gi));
    bool from_checkpoint = false;
    const GroupResult result = search.group(ctx, gi, &from_checkpoint);
    resumed += from_checkpoint;
    search.freeze(gi, result);
    n_searched += result.searched;
    n_int8 += search.members(gi).size() - result.searched;
    clip_sum += result.clip_sum;
    clip_count += result.clip_count;
  }
  if (resumed)
    ctx.info(std::to_string(resumed) + " of " + std::to_string(search.group_count()) +
             " layer inputs taken from checkpoints (the stage's shards, or an interrupted run)");
  search.calibrate_on_float();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.info(search.summary(n_searched, n_int8, clip_sum, clip_count, secs));

  size_t n = nf::quant::encode_activations(ms, calib, search.weights(), opts.get<int>("activation_bw", 16), opts.get<int>("kv_bw", 8), ctx,
                                           nf::quant::ActivationRange::from(opts), opts.get<int>("logits_bw", 16));
  ctx.info(std::to_string(n) + " activation/KV encodings from " + std::to_string(search.available_batches()) +
           " calibration batches");
}

// Only symfp splits: its captures are the float model's, so each group's search stands
// alone. symqt and asym capture every group on the groups before it quantized: a chain.
size_t shards_for(const nf::Options& opts, size_t wanted) {
  return opts.get<std::string>("inp_symmetry", "symqt") == "symfp" ? std::max<size_t>(wanted, 1) : 1;
}

// Part `index` of `count`: the groups [index * G / count, (index + 1) * G / count), each
// saved as the checkpoint apply then takes.
void search_shard(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx_handle,
                  size_t index, size_t count) {
  nf::ModelSet ms(handle);
  nf::Context ctx(ctx_handle);
  nf::Options opts(options_json);
  check_options(opts);
  if (shards_for(opts, count) < count || index >= count)
    throw nf::Error("seqmse: part " + std::to_string(index) + " of " + std::to_string(count) +
                    ": these options do not split (inp_symmetry symqt and asym search each layer on the ones before it)",
                    NF_STATUS_INVALID_ARGUMENT);
  Search search(opts, ms, calib, ctx);
  const size_t G = search.group_count(), first = index * G / count, last = (index + 1) * G / count;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t gi = first; gi < last; ++gi) {
    ctx.progress(gi - first, last - first, "layer input " + search.input(gi));
    bool resumed = false;
    search.group(ctx, gi, &resumed);
  }
  // Its share of the activation ranges the stage calibrates after the search (on the float
  // model, as symfp's captures).
  nf::quant::calibrate_activation_part(ms, calib, search.weights(), ctx, index, count);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx.info("part " + std::to_string(index + 1) + " of " + std::to_string(count) + ": layer inputs " +
           std::to_string(first) + ".." + std::to_string(last) + " of " + std::to_string(G) + " searched in " +
           std::to_string(static_cast<int>(secs)) + " s");
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx) {
  return NF_TRY(quantize(options_json, handle, calib, ctx));
}

// The options and every searched weight's blocks, on the model's shapes (no calibration).
nf_status* validate(const char* options_json, const nf_model_set* handle, nf_context*) {
  return NF_TRY({
    const nf::Options opts(options_json);
    check_options(opts);
    plan_search(opts, nf::ModelSet::view(handle), true);
  });
}

nf_status* shard_count(const char* options_json, size_t wanted, size_t* count) {
  return NF_TRY(*count = shards_for(nf::Options(options_json), wanted));
}

nf_status* apply_shard(const char* options_json, nf_model_set* handle, nf_calibration* calib, nf_context* ctx,
                       size_t index, size_t count) {
  return NF_TRY(search_shard(options_json, handle, calib, ctx, index, count));
}

const nf_quant_api kApi = {NF_ABI_VERSION, sizeof(nf_quant_api), apply, validate, shard_count, apply_shard};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_QUANT,
    "seqmse",
    "0.1.0",
    "sequential MSE weight-range search: per-channel or per-block clips chosen layer by layer on calibration inputs",
    kSchema,
    &kApi,
};

}  // namespace
}  // namespace seqmse

NF_PLUGIN_LIBRARY(&seqmse::kDescriptor)
