#include "options.h"

#include <algorithm>

namespace nf::aries {

const char* const kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "device": {"type": "string", "enum": ["aries-rb", "regulus-rb"], "default": "aries-rb",
               "description": "Target device (qb Compiler target_device): aries-rb (MLA100 card, 8 local cores) or regulus-rb (SoC, one core)."},
    "device_file": {"type": "string", "default": "",
                    "description": "A device data file (JSON, the layout of devices/aries-rb.json) used instead of the built-in one, for what-if studies."},
    "preset": {"type": "string", "enum": ["none", "llm", "llm_fast", "multimodal"], "default": "none",
               "description": "qb Compiler config preset: llm (llm.apply, max_sequence_length = max_cache_length = 4096), llm_fast (llm + full-sequence calibration, no HessianQuant, equivalent transforms QK/UD/VO/SpinR1/SpinR2/OptimizeFFN), multimodal (llm.apply, calibration method 3). Explicit llm options win over the preset."},
    "llm": {"type": "object", "additionalProperties": false,
            "description": "LlmConfig: sequence/cache lengths and runtime settings.",
            "properties": {
              "apply": {"type": "boolean", "description": "Compile as an LLM with a device KV cache (default true)."},
              "max_sequence_length": {"type": "integer", "minimum": 1, "maximum": 1048576,
                                      "description": "Longest token sequence the package serves (default: the graph's static context length, or the preset's)."},
              "max_cache_length": {"type": "integer", "minimum": 1, "maximum": 1048576,
                                   "description": "KV cache length reserved on the device (default: max_sequence_length)."},
              "batch_size": {"type": "integer", "minimum": 1, "maximum": 64,
                             "description": "Sequences decoded together (default 1); > 1 is compiled in single core mode only."},
              "dynamic_rope": {"type": "boolean", "description": "RoPE positions as a runtime input (default false)."},
              "dynamic_mask": {"type": "boolean", "description": "Attention mask as a runtime input (default false)."}
            }},
    "bits": {"type": "object", "additionalProperties": false,
             "description": "BitConfig.transformer.weight: bits of each projection's weights (8 or 4).",
             "properties": {
               "query": {"type": "integer", "enum": [4, 8], "default": 8, "description": "Bits of the attention query projection's weights."},
               "key": {"type": "integer", "enum": [4, 8], "default": 8, "description": "Bits of the attention key projection's weights."},
               "value": {"type": "integer", "enum": [4, 8], "default": 8, "description": "Bits of the attention value projection's weights."},
               "output": {"type": "integer", "enum": [4, 8], "default": 8, "description": "Bits of the attention output projection's weights."},
               "ffn": {"type": "integer", "enum": [4, 8], "default": 8, "description": "Bits of the feed-forward (gate, up, down) weights."},
               "head": {"type": "integer", "enum": [4, 8], "default": 8, "description": "Bits of the LM head's weights."}
             }},
    "search_weight_scale": {"type": "object", "additionalProperties": false,
             "description": "SearchWeightScaleConfig: per output channel, clip the weight range to the scale with the least squared error (for low-bit weights).",
             "properties": {
               "apply": {"type": "boolean", "default": false, "description": "Search clipped weight scales at all; the switches below pick the projections."},
               "query": {"type": "boolean", "default": true, "description": "Search the query projection's scales (when apply)."},
               "key": {"type": "boolean", "default": true, "description": "Search the key projection's scales (when apply)."},
               "value": {"type": "boolean", "default": true, "description": "Search the value projection's scales (when apply)."},
               "out": {"type": "boolean", "default": true, "description": "Search the attention output projection's scales (when apply)."},
               "ffn": {"type": "boolean", "default": true, "description": "Search the feed-forward weights' scales (when apply)."}
             }},
    "split_parts": {"type": "integer", "minimum": 1, "maximum": 1024,
                    "description": "splitParts: divide the transformer blocks evenly into this many MXQ parts (default: one part). Exclusive with split_blocks."},
    "split_blocks": {"type": "array", "items": {"type": "integer", "minimum": 1},
                     "description": "splitBlocks: block indices where a new MXQ part starts, increasing (default: one part). Exclusive with split_parts."},
    "core_mode": {"type": "string", "enum": ["single", "multi", "global4", "global8"], "default": "single",
                  "description": "Core mode fixed at compile time: single (one core runs the model), multi (a cluster's 4 cores share a 4-batch), global4 / global8 (4 / 8 cores split one input). LLMs with batch_size > 1 are single only; REGULUS is single only."},
    "prefill_chunk": {"type": "integer", "minimum": 1, "maximum": 65536, "default": 128,
                      "description": "Tokens per prefill chunk in the simulator (Mobilint's best measured: single 128, global4 256-512, global8 512)."},
    "activation_16bit": {"type": "array", "default": ["ffn_down"],
                         "items": {"type": "string", "enum": ["query", "key", "value", "output", "ffn", "ffn_down", "head", "kv_cache"]},
                         "description": "Activations kept at 16 bits (all others int8): the input and output of these linear kinds ('ffn' = gate/up/down, 'ffn_down' = the down projection only), and 'kv_cache'."},
    "estimate_only": {"type": "boolean", "default": false,
                      "description": "Record shapes and the bit config for the simulator without quantizing or storing weights (for models too big to compile here); such a package estimates but does not open."},
    "threads": {"type": "integer", "minimum": 0, "default": 0,
                "description": "Host threads of the integer execution (0: all cores)."}
  }
})json";

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::query: return "query";
    case Kind::key: return "key";
    case Kind::value: return "value";
    case Kind::output: return "output";
    case Kind::ffn: return "ffn";
    case Kind::head: return "head";
    default: return "other";
  }
}

