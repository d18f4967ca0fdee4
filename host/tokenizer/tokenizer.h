// Hugging Face tokenizer.json (BPE models) for the host: encode prompts, decode and stream
// generated tokens. Covers byte-level BPE (GPT-2, Llama-3, Qwen2/3) and byte-fallback BPE
// (Llama-2 / SentencePiece-converted), added and special tokens, and post-processing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nf {

namespace tokenizer_detail {
struct Impl;
}

// Immutable after load except for a mutex-guarded word cache, so one Tokenizer may encode and
// decode from several threads. Copies are cheap and share the loaded data.
class Tokenizer {
 public:
  // Loads tokenizer.json; a tokenizer_config.json beside it (same name with "tokenizer.json"
  // replaced by "tokenizer_config.json") adds add_bos_token/add_eos_token and bos/eos names.
  // Throws std::runtime_error("<path>: <reason>") on a missing file, bad JSON or anything
  // unsupported (the unsupported type is named).
  static Tokenizer load(const std::string& tokenizer_json_path);

  // add_special: apply the post-processor (e.g. prepend BOS). Added tokens written in the
  // text are always recognised.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  // Incremental decode: push() returns the text that became final with this id. Text is held
  // back while it ends in an incomplete character (byte-level and byte-fallback tokens can
  // split one). Concatenating every push() and finish() gives decode(all ids).
  class Stream {
   public:
    std::string push(int32_t id);
    std::string finish();  // whatever was held back

   private:
    friend class Tokenizer;
    Stream(std::shared_ptr<const tokenizer_detail::Impl> impl, bool skip_special)
        : impl_(std::move(impl)), skip_special_(skip_special) {}
    std::shared_ptr<const tokenizer_detail::Impl> impl_;
    bool skip_special_;
    std::vector<int32_t> ids_;
    size_t prefix_ = 0;  // ids_[prefix_, read_) give context; text up to read_ is emitted
    size_t read_ = 0;
  };
  Stream stream(bool skip_special = true) const;

  int32_t vocab_size() const;  // highest id + 1, added tokens included
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // Ids that end generation: eos plus end-of-turn tokens present in the vocab
  // (<|eot_id|>, <|im_end|>, <|endoftext|>, ...).
  std::vector<int32_t> stop_ids() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // "" for an unknown id
  bool is_special(int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer_detail::Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tokenizer_detail::Impl> impl_;  // shared so streams may outlive a copy
};

}  // namespace nf
