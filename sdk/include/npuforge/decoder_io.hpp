// The IO contract of a decoder graph, as torch.onnx and optimum export it and every stage of
// npuforge keeps it: inputs input_ids, attention_mask, optionally position_ids, and per
// layer N the KV cache past_key_values.N.key / .value; outputs logits and the updated cache
// present.N.key / .value (the host's runner, the transforms, the quant recipes and the
// backends all read the names from here). Header-only, no dependencies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>
#include <string_view>

namespace nf::decoder {

inline constexpr const char* kInputIds = "input_ids";
inline constexpr const char* kAttentionMask = "attention_mask";
inline constexpr const char* kPositionIds = "position_ids";
inline constexpr const char* kLogits = "logits";
// Dynamic-layout packages also carry the LM head on the last row alone, [batch, 1, vocab]:
// what a runner asks for when it needs no other row's logits (a prefill).
inline constexpr const char* kLastRowLogits = "logits.last_row";
// Static graphs (arcl) with sliding-window layers read their mask from a second input.
inline constexpr const char* kSlidingAttentionMask = "sliding_attention_mask";
// Static graphs of ALiBi models (Bloom) read each key column's absolute position, int64
// [1, CL]: the cache slots, then the pass's rows.
inline constexpr const char* kKeyPositions = "key_positions";
// Static graphs whose model chooses by the sequence's length past what a context holds
// (ONNX Runtime GenAI's LongRoPE tables) read that length per row, int64 [1, AR]: a prompt's
// rows the length at the prompt's end (the model run on the whole prompt), any other row its
// position + 1 (the model run a token at a time).
inline constexpr const char* kSequenceLengths = "sequence_lengths";
inline constexpr std::string_view kPastPrefix = "past_key_values.";
inline constexpr std::string_view kPresentPrefix = "present.";

enum class KvPart { Key, Value };

inline std::string kv_name(std::string_view prefix, int64_t layer, KvPart part) {
  return std::string(prefix) + std::to_string(layer) + (part == KvPart::Key ? ".key" : ".value");
}
inline std::string past_key(int64_t layer) { return kv_name(kPastPrefix, layer, KvPart::Key); }
inline std::string past_value(int64_t layer) { return kv_name(kPastPrefix, layer, KvPart::Value); }
inline std::string present_key(int64_t layer) { return kv_name(kPresentPrefix, layer, KvPart::Key); }
inline std::string present_value(int64_t layer) { return kv_name(kPresentPrefix, layer, KvPart::Value); }

struct KvName {
  int64_t layer = 0;
  KvPart part = KvPart::Key;
  bool present = false;  // an updated-cache output (present.N.*), else a cache input
};

// past_key_values.N.key|value or present.N.key|value; nullopt for any other name.
inline std::optional<KvName> parse_kv(std::string_view name) {
  KvName kv;
  if (name.substr(0, kPastPrefix.size()) == kPastPrefix) {
    name.remove_prefix(kPastPrefix.size());
  } else if (name.substr(0, kPresentPrefix.size()) == kPresentPrefix) {
    name.remove_prefix(kPresentPrefix.size());
    kv.present = true;
  } else {
    return std::nullopt;
  }
  size_t digits = 0;
  int64_t layer = 0;
  for (; digits < name.size() && digits < 9 && name[digits] >= '0' && name[digits] <= '9'; ++digits)
    layer = layer * 10 + (name[digits] - '0');
  if (digits == 0) return std::nullopt;
  name.remove_prefix(digits);
  if (name == ".key") kv.part = KvPart::Key;
  else if (name == ".value") kv.part = KvPart::Value;
  else return std::nullopt;
  kv.layer = layer;
  return kv;
}
inline bool is_past_kv(std::string_view name) {
  auto kv = parse_kv(name);
  return kv && !kv->present;
}
inline bool is_present_kv(std::string_view name) {
  auto kv = parse_kv(name);
  return kv && kv->present;
}
// The cache input a present.N.* output updates, and back.
inline std::string past_of(const KvName& kv) { return kv_name(kPastPrefix, kv.layer, kv.part); }
inline std::string present_of(const KvName& kv) { return kv_name(kPresentPrefix, kv.layer, kv.part); }

// The LM head: the linear layer whose output reaches `logits` through the ops real exports
// put between the two (Cast, Identity, Reshape, a bias Add whose bias comes first, a scale).
// `inputs_of(value)` lists the inputs of the value's producer (none for a graph input, an
// initializer or a Constant); `is_head(value)` says whether a linear layer of the caller's
// kind computes the value. Each step follows the first input that is computed (a bias or
// scale is not). Returns that value, or "" when none is met within kHeadHops producers.
// A callback returning one string (SDK 0.1: the producer's first input) is still accepted.
inline constexpr int kHeadHops = 8;
template <class InputsOf, class IsHead>
std::string lm_head_output(InputsOf inputs_of, IsHead is_head) {
  auto inputs = [&](const std::string& v) {
    if constexpr (std::is_convertible_v<decltype(inputs_of(v)), std::string>) {
      std::string first = inputs_of(v);
      return first.empty() ? std::vector<std::string>{} : std::vector<std::string>{first};
    } else {
      return std::vector<std::string>(inputs_of(v));
    }
  };
  std::string v = kLogits;
  for (int hops = 0; hops < kHeadHops && !v.empty(); ++hops) {
    if (is_head(v)) return v;
    std::string next;
    for (const std::string& in : inputs(v))
      if (!in.empty() && (is_head(in) || !inputs(in).empty())) {
        next = in;
        break;
      }
    v = next;
  }
  return "";
}

}  // namespace nf::decoder