int BitConfig::of(Kind k) const {
  switch (k) {
    case Kind::query: return query;
    case Kind::key: return key;
    case Kind::value: return value;
    case Kind::output: return output;
    case Kind::ffn: return ffn;
    case Kind::head: return head;
    default: return 8;
  }
}

bool SearchWeightScale::on(Kind k) const {
  if (!apply) return false;
  switch (k) {
    case Kind::query: return query;
    case Kind::key: return key;
    case Kind::value: return value;
    case Kind::output: return out;
    case Kind::ffn: return ffn;
    default: return false;
  }
}

namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error("aries backend: " + msg); }

template <class T>
void take(const nlohmann::json& j, const char* key, T& into) {
  if (j.is_object() && j.contains(key) && !j[key].is_null()) into = j[key].get<T>();
}

}  // namespace

AriesOptions AriesOptions::resolve(const nlohmann::json& j) {
  AriesOptions o;
  take(j, "device", o.device);
  take(j, "device_file", o.device_file);
  take(j, "preset", o.preset);
  take(j, "core_mode", o.core_mode);
  take(j, "prefill_chunk", o.prefill_chunk);
  take(j, "estimate_only", o.estimate_only);
  take(j, "threads", o.threads);
  if (j.contains("activation_16bit")) o.activation_16bit = j["activation_16bit"].get<std::vector<std::string>>();
  else o.activation_16bit = {"ffn_down"};

  // Presets first; explicit llm options override them.
  if (o.preset == "llm" || o.preset == "llm_fast") {
    o.llm.apply = true;
    o.llm.max_sequence_length = 4096;
    o.llm.max_cache_length = 4096;
    o.preset_extras = {{"calibration", {{"mode", 0}, {"output", 0}}}};
    if (o.preset == "llm_fast")
      o.preset_extras.update({{"hessian_quant", false},
                              {"equivalent_transforms", {"QK", "UD", "VO", "SpinR1", "SpinR2", "OptimizeFFN"}},
                              {"use_full_seq_length", true}});
  } else if (o.preset == "multimodal") {
    o.llm.apply = true;
    o.preset_extras = {{"calibration", {{"method", 3}}}};
  } else if (o.preset != "none") {
    fail("preset '" + o.preset + "' is not one of none, llm, llm_fast, multimodal");
  }
  if (j.contains("llm")) {
    const auto& l = j["llm"];
    take(l, "apply", o.llm.apply);
    take(l, "max_sequence_length", o.llm.max_sequence_length);
    take(l, "max_cache_length", o.llm.max_cache_length);
    take(l, "batch_size", o.llm.batch_size);
    take(l, "dynamic_rope", o.llm.dynamic_rope);
    take(l, "dynamic_mask", o.llm.dynamic_mask);
  }
  if (j.contains("bits")) {
    const auto& b = j["bits"];
    take(b, "query", o.bits.query);
    take(b, "key", o.bits.key);
    take(b, "value", o.bits.value);
    take(b, "output", o.bits.output);
    take(b, "ffn", o.bits.ffn);
    take(b, "head", o.bits.head);
  }
  for (int b : {o.bits.query, o.bits.key, o.bits.value, o.bits.output, o.bits.ffn, o.bits.head})
    if (b != 4 && b != 8) fail("bits: every projection is 8 or 4 bits (BitConfig), got " + std::to_string(b));
  if (j.contains("search_weight_scale")) {
    const auto& s = j["search_weight_scale"];
    take(s, "apply", o.search_weight_scale.apply);
    take(s, "query", o.search_weight_scale.query);
    take(s, "key", o.search_weight_scale.key);
    take(s, "value", o.search_weight_scale.value);
    take(s, "out", o.search_weight_scale.out);
    take(s, "ffn", o.search_weight_scale.ffn);
  }

  // Rules (seed 002: one split strategy per compile; batched LLMs are single-core only;
  // hardware.md: REGULUS is single only).
  bool has_parts = j.contains("split_parts") && !j["split_parts"].is_null();
  bool has_blocks = j.contains("split_blocks") && !j["split_blocks"].is_null();
  if (has_parts && has_blocks)
    fail("split_parts and split_blocks are exclusive: give one split strategy per compile");
  if (has_parts) o.split_parts = j["split_parts"].get<int64_t>();
  if (has_blocks) {
    o.split_blocks = j["split_blocks"].get<std::vector<int64_t>>();
    if (o.split_blocks.empty()) fail("split_blocks is empty: give the block indices where new parts start, or omit it");
    for (size_t i = 1; i < o.split_blocks.size(); ++i)
      if (o.split_blocks[i] <= o.split_blocks[i - 1])
        fail("split_blocks must be strictly increasing, got " + std::to_string(o.split_blocks[i - 1]) + " then " +
             std::to_string(o.split_blocks[i]));
  }
  if (o.core_mode != "single" && o.core_mode != "multi" && o.core_mode != "global4" && o.core_mode != "global8")
    fail("core_mode '" + o.core_mode + "' is not one of single, multi, global4, global8");
  if (o.device != "aries-rb" && o.device != "regulus-rb")
    fail("device '" + o.device + "' is not one of aries-rb, regulus-rb");
  if (o.device == "regulus-rb" && o.core_mode != "single")
    fail("core_mode '" + o.core_mode + "' is not available on regulus-rb: REGULUS has one core and runs single only");
  if (o.llm.apply && o.llm.batch_size > 1 && o.core_mode != "single")
    fail("core_mode '" + o.core_mode + "' with llm.batch_size " + std::to_string(o.llm.batch_size) +
         ": batched LLMs compile in single core mode only (multi, global4 and global8 are refused)");
  if (!o.llm.apply && o.llm.batch_size > 1)
    fail("llm.batch_size " + std::to_string(o.llm.batch_size) + " needs llm.apply = true (the batch is LlmConfig's runtime setting)");
  if (o.llm.max_cache_length == 0) o.llm.max_cache_length = o.llm.max_sequence_length;
  if (o.llm.max_sequence_length > 0 && o.llm.max_cache_length > o.llm.max_sequence_length)
    fail("llm.max_cache_length " + std::to_string(o.llm.max_cache_length) + " exceeds llm.max_sequence_length " +
         std::to_string(o.llm.max_sequence_length) + ": the cache cannot hold more than the longest sequence");
  if (o.llm.max_sequence_length > 0 && o.prefill_chunk > o.llm.max_sequence_length)
    fail("prefill_chunk " + std::to_string(o.prefill_chunk) + " exceeds llm.max_sequence_length " +
         std::to_string(o.llm.max_sequence_length));
  return o;
}

