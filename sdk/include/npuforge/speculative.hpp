// npuforge/speculative.hpp: the step every tree-drafting decoder takes (lade, ssd, eaglet).
//
// A step scores a tree of drafted tokens in one runner forward. Row 0 is the current token
// (the newest accepted one, not yet in the cache); every other row hangs under an earlier
// row. The walk draws the target's token at a row through `sample` and moves to the child
// row that drafted that token; the token drawn where no child did is the bonus token and the
// next step's root. So greedy output equals plain greedy decoding and sampled output keeps
// the target's distribution (the drafts are deterministic). Rows that only compute (lade's
// lookahead window, ssd's forecast chains) are in the forward but never walked.
//
// Near the end of the context a decoder fits its tree to room() rows; when no row is left,
// begin() hands out the current token without a forward and the context has ended, as in
// plain decoding.
#pragma once

#include <npuforge/plugin.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nf {

// The rows of one step's forward.
class DraftTree {
 public:
  explicit DraftTree(int32_t root) : tokens_{root}, parents_{-1}, flags_{0} {}
  // A drafted token under `parent`: the walk may accept it. Returns its row.
  int32_t add_draft(int32_t token, int32_t parent) {
    const int32_t row = add_row(token, parent, 0);
    children_.emplace(std::make_pair(parent, token), row);  // the first row of a token wins
    return row;
  }
  // A row the forward computes but the walk never enters (flags: NF_ROW_*).
  int32_t add_unverified(int32_t token, int32_t parent, uint32_t flags = 0) { return add_row(token, parent, flags); }
  // The draft row under `row` holding `token`, or -1.
  int32_t child(int32_t row, int32_t token) const {
    auto it = children_.find({row, token});
    return it == children_.end() ? -1 : it->second;
  }
  size_t size() const { return tokens_.size(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& parents() const { return parents_; }
  const std::vector<uint32_t>& flags() const { return flags_; }

 private:
  int32_t add_row(int32_t token, int32_t parent, uint32_t flags) {
    if (parent < 0 || static_cast<size_t>(parent) >= tokens_.size()) throw Error("draft tree: parent row out of range");
    tokens_.push_back(token);
    parents_.push_back(parent);
    flags_.push_back(flags);
    return static_cast<int32_t>(tokens_.size() - 1);
  }
  std::vector<int32_t> tokens_, parents_;
  std::vector<uint32_t> flags_;
  std::map<std::pair<int32_t, int32_t>, int32_t> children_;
};

// What a walk accepted: rows from the root down (path[0] = 0) and their tokens (tokens[0] the
// root, the rest accepted drafts).
struct Accepted {
  std::vector<int32_t> path, tokens;
  int32_t last_row() const { return path.back(); }
  size_t drafts() const { return tokens.size() - 1; }
};

// A decoder's step state across steps: the bonus token, the end of the context, the counters
// every decoder reports. One per decoder.
class SpeculativeStep {
 public:
  using Sample = int32_t (*)(void*, const float*);
  SpeculativeStep(std::string decoder, nf_runner* runner)
      : decoder_(std::move(decoder)), runner_(runner), vocab_(host().runner_vocab_size(runner)) {}

  // Starts a step: the current token is the bonus token the last step drew, else drawn from
  // last_logits. False when the context is full: then the token is out[0], uncommitted, and a
  // later step fails (when more than one token was asked for, this one fails already).
  bool begin(float* last_logits, Sample sample, void* user, int32_t* out, size_t max_out) {
    if (max_out == 0) throw Error(decoder_ + ": step with no room for tokens");
    if (ended_) throw Error(decoder_ + ": the context is full (its last token was returned uncommitted)");
    current_ = bonus_ >= 0 ? bonus_ : sample(user, last_logits);
    bonus_ = -1;
    room_ = host().runner_rows_available(runner_);
    if (room_ > 0) return true;
    if (max_out > 1) throw Error(decoder_ + ": the context is full (" + std::to_string(n_past()) + " tokens)");
    ended_ = true;
    out[0] = current_;
    return false;
  }
  int32_t current() const { return current_; }
  // Rows this step's forward may have (the context's room, from begin()).
  size_t room() const { return room_; }
  size_t n_past() const { return host().runner_n_past(runner_); }

  // One runner forward over the tree: logits [rows, vocab].
  const std::vector<float>& forward(const DraftTree& tree) {
    const size_t n = tree.size();
    logits_.resize(n * vocab_);
    const auto& flags = tree.flags();
    if (std::any_of(flags.begin(), flags.end(), [](uint32_t f) { return f != 0; }))
      check(host().runner_forward_flags(runner_, tree.tokens().data(), tree.parents().data(), flags.data(), n,
                                        logits_.data()));
    else
      check(host().runner_forward(runner_, tree.tokens().data(), tree.parents().data(), n, logits_.data()));
    ++forwards_;
    rows_ += n;
    max_rows_ = std::max(max_rows_, n);
    return logits_;
  }
  const float* logits_of(int32_t row) const { return logits_.data() + static_cast<size_t>(row) * vocab_; }

  // Follows the target's tokens down the tree from the root, at most max_out tokens; keeps
  // the token drawn at the first mismatch as the bonus token.
  Accepted walk(const DraftTree& tree, Sample sample, void* user, size_t max_out) {
    Accepted a{{0}, {current_}};
    while (a.tokens.size() < max_out) {
      const int32_t t = sample(user, logits_of(a.last_row()));
      const int32_t next = tree.child(a.last_row(), t);
      if (next < 0) {
        bonus_ = t;
        break;
      }
      a.path.push_back(next);
      a.tokens.push_back(t);
    }
    accepted_drafts_ += a.drafts();
    return a;
  }

  // Keeps the accepted rows in the cache (the rest are rolled back) and leaves the logits after
  // them in last_logits; writes the tokens to out and returns their count.
  size_t commit(const Accepted& a, float* last_logits, int32_t* out) {
    check(host().runner_commit(runner_, a.path.data(), a.path.size()));
    std::copy_n(logits_of(a.last_row()), vocab_, last_logits);
    std::copy(a.tokens.begin(), a.tokens.end(), out);
    return a.tokens.size();
  }

  size_t forwards() const { return forwards_; }
  size_t rows() const { return rows_; }
  size_t max_rows() const { return max_rows_; }
  size_t accepted_drafts() const { return accepted_drafts_; }
  size_t vocab() const { return vocab_; }

 private:
  std::string decoder_;
  nf_runner* runner_;
  size_t vocab_;
  int32_t current_ = -1, bonus_ = -1;
  size_t room_ = 0;
  bool ended_ = false;
  std::vector<float> logits_;
  size_t forwards_ = 0, rows_ = 0, max_rows_ = 0, accepted_drafts_ = 0;
};

}  // namespace nf
