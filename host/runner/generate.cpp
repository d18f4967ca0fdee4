#include "runner/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "common/util.h"

namespace nf::host {

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t Sampler::operator()(std::span<const float> logits) {
  if (greedy()) return argmax(logits);
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  size_t k = p_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(p_.top_k), idx.size()) : idx.size();
  // Stable order (by logit, then id) keeps seeded sampling reproducible.
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(), by_logit);
  idx.resize(k);
  std::vector<double> probs(k);
  double maxl = logits[idx[0]], sum = 0;
  for (size_t i = 0; i < k; ++i) sum += probs[i] = std::exp((logits[idx[i]] - maxl) / p_.temperature);
  size_t keep = k;
  if (p_.top_p < 1.f) {
    double mass = 0;
    for (size_t i = 0; i < k; ++i) {
      mass += probs[i] / sum;
      if (mass >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<size_t> pick(probs.begin(), probs.begin() + static_cast<long>(keep));
  return idx[pick(rng_)];
}

std::vector<int32_t> generate(Runner& runner, std::span<const int32_t> prompt, int max_new, Sampler& sampler,
                              std::span<const int32_t> stop_ids, const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats) {
  if (prompt.empty()) throw std::runtime_error("empty prompt: give at least one token");
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  int64_t passes0 = runner.forward_passes();
  double t0 = now_seconds();
  std::vector<float> logits = runner.append(prompt);
  double t1 = now_seconds();
  st.prefill_seconds = t1 - t0;
  std::vector<int32_t> out;
  st.stop_reason = "max_new_tokens";
  for (int i = 0; i < max_new; ++i) {
    if (cancel_flag()) {
      st.stop_reason = "interrupted";
      break;
    }
    int32_t tok = sampler(logits);
    out.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end()) {
      st.stop_reason = "eos";
      break;
    }
    if (i + 1 == max_new) break;
    // The last token fits no more: it came from the logits of a full cache, and nothing
    // follows it.
    if (runner.rows_available() == 0) {
      st.stop_reason = "context_full";
      break;
    }
    logits = runner.append(std::span<const int32_t>(&tok, 1));
  }
  st.decode_seconds = now_seconds() - t1;
  st.new_tokens = static_cast<int64_t>(out.size());
  st.forward_passes = runner.forward_passes() - passes0;
  if (stats) *stats = st;
  return out;
}

PerplexityResult perplexity(Runner& runner, std::span<const int32_t> ids, int window,
                            const std::function<void(int64_t done, int64_t total)>& on_window) {
  if (window < 2) throw std::runtime_error("perplexity window must be at least 2 tokens");
  size_t w = static_cast<size_t>(window);
  if (ids.size() < w)
    throw std::runtime_error("text has " + std::to_string(ids.size()) + " tokens, fewer than one window of " +
                             std::to_string(window));
  PerplexityResult r;
  r.windows_total = static_cast<int64_t>(ids.size() / w);
  double t0 = now_seconds();
  double nll = 0;
  for (size_t start = 0; start + w <= ids.size(); start += w) {
    if (cancel_flag()) {
      r.interrupted = true;
      break;
    }
    runner.reset();
    auto win = ids.subspan(start, w);
    std::vector<float> logits = runner.append(win, true);
    size_t vocab = logits.size() / w;
    for (size_t i = 0; i + 1 < w; ++i) {
      const float* row = logits.data() + i * vocab;
      float m = *std::max_element(row, row + vocab);
      double s = 0;
      for (size_t v = 0; v < vocab; ++v) s += std::exp(static_cast<double>(row[v] - m));
      nll += (std::log(s) + m) - row[win[i + 1]];
      r.top1.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
      ++r.tokens_scored;
    }
    ++r.windows;
    if (on_window) on_window(r.windows, r.windows_total);
  }
  r.mean_nll = r.tokens_scored > 0 ? nll / static_cast<double>(r.tokens_scored) : 0.0;
  r.perplexity = r.tokens_scored > 0 ? std::exp(r.mean_nll) : 0.0;
  r.seconds = now_seconds() - t0;
  runner.reset();
  return r;
}

}  // namespace nf::host
