#include "model_info.h"

#include <npuforge/graph/value_types.h>
#include <npuforge/hf_config.hpp>

#include <algorithm>
#include <set>

namespace arcl {

bool ModelInfo::is_sliding(int64_t layer) const {
  return std::find(sliding_layers.begin(), sliding_layers.end(), layer) != sliding_layers.end();
}

namespace {

// A positive integer of config.json, -1 when absent (npuforge/hf_config.hpp reads it).
int64_t config_int(const nlohmann::json& config, const char* key) {
  return nf::hf_config::get_int(config, key).value_or(-1);
}

// HF semantics: Mistral-style configs slide on every layer; `layer_types` names the
// sliding layers one by one; configs written before layer_types make every
// `sliding_window_pattern`-th layer global (Gemma-3, Cohere2) or spell the period out ("LLLG",
// EXAONE-4.0); Gemma-2 slides on the even layers; Qwen2
// slides from `max_window_layers` on, and only when `use_sliding_window` is set; GPT-Neo names
// its local layers in `attention_layers` and their window in `window_size`.
void read_sliding_window(const nlohmann::json& full_config, ModelInfo& info) {
  const nlohmann::json& config = nf::hf_config::decoder_of(full_config);  // a multimodal config's text_config
  if (!config.is_object()) return;
  if (config.contains("attention_layers") && config["attention_layers"].is_array()) {
    // GPT-Neo: "global" / "local" per layer, the local ones over the last `window_size` keys
    // (the window lives in each layer's causal buffer in the graph, which the mask input replaces).
    const auto& types = config["attention_layers"];
    for (size_t i = 0; i < types.size() && static_cast<int64_t>(i) < info.layers; ++i)
      if (types[i].is_string() && types[i].get<std::string>() == "local") info.sliding_layers.push_back(static_cast<int64_t>(i));
    if (info.sliding_layers.empty()) return;
    info.sliding_window = config_int(config, "window_size");
    if (info.sliding_window <= 0)
      throw nf::Error("arcl: config.json lists local attention_layers but no positive window_size");
    return;
  }
  int64_t window = config_int(config, "sliding_window");
  if (window <= 0) return;
  if (config.contains("use_sliding_window") && config["use_sliding_window"].is_boolean() &&
      !config["use_sliding_window"].get<bool>())
    return;
  info.sliding_window = window;
  if (config.contains("layer_types") && config["layer_types"].is_array()) {
    const auto& types = config["layer_types"];
    for (size_t i = 0; i < types.size() && static_cast<int64_t>(i) < info.layers; ++i)
      if (types[i].is_string() && types[i].get<std::string>() == "sliding_attention")
        info.sliding_layers.push_back(static_cast<int64_t>(i));
    return;
  }
  if (const int64_t pattern = config_int(config, "sliding_window_pattern"); pattern > 0) {
    for (int64_t l = 0; l < info.layers; ++l)
      if ((l + 1) % pattern != 0) info.sliding_layers.push_back(l);
    return;
  }
  if (config.contains("sliding_window_pattern") && config["sliding_window_pattern"].is_string()) {
    // EXAONE-4.0 spells the period out: "LLLG" = three sliding (local) layers, then a global one.
    const std::string pattern = config["sliding_window_pattern"];
    if (pattern.empty() || pattern.find_first_not_of("LG") != std::string::npos)
      throw nf::Error("arcl: config.json sliding_window_pattern '" + pattern +
                      "' is neither a period nor a string of L (sliding) and G (global) layers");
    for (int64_t l = 0; l < info.layers; ++l)
      if (pattern[static_cast<size_t>(l) % pattern.size()] == 'L') info.sliding_layers.push_back(l);
    return;
  }
  if (config.value("model_type", "") == "gemma2") {  // Gemma-2 slides on the even layers
    for (int64_t l = 0; l < info.layers; l += 2) info.sliding_layers.push_back(l);
    return;
  }
  int64_t first = 0;
  if (config.value("model_type", "") == "qwen2") first = std::max<int64_t>(0, config_int(config, "max_window_layers"));
  for (int64_t l = first; l < info.layers; ++l) info.sliding_layers.push_back(l);
}

}  // namespace

ModelInfo read_model_info(const nf::Graph& source, const nlohmann::json& config) {
  ModelInfo info;
  auto inputs = source.inputs();
  std::set<std::string> input_set(inputs.begin(), inputs.end());
  for (const char* required : {nf::decoder::kInputIds, nf::decoder::kAttentionMask})
    if (!input_set.count(required))
      throw nf::Error(std::string("arcl: the source graph has no '") + required +
                      "' input (expected the optimum layout of an HF decoder export)");
  info.has_position_ids = input_set.count(nf::decoder::kPositionIds) != 0;
  if (auto mask = nf::graph::get_value_type(source, nf::decoder::kAttentionMask)) info.mask_dtype = mask->dtype;
  info.first_layer = INT64_MAX;
  for (const std::string& in : inputs)
    if (auto kv = nf::decoder::parse_kv(in); kv && !kv->present) info.first_layer = std::min(info.first_layer, kv->layer);
  if (info.first_layer == INT64_MAX) throw nf::Error("arcl: the source graph has no past_key_values.N.key/value inputs");
  while (input_set.count(info.past_key(info.layers)) && input_set.count(info.past_value(info.layers))) ++info.layers;
  if (info.layers == 0) throw nf::Error("arcl: the source graph has no " + info.past_key(0) + "/value inputs");

  auto key_type = nf::graph::get_value_type(source, info.past_key(0));
  if (!key_type || !key_type->dims || key_type->dims->size() != 4)
    throw nf::Error("arcl: " + info.past_key(0) + " must be rank 4 [batch, kv_heads, past, head_dim]");
  info.kv_dtype = key_type->dtype;
  info.kv_heads = (*key_type->dims)[1];
  info.head_dim = (*key_type->dims)[3];
  if (info.kv_heads <= 0) info.kv_heads = config_int(config, "num_key_value_heads");
  if (info.head_dim <= 0) info.head_dim = config_int(config, "head_dim");
  if (info.kv_heads <= 0 || info.head_dim <= 0)
    throw nf::Error("arcl: cannot tell the KV heads / head_dim from past_key_values.0.key or config.json");

  auto logits = nf::graph::get_value_type(source, nf::decoder::kLogits);
  if (logits && logits->dims && logits->dims->size() == 3 && (*logits->dims)[2] > 0) info.vocab = (*logits->dims)[2];
  else info.vocab = config_int(config, "vocab_size");
  if (info.vocab <= 0) throw nf::Error("arcl: cannot tell the vocabulary size from 'logits' or config.json");

  // Any other input must be fed per row: float32 [batch, sequence, width].
  for (const std::string& in : inputs) {
    if (in == nf::decoder::kInputIds || in == nf::decoder::kAttentionMask || in == nf::decoder::kPositionIds ||
        nf::decoder::is_past_kv(in))
      continue;
    auto t = nf::graph::get_value_type(source, in);
    if (!t || t->dtype != NF_DTYPE_FLOAT32 || !t->dims || t->dims->size() != 3 || (*t->dims)[2] <= 0)
      throw nf::Error("arcl: the source input '" + in + "' is not a decoder input; other inputs must be per-row float32 "
                      "[batch, sequence, width]");
    info.row_inputs.push_back({in, (*t->dims)[2]});
  }

  auto ids = nf::graph::get_value_type(source, nf::decoder::kInputIds);
  if (ids && ids->dims && ids->dims->size() == 2) info.source_seq_len = (*ids->dims)[1];
  read_sliding_window(config, info);
  return info;
}

}  // namespace arcl
