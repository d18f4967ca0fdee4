// Shared by the quant recipes in plugins/quant (header-only, SDK only): finding the
// MatMul/Gemm weights, AIMET-convention encodings, and activation ranges from calibration.
//
// Conventions (AIMET, as the cpu backend implements them; see plugins/backends/cpu/README.md):
// real = (q + offset) * scale. A MatMul weight is B = [K in, N out]: channel axis 1, block
// axis 0; a Gemm weight with transB = 1 is [N, K]: channel axis 0, block axis 1. Symmetric
// encodings have scale = absmax / (2^(bw-1) - 1) and offset = -2^(bw-1) (-128 at 8 bits).
#pragma once

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/kv_layers.h>
#include <npuforge/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace nf::quant {

// One linear layer's constant weight.
struct LinearWeight {
  std::string name;    // the initializer
  std::string output;  // the MatMul/Gemm output value
  std::string input;   // the activation input (A)
  int64_t K = 0, N = 0;
  bool nk = false;  // stored [N, K] (Gemm transB)
  int axis() const { return nk ? 0 : 1; }
  int block_axis() const { return nk ? 1 : 0; }
};

// Reads element (k, n) of a weight laid out as described by `lw`.
inline float weight_at(const float* w, const LinearWeight& lw, int64_t k, int64_t n) {
  return lw.nk ? w[n * lw.K + k] : w[k * lw.N + n];
}

// Every MatMul/Gemm whose B input is a 2-D float32 initializer (any float width with
// `any_float`: a validate entry reading shapes of a 16-bit source), over the target's graphs,
// and with `every_role` those of other roles too (a draft's, calibrated on the target's
// features); a weight shared by several graphs is listed once, from the first graph. A MatMul whose B
// is Transpose(initializer, perm [1, 0]) -- the tied LM head, MatMul(h, Transpose(embed)) as
// torch writes it without constant folding -- lists the initializer itself, read as [N, K]:
// its encoding then serves the embedding lookup too, so the tied table is stored once.
inline std::vector<LinearWeight> linear_weights(const ModelSet& ms, bool any_float = false, bool every_role = false) {
  std::vector<LinearWeight> result;
  std::set<std::string> seen;
  std::vector<Graph> graphs = ms.target_graphs();
  if (every_role)
    for (const Graph& g : ms.graphs())
      if (!roles::is_target(ms.metadata(roles::kMetadataKey), g.name())) graphs.push_back(g);
  for (const Graph& g : graphs) {
    std::set<std::string> inits;
    for (auto& n : g.initializer_names()) inits.insert(n);
    std::map<std::string, std::string> transposed_init;  // Transpose output -> its initializer
    for (const Node& node : g.nodes())
      if (node.op_type() == "Transpose" && node.input_count() == 1 && inits.count(node.input(0)) &&
          node.attr_ints("perm", {1, 0}) == std::vector<int64_t>{1, 0})
        transposed_init[node.output(0)] = node.input(0);
    for (const Node& node : g.nodes()) {
      if (node.op_type() != "MatMul" && node.op_type() != "Gemm") continue;
      if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
      std::string b = node.input(1);
      bool through_transpose = false;
      if (!inits.count(b) && node.op_type() == "MatMul" && transposed_init.count(b)) {
        b = transposed_init[b];
        through_transpose = true;
      }
      if (!inits.count(b) || seen.count(b)) continue;
      Tensor t = g.initializer(b);
      const bool is_float = t.dtype() == NF_DTYPE_FLOAT32 ||
                            (any_float && (t.dtype() == NF_DTYPE_FLOAT16 || t.dtype() == NF_DTYPE_BFLOAT16));
      if (!is_float || t.dims().size() != 2) continue;
      bool gemm = node.op_type() == "Gemm";
      if (gemm && node.attr_int("transA", 0) != 0) continue;
      LinearWeight lw;
      lw.name = b;
      lw.output = node.output(0);
      lw.input = node.input(0);
      lw.nk = through_transpose || (gemm && node.attr_int("transB", 0) != 0);
      auto d = t.dims();
      lw.K = lw.nk ? d[1] : d[0];
      lw.N = lw.nk ? d[0] : d[1];
      seen.insert(b);
      result.push_back(lw);
    }
  }
  return result;
}

