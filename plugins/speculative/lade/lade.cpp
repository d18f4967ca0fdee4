// lade: lookahead decoding (Fu et al. 2024) over the runner's row calls.
//
// One step is one runner_forward over a tree rooted at row 0 = the current token (the
// newest accepted token, not yet in the cache):
//   lookahead branch: a Jacobi window of N-1 levels x W columns. Level 0 is a chain
//     under row 0 (L0[j] guesses the token j+1 after the current one); L(k)[j] hangs
//     under L(k-1)[j], so every window token sees a causal context at its own position.
//     The target's output after the last level closes the n-gram
//     (L0[j], L1[j], ..., L(N-2)[j], out) which goes into the pool.
//   verification branch: up to G pool n-grams that start with the current token,
//     merged into a trie so a shared prefix is one row.
// The walk down the trie draws the target's token at each node through `sample` once
// and follows the child with that token: greedy output equals plain greedy, and sampled
// output keeps the target's distribution (the draft is deterministic).
//
// Near the end of the context (runner_rows_available) a step that cannot take the whole
// window skips the lookahead branch (the window waits) and verifies only the n-grams that
// fit, down to the root alone; the last token of a full context is returned without a
// forward, as in plain decoding.
#include <npuforge/speculative.hpp>

#include <algorithm>
#include <deque>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

enum class UpdateMode { AlwaysFwdOne, FwdMaxHit, FwdLevel };

constexpr const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "window": {"type": "integer", "minimum": 1, "maximum": 64, "default": 8,
               "description": "W: lookahead window width (columns of the Jacobi window)"},
    "ngram": {"type": "integer", "minimum": 2, "maximum": 16, "default": 3,
              "description": "N: n-gram size; the window has N-1 levels"},
    "gcap": {"type": "integer", "minimum": 0, "maximum": 64, "default": 8,
             "description": "G: most candidate n-grams verified per step (and kept per first token)"},
    "update_mode": {"type": "string", "enum": ["always_fwd_one", "fwd_max_hit", "fwd_level"],
                    "default": "always_fwd_one",
                    "description": "how the window moves per step: one position; as far as the sequence advanced; every level one Jacobi iteration"}
  }
})json";

class Lade {
 public:
  static constexpr const char* kName = "lade";
  Lade(const nf::Options& o, nf_runner* runner, const int32_t* prompt, size_t n_prompt, nf::Context ctx)
      : step_(kName, runner), rng_(0x1ade) {
    W_ = o.get<int>("window", 8);
    N_ = o.get<int>("ngram", 3);
    G_ = o.get<int>("gcap", 8);
    std::string mode = o.get<std::string>("update_mode", "always_fwd_one");
    if (mode == "always_fwd_one") mode_ = UpdateMode::AlwaysFwdOne;
    else if (mode == "fwd_max_hit") mode_ = UpdateMode::FwdMaxHit;
    else if (mode == "fwd_level") mode_ = UpdateMode::FwdLevel;
    else throw nf::Error("lade: unknown update_mode '" + mode + "'");
    size_t max_rows = nf::host().runner_max_rows(runner);
    // Rows per step: 1 + (W + G)(N - 1). Shrink the larger of W and G until it fits.
    auto rows = [&] { return 1 + static_cast<size_t>(W_ + G_) * static_cast<size_t>(N_ - 1); };
    if (1 + static_cast<size_t>(N_ - 1) > max_rows)
      throw nf::Error("lade: ngram " + std::to_string(N_) + " needs more rows than the runner's " +
                      std::to_string(max_rows));
    int W0 = W_, G0 = G_;
    while (rows() > max_rows) {
      if (W_ >= G_ && W_ > 1) --W_;
      else if (G_ > 0) --G_;
      else break;
    }
    if (W_ != W0 || G_ != G0)
      ctx.warn("window " + std::to_string(W0) + " / gcap " + std::to_string(G0) + " need " +
               std::to_string(1 + (W0 + G0) * (N_ - 1)) + " rows, the runner takes " + std::to_string(max_rows) +
               "; using window " + std::to_string(W_) + " / gcap " + std::to_string(G_));
    if (rows() > max_rows) throw nf::Error("lade: the runner takes too few rows for one window column");
    history_.assign(prompt, prompt + n_prompt);
    for (size_t i = 0; i + static_cast<size_t>(N_) <= history_.size(); ++i) add_ngram(&history_[i]);
    // The paper starts the window from random prompt tokens; a fixed seed keeps runs repeatable.
    levels_.assign(static_cast<size_t>(N_ - 1), std::vector<int32_t>(static_cast<size_t>(W_)));
    for (auto& level : levels_)
      for (auto& t : level) t = random_history_token();
  }

