#include "variants.h"

#include <algorithm>

namespace arcl {
namespace {

constexpr int64_t kSclMultiple = 256;
constexpr int64_t kNativeKvArs[] = {32, 64, 128, 256};

// An integer or a list of integers, as a list without repeats (first occurrence kept).
std::vector<int64_t> int_list(const nlohmann::json& j, const char* option) {
  std::vector<int64_t> out;
  auto add = [&](const nlohmann::json& v) {
    if (!v.is_number_integer()) throw nf::Error(std::string("arcl: option '") + option + "' must be an integer or a list of integers");
    int64_t x = v.get<int64_t>();
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  };
  if (j.is_array()) {
    for (const auto& v : j) add(v);
  } else {
    add(j);
  }
  if (out.empty()) throw nf::Error(std::string("arcl: option '") + option + "' is an empty list");
  return out;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

std::string Variant::graph_name() const {
  std::string n = "ar" + std::to_string(ar) + "_cl" + std::to_string(cl);
  if (scl) n += "_scl" + std::to_string(*scl);
  return n;
}

const char* options_schema() {
  return R"schema({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "arn": {
      "description": "rows per forward pass (AR) of each static graph; 0 keeps the source's sequence length",
      "anyOf": [{"type": "integer", "minimum": 0},
                {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}],
      "default": [1, 128]},
    "context_length": {
      "description": "context length (CL): KV cache slots plus the AR rows",
      "anyOf": [{"type": "integer", "minimum": 2},
                {"type": "array", "items": {"type": "integer", "minimum": 2}, "minItems": 1}],
      "default": [4096]},
    "sliding_context_length": {
      "description": "sliding-window models only: context of the sliding layers (SCL), rounded up to a multiple of 256; default ceil(sliding_window / 256) * 256",
      "anyOf": [{"type": "integer", "minimum": 1},
                {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1}]},
    "kv_layout": {
      "description": "KV cache IO layout: hf [1, kv_heads, len, head_dim], or htp (keys [kv_heads, 1, head_dim, len], values [kv_heads, 1, len, head_dim])",
      "type": "string", "enum": ["hf", "htp"], "default": "hf"},
    "native_kv": {
      "description": "HTP native KV cache: every AR must be 32, 64, 128 or 256",
      "type": "boolean", "default": false}
  }
})schema";
}

ArclOptions parse_options(const nf::Options& o) {
  ArclOptions opts;
  const nlohmann::json& j = o.json();
  if (o.has("arn")) opts.arn = int_list(j["arn"], "arn");
  if (o.has("context_length")) opts.context_length = int_list(j["context_length"], "context_length");
  if (o.has("sliding_context_length"))
    opts.sliding_context_length = int_list(j["sliding_context_length"], "sliding_context_length");
  if (o.has("kv_layout")) {
    if (!j["kv_layout"].is_string()) throw nf::Error("arcl: option 'kv_layout' must be \"hf\" or \"htp\"");
    opts.kv_layout = j["kv_layout"].get<std::string>();
    if (opts.kv_layout != "hf" && opts.kv_layout != "htp")
      throw nf::Error("arcl: option 'kv_layout' must be \"hf\" or \"htp\", got \"" + opts.kv_layout + "\"");
  }
  if (o.has("native_kv")) {
    if (!j["native_kv"].is_boolean()) throw nf::Error("arcl: option 'native_kv' must be true or false");
    opts.native_kv = j["native_kv"].get<bool>();
  }
  return opts;
}

