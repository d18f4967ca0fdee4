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
  // Why generation ended, each a normal stop: "eos" (a stop token, kept in the output),
  // "max_new_tokens", "context_full" (the runner's context holds no more tokens) or
  // "interrupted" (SIGINT/SIGTERM, seen between tokens).
  std::string stop_reason;
};

// Prefills the prompt, then decodes one token per pass until one of the stop reasons
// above. on_token sees each new token as it comes.
std::vector<int32_t> generate(Runner& runner, std::span<const int32_t> prompt, int max_new, Sampler& sampler,
                              std::span<const int32_t> stop_ids, const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats);

struct PerplexityResult {
  double perplexity = 0, mean_nll = 0;
  int64_t tokens_scored = 0, windows = 0;
  double seconds = 0;
  std::vector<int32_t> top1;  // argmax of every scored row, in order (for agreement with a reference)
  int64_t windows_total = 0;  // windows in the text; more than `windows` when interrupted
  bool interrupted = false;
};

// Scores `ids` in consecutive non-overlapping windows of `window` tokens (the last partial
// window dropped), each from an empty cache: ppl = exp(mean NLL of every predicted token).
// On SIGINT/SIGTERM it stops between windows with `interrupted` set and the windows so far
// scored. on_window(done, total) runs after each window.
PerplexityResult perplexity(Runner& runner, std::span<const int32_t> ids, int window,
                            const std::function<void(int64_t done, int64_t total)>& on_window = {});

}  // namespace nf::host
