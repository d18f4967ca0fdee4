// The decoder shapes a Hugging Face config.json gives, under the Llama key names whatever
// names the family uses: EXAONE and ChatGLM say num_layers, GPT-style configs n_layer /
// n_embd / n_head, Falcon num_kv_heads or multi_query, ChatGLM multi_query_group_num /
// kv_channels / ffn_hidden_size / padded_vocab_size; multimodal configs keep the decoder in
// text_config. tools/models/hf_config.py holds the same table for the Python tools.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nf::hf_config {

inline const nlohmann::json& decoder_of(const nlohmann::json& config) {
  if (config.is_object() && config.contains("text_config") && config["text_config"].is_object())
    return config["text_config"];
  return config;
}

// Other families' names for a Llama key, in the order they are tried.
inline const std::vector<std::string>& aliases(const std::string& key) {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"num_hidden_layers", {"num_layers", "n_layer", "n_layers"}},
      {"hidden_size", {"n_embd", "d_model", "hidden_dim"}},
      {"num_attention_heads", {"n_head", "n_heads", "num_heads"}},
      {"num_key_value_heads", {"num_kv_heads", "n_head_kv", "multi_query_group_num"}},
      {"intermediate_size", {"ffn_hidden_size", "n_inner", "ffn_dim"}},
      {"vocab_size", {"padded_vocab_size"}},
      {"head_dim", {"kv_channels"}},
  };
  static const std::vector<std::string> none;
  auto it = table.find(key);
  return it == table.end() ? none : it->second;
}

// The positive integer the config gives for a Llama key (num_hidden_layers, hidden_size,
// num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, head_dim) under
// any of its names; nullopt when it gives none (the caller's default applies: all heads for
// num_key_value_heads, hidden_size / heads for head_dim).
inline std::optional<int64_t> get_int(const nlohmann::json& config, const std::string& key) {
  const nlohmann::json& c = decoder_of(config);
  if (!c.is_object()) return std::nullopt;
  auto read = [&](const std::string& k) -> std::optional<int64_t> {
    auto it = c.find(k);
    if (it == c.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) return std::nullopt;
    return it->get<int64_t>();
  };
  if (auto v = read(key)) return v;
  if (key == "num_key_value_heads") {
    // ChatGLM keeps multi_query_group_num when grouped attention is off; Falcon's multi_query is one KV head.
    auto mqa = c.find("multi_query_attention");
    if (mqa != c.end() && mqa->is_boolean() && !mqa->get<bool>() && !read("num_kv_heads"))
      return get_int(config, "num_attention_heads");
  }
  for (const auto& name : aliases(key))
    if (auto v = read(name)) return v;
  if (key == "num_key_value_heads") {
    auto mq = c.find("multi_query");
    if (mq != c.end() && mq->is_boolean() && mq->get<bool>()) return 1;
  }
  return std::nullopt;
}

}  // namespace nf::hf_config
