// Generation and evaluation over a Runner: sampling, stop tokens, streaming, perplexity.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runner/runner.h"

namespace nf::host {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy
  int top_k = 0;            // 0: all
  float top_p = 1.f;
  uint64_t seed = 0;
};

// Picks the next token from logits. Greedy takes the first maximum; otherwise softmax at
// the temperature, restricted to top_k then to the smallest set with mass >= top_p.
class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}
  int32_t operator()(std::span<const float> logits);
  bool greedy() const { return p_.temperature <= 0.f; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

int32_t argmax(std::span<const float> logits);

struct GenerateStats {
  int64_t prompt_tokens = 0, new_tokens = 0, forward_passes = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  std::string stop_reason;  // "max_new_tokens" | "stop_token"
};

// Prefills the prompt, then decodes one token per pass until max_new or a stop token
// (the stop token is kept in the output). on_token sees each new token as it comes.
std::vector<int32_t> generate(Runner& runner, std::span<const int32_t> prompt, int max_new, Sampler& sampler,
                              std::span<const int32_t> stop_ids, const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats);

struct PerplexityResult {
  double perplexity = 0, mean_nll = 0;
  int64_t tokens_scored = 0, windows = 0;
  double seconds = 0;
  std::vector<int32_t> top1;  // argmax of every scored row, in order (for agreement with a reference)
};

// Scores `ids` in consecutive non-overlapping windows of `window` tokens (the last partial
// window dropped), each from an empty cache: ppl = exp(mean NLL of every predicted token).
PerplexityResult perplexity(Runner& runner, std::span<const int32_t> ids, int window);

}  // namespace nf::host
