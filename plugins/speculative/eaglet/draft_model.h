// The eaglet draft: fc([embed(token), feature]) -> one Llama decoder layer -> norm -> the
// target's LM head, run with the kernels library over weights read from the package's
// asset (draft.json + draft.bin, written by tools/speculative/train_eaglet.py).
//
// Entry j of the draft's sequence is (feature of target position j, token at j+1) at
// position j. Entries live in two KV stores: the committed cache (entries of accepted
// tokens, kept across steps) and a scratch store for the current step's tree, where an
// entry sees the committed cache, its ancestors and itself.
#pragma once

#include <array>

#include <npuforge/kernels/linear.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace eaglet {

struct DraftConfig {
  int64_t vocab = 0, hidden = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 1e-5f, theta = 10000.f;
};

class DraftModel {
 public:
  // Reads `dir`/draft.json and `dir`/draft.bin; throws nf::Error naming the file and rule.
  // `head_vocab` > 0 keeps only that many LM head rows: the most frequent tokens of the
  // draft's token map (draft.json "token_map"), so a draft pass streams a smaller head.
  DraftModel(const std::string& dir, int64_t head_vocab);

  struct Row {
    const float* feature;  // hidden floats
    int32_t token;
    int64_t position;
    int32_t parent;  // scratch rows: the parent's scratch entry, -1 = only the committed cache
  };
  // Committed rows: appended to the committed cache in order (row i sees rows before it).
  // Scratch rows: each becomes a scratch entry (ids are returned). Writes one output
  // feature (hidden) and one logits row (vocab) per row.
  void run_committed(std::span<const Row> rows, float* features, float* logits);
  std::vector<int32_t> run_scratch(std::span<const Row> rows, float* features, float* logits);

  void clear_scratch();
  void clear_cache();  // committed and scratch
  size_t cache_entries() const { return cached_; }
  const DraftConfig& config() const { return cfg_; }
  // Columns of the logits the draft writes, and the token of each column.
  int64_t head_size() const { return lm_head_.N; }
  int32_t head_token(int64_t column) const {
    return head_tokens_.empty() ? static_cast<int32_t>(column) : head_tokens_[static_cast<size_t>(column)];
  }
  const float* embedding(int32_t token) const { return embed_.data() + static_cast<size_t>(token) * cfg_.hidden; }
  // Bytes of weights one draft pass streams (for cost estimates): every matrix but the
  // embedding table, which is a lookup.
  size_t weight_bytes_per_pass() const;
  // Multiply-adds of one row through the draft's matrices (attention over the cache aside).
  int64_t macs_per_row() const;
  // [K, N] of every matrix a draft pass multiplies by, in order (for backend estimates).
  std::vector<std::array<int64_t, 2>> linear_shapes() const;

 private:
  // Shared body: projections for all rows, attention per row over `visible(i)`.
  template <class Visible, class Store>
  void forward(std::span<const Row> rows, Visible visible, Store store, float* features, float* logits);
  void rope(float* x, int64_t n_heads, int64_t position) const;

  DraftConfig cfg_;
  std::vector<float> embed_, fc_bias_, input_norm_, post_norm_, final_norm_, inv_freq_;
  nf::kernels::PackedWeight fc_, q_, k_, v_, o_, gate_, up_, down_, lm_head_;
  // KV per entry: kv_heads * head_dim floats each.
  std::vector<float> cache_k_, cache_v_, scratch_k_, scratch_v_;
  std::vector<int32_t> scratch_parent_;
  std::vector<int32_t> head_tokens_;  // empty: the full vocabulary
  size_t cached_ = 0;
};

}  // namespace eaglet