std::vector<Variant> plan_variants(const ArclOptions& opts, const ModelInfo& info, const nf::Context& ctx) {
  // AR 0 keeps the source's (static) sequence length.
  std::vector<int64_t> ars;
  for (int64_t ar : opts.arn) {
    if (ar < 0) throw nf::Error("arcl: option 'arn' must be >= 0, got " + std::to_string(ar));
    if (ar == 0) {
      if (info.source_seq_len <= 0)
        throw nf::Error("arcl: option 'arn' = 0 keeps the source sequence length, but the source graph's input_ids has a dynamic sequence length; give the AR values explicitly");
      ar = info.source_seq_len;
    }
    if (std::find(ars.begin(), ars.end(), ar) == ars.end()) ars.push_back(ar);
  }
  if (opts.native_kv)
    for (int64_t ar : ars)
      if (std::find(std::begin(kNativeKvArs), std::end(kNativeKvArs), ar) == std::end(kNativeKvArs))
        throw nf::Error("arcl: option 'native_kv' needs every 'arn' value in {32, 64, 128, 256}, got " + std::to_string(ar));

  const int64_t min_cl = *std::min_element(opts.context_length.begin(), opts.context_length.end());
  const int64_t max_ar = *std::max_element(ars.begin(), ars.end());
  if (max_ar >= min_cl)
    throw nf::Error("arcl: every 'arn' value must be smaller than every 'context_length' value (AR " +
                    std::to_string(max_ar) + " >= CL " + std::to_string(min_cl) + ")");
  // The KV prefix takes P slots of every cache: at least one must be left.
  if (info.prefix_rows > 0 && max_ar + info.prefix_rows >= min_cl)
    throw nf::Error("arcl: the model's " + std::to_string(info.prefix_rows) + " KV prefix rows (role kv_prefix) and AR " +
                    std::to_string(max_ar) + " leave no cache slot in CL " + std::to_string(min_cl));

  // Sliding context lengths: only for sliding-window models.
  std::vector<std::optional<int64_t>> scls{std::nullopt};
  if (opts.sliding_context_length && !info.sliding_window)
    throw nf::Error("arcl: option 'sliding_context_length' is only valid for sliding-window models (config.json has no sliding_window)");
  if (info.sliding_window) {
    const int64_t window = *info.sliding_window;
    std::vector<int64_t> values;
    if (opts.sliding_context_length) {
      for (int64_t v : *opts.sliding_context_length) {
        int64_t rounded = round_up(v, kSclMultiple);
        if (rounded != v)
          ctx.warn("arcl: sliding_context_length " + std::to_string(v) + " rounded up to " + std::to_string(rounded) +
                   " (a multiple of " + std::to_string(kSclMultiple) + ")");
        if (rounded < window || rounded > min_cl)
          throw nf::Error("arcl: option 'sliding_context_length' " + std::to_string(rounded) +
                          " must satisfy sliding_window (" + std::to_string(window) + ") <= SCL <= min(context_length) (" +
                          std::to_string(min_cl) + ")");
        if (std::find(values.begin(), values.end(), rounded) == values.end()) values.push_back(rounded);
      }
    } else {
      int64_t dflt = round_up(window, kSclMultiple);
      if (dflt <= min_cl) {
        values.push_back(dflt);
      } else {
        // The rounded window does not fit the context: a shorter sliding cache would not
        // save anything, so the sliding layers keep the full cache and the runner writes
        // the window into attention_mask.
        ctx.info("arcl: default sliding_context_length " + std::to_string(dflt) + " exceeds min(context_length) " +
                 std::to_string(min_cl) + "; sliding layers use the full context cache and the window goes into attention_mask");
      }
    }
    if (!values.empty()) {
      scls.clear();
      for (int64_t v : values) {
        if (max_ar + info.prefix_rows >= v)
          throw nf::Error("arcl: every 'arn' value" + std::string(info.prefix_rows ? " plus the KV prefix rows" : "") +
                          " must be smaller than 'sliding_context_length' (AR " + std::to_string(max_ar) +
                          (info.prefix_rows ? " + " + std::to_string(info.prefix_rows) : std::string()) + " >= SCL " +
                          std::to_string(v) + ")");
        if (v - max_ar < window - 1)
          ctx.warn("arcl: with AR " + std::to_string(max_ar) + " and SCL " + std::to_string(v) + " the sliding cache (" +
                   std::to_string(v - max_ar) + " slots) is shorter than the window minus one (" +
                   std::to_string(window - 1) + "): the first rows of a pass see a shortened window");
        scls.push_back(v);
      }
    }
  }

  std::vector<Variant> variants;
  for (int64_t ar : ars)
    for (int64_t cl : opts.context_length)
      for (const auto& scl : scls) variants.push_back({ar, cl, scl});
  return variants;
}

}  // namespace arcl