  size_t step(float* last_logits, int32_t (*sample)(void*, const float*), void* user, int32_t* out, size_t max_out) {
    if (!step_.begin(last_logits, sample, user, out, max_out)) return 1;
    const size_t N1 = static_cast<size_t>(N_ - 1), W = static_cast<size_t>(W_);
    const size_t room = step_.room();  // near the context's end the step shrinks
    const bool lookahead = 1 + W * N1 <= room;
    bool trimmed = !lookahead;

    // Row 0, then the lookahead window (computed, never walked), then the candidate trie.
    nf::DraftTree tree(step_.current());
    std::vector<std::vector<int32_t>> level_row(N1, std::vector<int32_t>(W));
    if (lookahead) {
      for (size_t j = 0; j < W; ++j)
        level_row[0][j] = tree.add_unverified(levels_[0][j], j == 0 ? 0 : level_row[0][j - 1]);
      for (size_t k = 1; k < N1; ++k)
        for (size_t j = 0; j < W; ++j) level_row[k][j] = tree.add_unverified(levels_[k][j], level_row[k - 1][j]);
    }
    size_t n_candidates = 0;
    if (auto it = pool_.find(step_.current()); it != pool_.end()) {
      // Newest n-grams first: they come from the most recent context.
      for (auto c = it->second.rbegin(); c != it->second.rend() && n_candidates < static_cast<size_t>(G_); ++c) {
        size_t shared = 0;  // leading tokens already in the trie
        for (int32_t node = 0; shared < c->size(); ++shared) {
          node = tree.child(node, (*c)[shared]);
          if (node < 0) break;
        }
        if (tree.size() + c->size() - shared > room) {  // does not fit before the context's end
          trimmed = true;
          continue;
        }
        int32_t node = 0;
        for (int32_t t : *c) {
          const int32_t next = tree.child(node, t);
          node = next >= 0 ? next : tree.add_draft(t, node);
        }
        ++n_candidates;
      }
    }
    step_.forward(tree);
    stats_.candidates += n_candidates;
    if (trimmed && ++stats_.trimmed_steps == 1)
      nf::Context(nullptr).warn("lade: near the end of the context (" + std::to_string(step_.n_past()) +
                                " tokens): steps shrink to the " + std::to_string(room) + " rows that still fit" +
                                (lookahead ? "" : " (the lookahead window waits)"));

    // Jacobi outputs: out(row) is the greedy guess for the slot after that row.
    const size_t vocab = step_.vocab();
    auto out_of = [&](int32_t row) {
      const float* l = step_.logits_of(row);
      return static_cast<int32_t>(std::max_element(l, l + vocab) - l);
    };
    const nf::Accepted accepted = step_.walk(tree, sample, user, max_out);
    if (n_candidates > 0) ++stats_.steps_with_candidates;
    if (lookahead) {
      std::vector<int32_t> gram(static_cast<size_t>(N_));
      for (size_t j = 0; j < W; ++j) {
        for (size_t k = 0; k < N1; ++k) gram[k] = levels_[k][j];
        gram[N1] = out_of(level_row[N1 - 1][j]);
        add_ngram(gram.data());
      }
      update_window(level_row, out_of, accepted.drafts());
    }
    for (int32_t t : accepted.tokens) {
      history_.push_back(t);
      // The committed text's own n-grams: real text repeats itself.
      if (history_.size() >= static_cast<size_t>(N_)) add_ngram(&history_[history_.size() - static_cast<size_t>(N_)]);
    }
    return step_.commit(accepted, last_logits, out);
  }