// The weight of the linear layer that produces `logits` (the LM head, decoder_io.hpp).
// "" when not found.
inline std::string lm_head_weight(const ModelSet& ms, const std::vector<LinearWeight>& weights) {
  std::map<std::string, std::string> weight_of_output;
  for (const auto& lw : weights) weight_of_output.emplace(lw.output, lw.name);
  for (const Graph& g : ms.target_graphs()) {
    std::map<std::string, std::vector<std::string>> inputs;
    for (const Node& n : g.nodes())
      for (auto& o : n.outputs()) inputs.emplace(o, n.inputs());
    std::string head = decoder::lm_head_output(
        [&](const std::string& v) { auto it = inputs.find(v); return it == inputs.end() ? std::vector<std::string>{} : it->second; },
        [&](const std::string& v) { return weight_of_output.count(v) != 0; });
    if (!head.empty()) return weight_of_output.at(head);
  }
  return "";
}

// An encoding's arrays, kept alive while the nf_encoding view is passed to the host.
struct EncodingData {
  nf_enc_type type = NF_ENC_PER_TENSOR;
  int bw = 8;
  bool sym = true;
  int axis = -1, block_axis = -1, block_size = 0, compressed_bw = 0;
  std::vector<float> scale;
  std::vector<int32_t> offset;
  std::vector<int32_t> block_ints;

  nf_encoding view() const {
    nf_encoding e{};
    e.struct_size = sizeof(nf_encoding);
    e.enc_type = type;
    e.is_float = 0;
    e.bw = bw;
    e.is_sym = sym ? 1 : 0;
    e.axis = axis;
    e.block_axis = block_axis;
    e.block_size = block_size;
    e.compressed_bw = compressed_bw;
    e.num_scales = scale.size();
    e.scale = scale.data();
    e.offset = offset.data();
    e.num_block_ints = block_ints.size();
    e.per_block_int_scale = block_ints.empty() ? nullptr : block_ints.data();
    return e;
  }
};

// An encoding as JSON with its arrays as binary (bit-exact), for stage checkpoints; the
// reader throws on anything malformed.
template <class T>
nlohmann::json binary_array(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return nlohmann::json::binary(std::vector<uint8_t>(p, p + v.size() * sizeof(T)));
}
template <class T>
std::vector<T> array_from_binary(const nlohmann::json& j) {
  const auto& b = j.get_binary();
  if (b.size() % sizeof(T) != 0) throw std::runtime_error("binary array of a partial element");
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

inline nlohmann::json encoding_to_json(const EncodingData& e) {
  return {{"type", static_cast<int>(e.type)},
          {"bw", e.bw},
          {"sym", e.sym},
          {"axis", e.axis},
          {"block_axis", e.block_axis},
          {"block_size", e.block_size},
          {"compressed_bw", e.compressed_bw},
          {"scale", binary_array(e.scale)},
          {"offset", binary_array(e.offset)},
          {"block_ints", binary_array(e.block_ints)}};
}

inline EncodingData encoding_from_json(const nlohmann::json& j) {
  EncodingData e;
  e.type = static_cast<nf_enc_type>(j.at("type").get<int>());
  e.bw = j.at("bw").get<int>();
  e.sym = j.at("sym").get<bool>();
  e.axis = j.at("axis").get<int>();
  e.block_axis = j.at("block_axis").get<int>();
  e.block_size = j.at("block_size").get<int>();
  e.compressed_bw = j.at("compressed_bw").get<int>();
  e.scale = array_from_binary<float>(j.at("scale"));
  e.offset = array_from_binary<int32_t>(j.at("offset"));
  e.block_ints = array_from_binary<int32_t>(j.at("block_ints"));
  if (e.offset.size() != e.scale.size()) throw std::runtime_error("an encoding's offsets do not match its scales");
  return e;
}

// Scale of a symmetric `bw`-bit grid covering [-absmax, absmax]; a zero range gets a
// scale of 1 (every weight is then exactly 0 on the grid).
inline float symmetric_scale(float absmax, int bw) {
  float qmax = std::ldexp(1.f, bw - 1) - 1.f;
  return absmax > 0.f ? absmax / qmax : 1.f;
}

// Symmetric per-channel (or per-tensor) encoding of a weight.
// Symmetric int encoding from each output channel's absmax. The weight is read in memory
// order; with `source` (the weight's tensor), each ~32 MiB read leaves memory again, so a
// tied LM head's 1 GB table is never resident whole.
inline EncodingData symmetric_weight_encoding(const LinearWeight& lw, const Tensor& source, int bw, bool per_channel) {
  const float* w = source.data_as<float>();
  std::vector<float> absmax(static_cast<size_t>(lw.N), 0.f);
  const int64_t rows = lw.nk ? lw.N : lw.K, cols = lw.nk ? lw.K : lw.N;  // as stored
  const int64_t block = std::max<int64_t>(1, (int64_t{32} << 20) / (cols * 4));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t r1 = std::min(rows, r0 + block);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float& m = absmax[static_cast<size_t>(lw.nk ? r : c)];
        m = std::max(m, std::fabs(w[r * cols + c]));
      }
    source.drop_pages(static_cast<size_t>(r0 * cols) * 4, static_cast<size_t>((r1 - r0) * cols) * 4);
  }
  EncodingData e;
  e.bw = bw;
  e.sym = true;
  if (per_channel) {
    e.type = NF_ENC_PER_CHANNEL;
    e.axis = lw.axis();
    for (float a : absmax) e.scale.push_back(symmetric_scale(a, bw));
  } else {
    e.type = NF_ENC_PER_TENSOR;
    e.scale.push_back(symmetric_scale(*std::max_element(absmax.begin(), absmax.end()), bw));
  }
  e.offset.assign(e.scale.size(), -(1 << (bw - 1)));
  return e;
}

