// The eaglet draft on the host: fc([embed(token), feature]) -> one Llama decoder layer ->
// norm -> the target's LM head, run with the kernels library over the weights of draft.bin
// (written by tools/speculative/train_eaglet.py). Models built before the draft was a graph
// of the model set run it so.
#pragma once

#include <npuforge/kernels/linear.h>

#include "draft.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace eaglet {

class DraftModel final : public Draft {
 public:
  // Reads `dir`/draft.json and `dir`/draft.bin; throws nf::Error naming the file and rule.
  // `head_vocab` > 0 keeps only that many LM head rows: the most frequent tokens of the
  // draft's token map (draft.json "token_map"), so a draft pass streams a smaller head.
  DraftModel(const std::string& dir, int64_t head_vocab);

  void run_committed(std::span<const Row> rows, float* features, float* logits) override;
  std::vector<int32_t> run_scratch(std::span<const Row> rows, float* features, float* logits) override;
  void clear_scratch() override;
  void clear_cache() override;
  int64_t head_size() const override { return lm_head_.N; }
  const char* where() const override { return "host"; }
  const float* embedding(int32_t token) const { return embed_.data() + static_cast<size_t>(token) * cfg_.hidden; }

 private:
  // Shared body: projections for all rows, attention per row over `visible(i)`.
  template <class Visible, class Store>
  void forward(std::span<const Row> rows, Visible visible, Store store, float* features, float* logits);
  void rope(float* x, int64_t n_heads, int64_t position) const;

  std::vector<float> embed_, fc_bias_, input_norm_, post_norm_, final_norm_, inv_freq_;
  nf::kernels::PackedWeight fc_, q_, k_, v_, o_, gate_, up_, down_, lm_head_;
  // KV per entry: kv_heads * head_dim floats each.
  std::vector<float> cache_k_, cache_v_, scratch_k_, scratch_v_;
  std::vector<int32_t> scratch_parent_;
  size_t cached_ = 0;
};

}  // namespace eaglet
