#include "options.h"

namespace mha2sha {

const char* options_schema() {
  return R"schema({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "permute_kv_cache_io": {
      "description": "give the KV cache inputs/outputs the HTP layout: keys [n_kv, 1, head_dim, T], values [n_kv, 1, T, head_dim] (what native_kv needs); the runner reads the layout from the package metadata",
      "type": "boolean", "default": false},
    "m2s_additional_start_points": {
      "description": "names of nodes (an attention's Softmax, score MatMul or value MatMul) whose attention is also split per head; by default only attention that reads a past_key_values cache is",
      "type": "array", "items": {"type": "string", "minLength": 1}, "default": []}
  }
})schema";
}

Mha2shaOptions parse_options(const nf::Options& o) {
  Mha2shaOptions opts;
  const nlohmann::json& j = o.json();
  if (o.has("permute_kv_cache_io")) {
    if (!j["permute_kv_cache_io"].is_boolean()) throw nf::Error("mha2sha: option 'permute_kv_cache_io' must be true or false");
    opts.permute_kv_cache_io = j["permute_kv_cache_io"].get<bool>();
  }
  if (o.has("m2s_additional_start_points")) {
    const auto& a = j["m2s_additional_start_points"];
    if (!a.is_array()) throw nf::Error("mha2sha: option 'm2s_additional_start_points' must be a list of node names");
    for (const auto& v : a) {
      if (!v.is_string() || v.get<std::string>().empty())
        throw nf::Error("mha2sha: option 'm2s_additional_start_points' must be a list of non-empty node names");
      opts.additional_start_points.push_back(v.get<std::string>());
    }
  }
  return opts;
}

}  // namespace mha2sha