struct Range {
  float lo = INFINITY, hi = -INFINITY;
};

// How activation ranges are estimated from calibration (AIMET's range estimators):
//   minmax:     the min and max seen;
//   percentile: the (100 - p)th and pth percentiles of all values (outliers clipped);
//   mse:        the range [f lo, f hi], f in (0, 1], of least expected squared
//               quantization error over the values' histogram at the encoding's bit width.
struct ActivationRange {
  enum Method { minmax, percentile, mse } method = minmax;
  double percent = 99.99;  // for percentile

  // Reads "activation_range" and "percentile" from recipe options.
  static ActivationRange from(const Options& opts) {
    ActivationRange r;
    std::string m = opts.get<std::string>("activation_range", "minmax");
    r.method = m == "percentile" ? percentile : m == "mse" ? mse : minmax;
    r.percent = opts.get<double>("percentile", 99.99);
    return r;
  }
};

// JSON-schema properties of ActivationRange, for the recipes' schemas.
#define NF_QUANT_ACTIVATION_RANGE_SCHEMA                                                                   \
  "\"activation_range\": {\"type\": \"string\", \"enum\": [\"minmax\", \"percentile\", \"mse\"], "          \
  "\"default\": \"minmax\", \"description\": \"range estimator of activation and KV encodings\"}, "              \
  "\"percentile\": {\"type\": \"number\", \"minimum\": 50, \"maximum\": 100, \"default\": 99.99, "               \
  "\"description\": \"activation_range = percentile: the percentile kept at each end\"}"

// JSON-schema property "logits_bw", for the recipes' schemas. The LM head's output (the
// logits) spans a wide range that no weight rotation narrows, and at 8 bits its step is a
// sizeable share of the logit differences that decide the next token; AIMET's LLM recipes
// keep it at 16 bits while the other activations go to 8.
#define NF_QUANT_LOGITS_BW_SCHEMA                                                                          \
  "\"logits_bw\": {\"type\": \"integer\", \"enum\": [0, 8, 16], \"default\": 16, "                            \
  "\"description\": \"bits of the LM head output (logits) encoding; 0: activation_bw\"}"