  std::string stats() const {
    nlohmann::json j{{"window", W_},
                     {"ngram", N_},
                     {"gcap", G_},
                     {"steps", step_.forwards()},
                     {"rows", step_.rows()},
                     {"max_rows", step_.max_rows()},
                     {"candidates_verified", stats_.candidates},
                     {"steps_with_candidates", stats_.steps_with_candidates},
                     {"trimmed_steps", stats_.trimmed_steps},
                     {"accepted_draft_tokens", step_.accepted_drafts()},
                     {"pool_keys", pool_.size()}};
    return j.dump();
  }

 private:
  int32_t random_history_token() {
    std::uniform_int_distribution<size_t> pick(0, history_.size() - 1);
    return history_[pick(rng_)];
  }

  // Keeps the G newest distinct continuations per first token.
  void add_ngram(const int32_t* g) {
    if (G_ == 0) return;
    std::vector<int32_t> rest(g + 1, g + N_);
    auto& list = pool_[g[0]];
    if (auto it = std::find(list.begin(), list.end(), rest); it != list.end()) list.erase(it);
    list.push_back(std::move(rest));
    if (list.size() > static_cast<size_t>(G_)) list.pop_front();
  }

  // Moves the window for the next step. `hit` = draft tokens accepted this step.
  template <class Out>
  void update_window(const std::vector<std::vector<int32_t>>& level_row, Out out_of, size_t hit) {
    const size_t N1 = levels_.size(), W = static_cast<size_t>(W_);
    if (mode_ == UpdateMode::FwdLevel) {
      // Every slot takes the output of its parent row: one full Jacobi iteration, moved
      // one position (out(L(k)[j]) guesses the slot L(k)[j] holds after the shift).
      for (size_t k = 0; k < N1; ++k)
        for (size_t j = 0; j < W; ++j) levels_[k][j] = out_of(level_row[k][j]);
      return;
    }
    // Drop the oldest level, append the outputs of the newest: the window moves one position.
    std::vector<int32_t> newest(W);
    for (size_t j = 0; j < W; ++j) newest[j] = out_of(level_row[N1 - 1][j]);
    levels_.erase(levels_.begin());
    levels_.push_back(std::move(newest));
    if (mode_ == UpdateMode::FwdMaxHit && hit > 0) {
      // The sequence moved 1 + hit positions: shift columns by hit so each column keeps
      // guessing the same absolute positions; the freed tail columns restart from history.
      for (auto& level : levels_) {
        size_t s = std::min(hit, W);
        level.erase(level.begin(), level.begin() + static_cast<long>(s));
        while (level.size() < W) level.push_back(random_history_token());
      }
    }
  }

  struct Counters {
    size_t candidates = 0, steps_with_candidates = 0, trimmed_steps = 0;
  };

  nf::SpeculativeStep step_;
  int W_ = 8, N_ = 3, G_ = 8;
  UpdateMode mode_ = UpdateMode::AlwaysFwdOne;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;                  // prompt + accepted tokens
  std::vector<std::vector<int32_t>> levels_;      // N-1 levels x W tokens
  std::unordered_map<int32_t, std::deque<std::vector<int32_t>>> pool_;  // first token -> continuations
  Counters stats_;
};


const nf_plugin_descriptor kLade = {NF_ABI_VERSION,
                                    sizeof(nf_plugin_descriptor),
                                    NF_KIND_SPECULATIVE,
                                    "lade",
                                    "0.1.0",
                                    "lookahead decoding: Jacobi window n-grams verified in the same pass",
                                    kSchema,
                                    &nf::SpeculativeTable<Lade>::api};

}  // namespace

NF_PLUGIN_LIBRARY(&kLade)