bool AriesOptions::act16(const std::string& what) const {
  return std::find(activation_16bit.begin(), activation_16bit.end(), what) != activation_16bit.end();
}

nlohmann::json AriesOptions::to_json() const {
  nlohmann::json j = {
      {"device", device},
      {"device_file", device_file},
      {"preset", preset},
      {"llm", {{"apply", llm.apply}, {"max_sequence_length", llm.max_sequence_length},
               {"max_cache_length", llm.max_cache_length}, {"batch_size", llm.batch_size},
               {"dynamic_rope", llm.dynamic_rope}, {"dynamic_mask", llm.dynamic_mask}}},
      {"bits", {{"query", bits.query}, {"key", bits.key}, {"value", bits.value}, {"output", bits.output},
                {"ffn", bits.ffn}, {"head", bits.head}}},
      {"search_weight_scale", {{"apply", search_weight_scale.apply}, {"query", search_weight_scale.query},
                               {"key", search_weight_scale.key}, {"value", search_weight_scale.value},
                               {"out", search_weight_scale.out}, {"ffn", search_weight_scale.ffn}}},
      {"core_mode", core_mode},
      {"prefill_chunk", prefill_chunk},
      {"activation_16bit", activation_16bit},
      {"estimate_only", estimate_only},
      {"threads", threads}};
  if (split_parts > 0) j["split_parts"] = split_parts;
  if (!split_blocks.empty()) j["split_blocks"] = split_blocks;
  return j;
}

}  // namespace nf::aries