// A value histogram over a fixed range (the min/max of a first pass).
struct Histogram {
  static constexpr int kBins = 2048;
  Range range;
  std::vector<double> count = std::vector<double>(kBins, 0.0);
  double width() const { return (static_cast<double>(range.hi) - range.lo) / kBins; }
  void add(const float* p, size_t n) {
    const double w = width();
    if (!(w > 0)) {
      count[0] += static_cast<double>(n);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      int b = static_cast<int>((p[i] - range.lo) / w);
      count[static_cast<size_t>(std::clamp(b, 0, kBins - 1))] += 1;
    }
  }
  double center(int b) const { return range.lo + (b + 0.5) * width(); }
};

// Runs every calibration batch (or those `only` lists), handing each named float value to
// `visit(index, data, n)` or `visit(index, batch, data, n)`.
// Values are asked for one decoder layer at a time (kv_layer_of_values), each layer over
// every batch: the host's calibration streams the graph segment by segment, so it then
// runs each segment once per batch and hands back one layer's values at a time.
template <class Visit>
void for_each_calibration_value(const ModelSet& ms, nf_calibration* calib, const std::vector<std::string>& names,
                                const Context& ctx, const std::string& what, Visit visit,
                                const std::vector<size_t>* only = nullptr) {
  std::map<int64_t, std::vector<size_t>> by_layer;  // -1: before the first layer's cache
  {
    const auto layer = nf::graph::kv_layer_of_values(nf::graph::GraphView(ms.graph(0)));
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = layer.find(names[i]);
      by_layer[it == layer.end() ? -1 : it->second].push_back(i);
    }
  }
  const size_t batches = host().calibration_batch_count(calib);
  std::vector<size_t> all;
  for (size_t b = 0; b < batches && !only; ++b) all.push_back(b);
  const std::vector<size_t>& run = only ? *only : all;
  const size_t steps = by_layer.size() * run.size();
  size_t step = 0, group = 0;
  for (const auto& [layer, members] : by_layer) {
    ++group;
    std::vector<const char*> cnames;
    for (size_t i : members) cnames.push_back(names[i].c_str());
    for (size_t b : run) {
      ctx.progress(step++, steps, what + " layer group " + std::to_string(group) + "/" + std::to_string(by_layer.size()) +
                                      ", batch " + std::to_string(b + 1) + "/" + std::to_string(batches));
      std::vector<nf_tensor*> out(members.size(), nullptr);
      check(host().calibration_run(calib, ms.get(), b, cnames.data(), cnames.size(), out.data()));
      std::vector<Tensor> owned;
      for (nf_tensor* t : out) owned.push_back(Tensor::adopt(t));
      for (size_t j = 0; j < members.size(); ++j)
        if (owned[j].dtype() == NF_DTYPE_FLOAT32) {
          const float* p = owned[j].data_as<float>();
          const size_t n = owned[j].nbytes() / sizeof(float);
          if constexpr (std::is_invocable_v<Visit, size_t, size_t, const float*, size_t>) visit(members[j], b, p, n);
          else visit(members[j], p, n);
        }
    }
  }
  ctx.progress(steps, steps, what + " done");
}

