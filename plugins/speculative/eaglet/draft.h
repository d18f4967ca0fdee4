// What the decoder asks of a draft, whichever runs it: the draft graph of the model set on
// the backend session (GraphDraft), or draft.bin on the host CPU (DraftModel), for models
// built before the draft was a graph.
//
// Entry j of the draft's sequence is (feature of target position j, token at j+1) at
// position j. Committed entries (accepted tokens) are kept across steps; scratch entries are
// the current step's tree, where an entry sees the committed entries, its ancestors and
// itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace eaglet {

struct DraftConfig {
  int64_t vocab = 0, hidden = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 1e-5f, theta = 10000.f;
  // draft.json "confidence_scale" (default 1): the draft's logits are multiplied by it before
  // the softmax whose cumulative probabilities rank the tree's nodes (fitted by the trainer
  // to the target's greedy token; the order of one node's children does not change).
  float confidence_scale = 1.f;
};

struct DraftFile {
  std::string path;  // `dir`/draft.json
  nlohmann::json meta;
  DraftConfig config;
};
// `dir`/draft.json, read once; throws nf::Error naming the file and the rule.
DraftFile read_draft_file(const std::string& dir);
// Tokens of the first `n` logits columns when the draft scores a reduced vocabulary:
// draft.json's token_map prefix (empty when n is the whole vocabulary).
std::vector<int32_t> head_tokens(const DraftFile& file, int64_t n, int64_t vocab);

struct Row {
  const float* feature;  // hidden floats
  int32_t token;
  int64_t position;
  int32_t parent;  // scratch rows: the parent's scratch entry, -1 = only the committed entries
};

// Rows as one chain (each sees the ones before it), as a runner call takes them.
struct Chain {
  std::vector<int32_t> tokens, parents, rows;  // rows 0 .. n-1: what a commit keeps
  std::vector<float> features;                 // n x hidden
};
inline Chain chain_of(std::span<const Row> rows, size_t hidden) {
  Chain c;
  for (size_t i = 0; i < rows.size(); ++i) {
    c.tokens.push_back(rows[i].token);
    c.parents.push_back(static_cast<int32_t>(i) - 1);
    c.rows.push_back(static_cast<int32_t>(i));
    c.features.insert(c.features.end(), rows[i].feature, rows[i].feature + hidden);
  }
  return c;
}

// A count of passes (or calls) by their rows: {"rows": count, ...} for the stats, and the total.
inline nlohmann::json counts_json(const std::map<int64_t, int64_t>& by_rows) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [rows, n] : by_rows) j[std::to_string(rows)] = n;
  return j;
}
inline size_t counts_total(const std::map<int64_t, int64_t>& by_rows) {
  size_t total = 0;
  for (const auto& [rows, n] : by_rows) total += static_cast<size_t>(n);
  return total;
}

class Draft {
 public:
  virtual ~Draft() = default;
  // Committed rows are appended in order (row i sees the rows before it); scratch rows each
  // become a scratch entry (ids returned). One output feature (hidden) and one logits row
  // (head_size) per row.
  virtual void run_committed(std::span<const Row> rows, float* features, float* logits) = 0;
  virtual std::vector<int32_t> run_scratch(std::span<const Row> rows, float* features, float* logits) = 0;
  virtual void clear_scratch() = 0;
  virtual void clear_cache() = 0;  // committed and scratch
  virtual int64_t head_size() const = 0;
  virtual const char* where() const = 0;  // "graph" or "host"
  // Rows the next scratch call can take (a graph's context fills up; the host has no limit).
  virtual size_t room() const { return SIZE_MAX; }

  const DraftConfig& config() const { return cfg_; }
  int32_t head_token(int64_t column) const {
    return head_tokens_.empty() ? static_cast<int32_t>(column) : head_tokens_[static_cast<size_t>(column)];
  }
  // [K, N] of every matrix a draft pass multiplies by, in order (the stats contract's
  // draft_linears, for backend estimates): fc, q, k, v, o, gate, up, down, LM head.
  std::vector<std::array<int64_t, 2>> linear_shapes() const;
  int64_t macs_per_row() const;           // through those matrices (attention aside)
  size_t weight_bytes_per_pass() const;   // of those matrices in float32
  // How many draft passes ran each row count (rows -> passes), for pricing pass by pass.
  const std::map<int64_t, int64_t>& pass_rows() const { return pass_rows_; }
  size_t rows_run() const {  // rows through the draft so far
    size_t rows = 0;
    for (const auto& [r, passes] : pass_rows_) rows += static_cast<size_t>(r * passes);
    return rows;
  }
  size_t passes() const { return counts_total(pass_rows_); }  // draft forwards so far

 protected:
  void count_pass(size_t rows) { ++pass_rows_[static_cast<int64_t>(rows)]; }

  DraftConfig cfg_;
  std::map<int64_t, int64_t> pass_rows_;
  std::vector<int32_t> head_tokens_;  // empty: the full vocabulary
};

}  // namespace eaglet
