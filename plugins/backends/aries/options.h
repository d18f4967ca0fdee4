// Options of the aries backend, mirroring qb Compiler's compile configuration (device,
// LlmConfig, BitConfig, splitParts/splitBlocks, core mode, presets) and the rules that
// tie them together. resolve() applies the preset, fills the defaults and enforces every
// rule that does not need the model; check_against_model() the ones that do.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

namespace nf::aries {

extern const char* const kSchema;

// The linear-layer kinds of a decoder that BitConfig names, plus the MLP's down projection
// (its input is the activation most often kept at 16 bits).
enum class Kind { query, key, value, output, ffn, head, other };
const char* kind_name(Kind k);

struct LlmConfig {
  bool apply = true;
  int64_t max_sequence_length = 0;  // 0: the graph's static context length
  int64_t max_cache_length = 0;     // 0: as max_sequence_length
  int64_t batch_size = 1;
  bool dynamic_rope = false;
  bool dynamic_mask = false;
};

struct BitConfig {
  int query = 8, key = 8, value = 8, output = 8, ffn = 8, head = 8;
  int of(Kind k) const;
};

struct SearchWeightScale {
  bool apply = false;
  bool query = true, key = true, value = true, out = true, ffn = true;
  bool on(Kind k) const;
};

struct AriesOptions {
  std::string device = "aries-rb";
  std::string device_file;  // a device data file that replaces devices/<device>.json
  std::string preset = "none";
  LlmConfig llm;
  BitConfig bits;
  SearchWeightScale search_weight_scale;
  int64_t split_parts = 0;           // 0: not split by count
  std::vector<int64_t> split_blocks;  // block indices where a new part starts
  std::string core_mode = "single";
  int64_t prefill_chunk = 128;
  // Activations that stay 16-bit: inputs of these linear kinds ("ffn_down" = the MLP's down
  // projection only), and "kv_cache".
  std::vector<std::string> activation_16bit;
  bool estimate_only = false;
  int threads = 0;
  // Recorded preset extras (llm_fast / multimodal); the backend reports them, see README.
  nlohmann::json preset_extras = nlohmann::json::object();

  // Preset, defaults, model-independent rules. Throws Error with one line naming the rule.
  static AriesOptions resolve(const nlohmann::json& j);
  nlohmann::json to_json() const;
  bool act16(const std::string& what) const;
};

}  // namespace nf::aries