// Min/max of named values over calibration batches [first, last) (clamped to the batches
// there are), merged. Each batch's ranges are a checkpoint of the stage
// ("activation-ranges-<batch>"): a batch an interrupted run or a part of this stage
// calibrated is taken from it, the others run now and are saved. The merge of min and max
// is exact, so the result does not depend on which batches came from where.
inline std::map<std::string, Range> calibrate_ranges(const ModelSet& ms, nf_calibration* calib,
                                                     const std::vector<std::string>& names, const Context& ctx,
                                                     size_t first = 0, size_t last = SIZE_MAX) {
  last = std::min(last, host().calibration_batch_count(calib));
  std::map<size_t, std::vector<Range>> per_batch;  // batch -> one range per name
  std::vector<size_t> missing;
  auto step = [](size_t b) { return "activation-ranges-" + std::to_string(b); };
  for (size_t b = first; b < last; ++b) {
    std::vector<uint8_t> bytes;
    std::vector<Range>& r = per_batch[b];
    if (ctx.checkpoint_load(step(b), &bytes)) {
      const nlohmann::json j = nlohmann::json::from_cbor(bytes, true, false);
      auto column = [&](const char* key) { return j.is_object() && j.contains(key) && j[key].is_array() && j[key].size() == names.size(); };
      if (column("names") && j["names"] == nlohmann::json(names) && column("lo") && column("hi")) {
        for (size_t i = 0; i < names.size(); ++i)
          r.push_back({j["lo"][i].is_number() ? j["lo"][i].get<float>() : INFINITY,
                       j["hi"][i].is_number() ? j["hi"][i].get<float>() : -INFINITY});
        continue;
      }
      ctx.warn("checkpoint " + step(b) + " holds other values; calibrating the batch again");
    }
    r.assign(names.size(), Range{});
    missing.push_back(b);
  }
  if (!missing.empty()) {
    for_each_calibration_value(
        ms, calib, names, ctx, "calibration",
        [&](size_t i, size_t b, const float* p, size_t n) {
          Range& r = per_batch[b][i];
          for (size_t j = 0; j < n; ++j) {
            r.lo = std::min(r.lo, p[j]);
            r.hi = std::max(r.hi, p[j]);
          }
        },
        &missing);
    for (size_t b : missing) {
      nlohmann::json lo = nlohmann::json::array(), hi = nlohmann::json::array();
      for (const Range& r : per_batch[b]) {  // a value no row reached stays null
        lo.push_back(r.lo <= r.hi ? nlohmann::json(r.lo) : nlohmann::json());
        hi.push_back(r.lo <= r.hi ? nlohmann::json(r.hi) : nlohmann::json());
      }
      ctx.checkpoint_save(step(b), nlohmann::json::to_cbor({{"names", names}, {"lo", lo}, {"hi", hi}}));
    }
  }
  std::map<std::string, Range> ranges;
  for (size_t i = 0; i < names.size(); ++i) {
    Range& r = ranges[names[i]];
    for (const auto& [b, batch] : per_batch) {
      r.lo = std::min(r.lo, batch[i].lo);
      r.hi = std::max(r.hi, batch[i].hi);
    }
  }
  return ranges;
}

// The percentile range of a histogram: values below the (100-p)th / above the pth percentile clipped.
inline Range percentile_range(const Histogram& h, double p) {
  double total = 0;
  for (double c : h.count) total += c;
  const double tail = total * (100.0 - p) / 100.0;
  Range r = h.range;
  double acc = 0;
  for (int b = 0; b < Histogram::kBins; ++b) {
    acc += h.count[static_cast<size_t>(b)];
    if (acc > tail) {
      r.lo = static_cast<float>(h.range.lo + b * h.width());
      break;
    }
  }
  acc = 0;
  for (int b = Histogram::kBins - 1; b >= 0; --b) {
    acc += h.count[static_cast<size_t>(b)];
    if (acc > tail) {
      r.hi = static_cast<float>(h.range.lo + (b + 1) * h.width());
      break;
    }
  }
  return r;
}

// Asymmetric per-tensor encoding of a range (AIMET: the range is widened to hold 0, then
// scale = (max - min) / (2^bw - 1), offset = round(min / scale)).
inline EncodingData asymmetric_tensor_encoding(float lo, float hi, int bw);

// Expected squared quantization error of the histogram's values on `e`'s grid.
inline double histogram_quant_error(const Histogram& h, const EncodingData& e) {
  const double s = e.scale[0], qmax = std::ldexp(1.0, e.bw) - 1;
  double err = 0;
  for (int b = 0; b < Histogram::kBins; ++b) {
    const double c = h.count[static_cast<size_t>(b)];
    if (c == 0) continue;
    const double v = h.center(b);
    const double q = std::clamp(std::nearbyint(v / s) - e.offset[0], 0.0, qmax);
    const double d = v - (q + e.offset[0]) * s;
    err += c * d * d;
  }
  return err;
}

// The range [f lo, f hi] of least histogram_quant_error, f from 1 down to 0.2 in steps of 0.01.
inline Range mse_range(const Histogram& h, int bw) {
  Range best = h.range;
  double best_err = INFINITY;
  for (int step = 0; step <= 80; ++step) {
    const float f = 1.f - 0.01f * static_cast<float>(step);
    EncodingData e = asymmetric_tensor_encoding(h.range.lo * f, h.range.hi * f, bw);
    const double err = histogram_quant_error(h, e);
    if (err < best_err) {
      best_err = err;
      best = {h.range.lo * f, h.range.hi * f};
    }
  }
  return best;
}

