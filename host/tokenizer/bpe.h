// The BPE model of tokenizer.json: word -> ids by ranked merges. Internal to host/tokenizer.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nf::tokenizer_detail {

// Lets string-keyed maps be searched with a string_view, without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // `model` is tokenizer.json's "model" object (type BPE). Throws std::runtime_error.
  explicit Bpe(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const StringMap<int32_t>& vocab() const { return vocab_; }
  const std::vector<std::string>& tokens() const { return tokens_; }  // by id, "" for gaps
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::optional<int32_t> find(std::string_view token) const;
  void encode_cached(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> tokens_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  // SentencePiece-converted vocabs have no token with "▁" after another character, so no merge
  // crosses the start of a "▁" run: long words (Llama-2 has no pre-tokenizer, a whole line is
  // one word) can be cut there and merged piece by piece, with the same result.
  bool cut_before_metaspace_ = false;
  int32_t byte_ids_[256];  // <0xNN> tokens for byte fallback, -1 when absent

  // Words seen before, most are short and repeat. Bounded; cleared when full.
  static constexpr size_t kCacheCapacity = 20000;
  static constexpr size_t kCacheMaxWord = 128;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace nf::tokenizer_detail