inline EncodingData asymmetric_tensor_encoding(float lo, float hi, int bw) {
  lo = std::min(lo, 0.f);
  hi = std::max(hi, 0.f);
  double steps = std::ldexp(1.0, bw) - 1.0;
  double scale = hi > lo ? (static_cast<double>(hi) - lo) / steps : 1.0;
  EncodingData e;
  e.type = NF_ENC_PER_TENSOR;
  e.bw = bw;
  e.sym = false;
  e.scale.push_back(static_cast<float>(scale));
  e.offset.push_back(static_cast<int32_t>(std::nearbyint(lo / scale)));
  return e;
}

// Inputs of the online rotations spinquant inserted (`online_down_proj`; model-set metadata
// "online_rotations": [{"weight", "input", "output", "inner"}], one entry per MatMul of a
// rotation), and the outputs of its inner MatMuls. They get at least 16 bits: the rotation
// is computed on the unquantized activation (as QuaRot's online Hadamard), and the act_bw
// grid applies to its rotated output, the input of the layer it feeds.
inline std::set<std::string> online_rotation_inputs(const ModelSet& ms) {
  std::set<std::string> values;
  nlohmann::json rot = ms.metadata("online_rotations");
  if (rot.is_array())
    for (const auto& r : rot) {
      if (!r.is_object()) continue;
      if (r.contains("input") && r["input"].is_string()) values.insert(r["input"].get<std::string>());
      if (r.value("inner", false) && r.contains("output") && r["output"].is_string())
        values.insert(r["output"].get<std::string>());
    }
  return values;
}

// The Hadamard factors of those rotations: every entry +-1/sqrt(order), exact at int8 per
// channel, so recipes keep them there (no 4-bit blocks, no search).
inline std::set<std::string> online_rotation_weights(const ModelSet& ms) {
  std::set<std::string> weights;
  nlohmann::json rot = ms.metadata("online_rotations");
  if (rot.is_array())
    for (const auto& r : rot)
      if (r.is_object() && r.contains("weight") && r["weight"].is_string()) weights.insert(r["weight"].get<std::string>());
  return weights;
}

// The weights a recipe keeps at int8 per channel instead of its own scheme (lpbq's blocks,
// seqmse's search): the LM head (`lm_head`, "" for none), those an `exclude` pattern
// matches, and the online rotations' factors.
inline std::set<std::string> per_channel_weights(const ModelSet& ms, const std::vector<LinearWeight>& weights,
                                                 const std::string& lm_head, const std::vector<std::regex>& excludes) {
  std::set<std::string> names = online_rotation_weights(ms);
  for (const auto& lw : weights) {
    bool keep = lw.name == lm_head;
    for (const auto& re : excludes) keep = keep || std::regex_search(lw.name, re);
    if (keep) names.insert(lw.name);
  }
  return names;
}

// The values encode_activations encodes: the inputs and outputs of every linear layer (of
// every use of a weight several graphs read: a draft's shared LM head) and every graph's
// present.N.key|value outputs (`kv`; a draft numbers its cache after the target's).
struct ActivationValues {
  std::vector<std::string> names, kv;
};
inline ActivationValues activation_values(const ModelSet& ms, const std::vector<LinearWeight>& weights) {
  ActivationValues v;
  auto add = [&](const std::string& n) {
    if (!n.empty() && std::find(v.names.begin(), v.names.end(), n) == v.names.end()) v.names.push_back(n);
  };
  for (const auto& lw : weights) {
    add(lw.input);
    add(lw.output);
  }
  std::set<std::string> weight_names;
  for (const auto& lw : weights) weight_names.insert(lw.name);
  for (const Graph& g : ms.graphs())
    for (const Node& n : g.nodes())
      if ((n.op_type() == "MatMul" || n.op_type() == "Gemm") && n.input_count() >= 2 && weight_names.count(n.input(1))) {
        add(n.input(0));
        add(n.output(0));
      }
  for (const Graph& g : ms.graphs())
    for (const std::string& o : g.outputs())
      if (decoder::is_present_kv(o) && std::find(v.kv.begin(), v.kv.end(), o) == v.kv.end()) {
        add(o);
        v.kv.push_back(o);
      }
  return v;
}

// Part `index` of `count` of a stage whose recipe splits its work (nf_quant_api
// apply_shard): the min/max ranges of encode_activations' values over that part's share of
// the calibration batches, left as the stage's checkpoints; encode_activations takes them
// instead of running those batches again (its first pass: percentile and mse still run
// their histogram pass over every batch).
inline void calibrate_activation_part(const ModelSet& ms, nf_calibration* calib, const std::vector<LinearWeight>& weights,
                                      const Context& ctx, size_t index, size_t count) {
  if (!calib || count == 0) return;
  const size_t batches = host().calibration_batch_count(calib);
  calibrate_ranges(ms, calib, activation_values(ms, weights).names, ctx, index * batches / count,
                   (index + 1) * batches / count);
}

// Records activation encodings (inputs and outputs of every linear layer at act_bw, the
// present.N.key|value outputs at kv_bw, mirrored onto past_key_values.N.*) from calibration,
// with ranges from `estimator` (a second calibration pass for percentile and mse).
// The LM head's output gets `logits_bw` bits (0: act_bw), the inputs of online rotations at
// least 16 (online_rotation_inputs). Returns how many were set.
inline size_t encode_activations(ModelSet& ms, nf_calibration* calib, const std::vector<LinearWeight>& weights,
                                 int act_bw, int kv_bw, const Context& ctx, ActivationRange estimator = {},
                                 int logits_bw = 0) {
  std::string logits;
  const std::string lm_head = lm_head_weight(ms, weights);
  for (const auto& lw : weights)
    if (lw.name == lm_head) logits = lw.output;
  const std::set<std::string> rotation_inputs = online_rotation_inputs(ms);
  auto bw_of = [&](const std::string& name, bool is_kv) {
    if (is_kv) return kv_bw;
    if (rotation_inputs.count(name)) return std::max(act_bw, 16);
    return (logits_bw > 0 && name == logits) ? logits_bw : act_bw;
  };
  const ActivationValues values = activation_values(ms, weights);
  const std::vector<std::string>& names = values.names;
  const std::vector<std::string>& kv = values.kv;
  auto ranges = calibrate_ranges(ms, calib, names, ctx);
  if (estimator.method != ActivationRange::minmax) {
    std::vector<Histogram> hist(names.size());
    for (size_t i = 0; i < names.size(); ++i) hist[i].range = ranges[names[i]];
    for_each_calibration_value(ms, calib, names, ctx, "histograms",
                               [&](size_t i, const float* p, size_t n) { hist[i].add(p, n); });
    for (size_t i = 0; i < names.size(); ++i) {
      if (!(hist[i].range.lo <= hist[i].range.hi)) continue;
      bool is_kv = std::find(kv.begin(), kv.end(), names[i]) != kv.end();
      ranges[names[i]] = estimator.method == ActivationRange::percentile
                             ? percentile_range(hist[i], estimator.percent)
                             : mse_range(hist[i], bw_of(names[i], is_kv));
    }
  }
  size_t count = 0;
  for (const auto& [name, r] : ranges) {
    if (!(r.lo <= r.hi)) continue;
    bool is_kv = std::find(kv.begin(), kv.end(), name) != kv.end();
    EncodingData e = asymmetric_tensor_encoding(r.lo, r.hi, bw_of(name, is_kv));
    ms.set_encoding(name, e.view());
    ++count;
    if (is_kv) {  // present.N.key -> past_key_values.N.key
      ms.set_encoding(decoder::past_of(*decoder::parse_kv(name)), e.view());
      ++count;
    }
  }
  return count;
}

// Compiles a list of regexes from options; names the bad one on error.
inline std::vector<std::regex> compile_patterns(const std::string& recipe, const std::vector<std::string>& patterns) {
  std::vector<std::regex> r;
  for (const auto& p : patterns) {
    try {
      r.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(recipe + ": invalid regex '" + p + "': " + e.what());
    }
  }
  return r;
}

}  // namespace nf::quant
