// The runner: keeps the KV cache and positions of one sequence (batch 1) and drives a
// backend session over a model's graphs. Decoders reach it through nf_runner (row calls).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "api/host_api.h"
#include "runtime/session.h"

namespace nf::host {

// How a graph's inputs and outputs map to the roles a runner needs, found by name in the
// IO spec (the "graphs" entries of package.json).
struct DecoderIO {
  std::string graph;
  std::string input_ids, attention_mask, position_ids, logits;  // position_ids may be ""
  std::string last_row_logits;  // the head on the last row alone (decoder_io.hpp), or ""
  std::vector<std::string> past_keys, past_values, present_keys, present_values;
  int64_t kv_heads = 0, head_dim = 0;
  int64_t vocab = 0;  // the logits' last dim when the spec fixes it, else known after a pass
  std::vector<std::string> extra_outputs;  // e.g. hidden_states
  std::vector<std::pair<std::string, int64_t>> row_inputs;  // per-row float inputs and their widths

  // The optimum layout of HF exports (dynamic past). Throws a one-line error naming what
  // is missing when the graph is not a decoder in that layout.
  static DecoderIO from_spec(const nlohmann::json& graph_spec);
};

class Runner : public nf_runner {
 public:
  virtual ~Runner() = default;
  // Appends tokens to the committed sequence; returns logits of the last token, or of
  // every token when `all_rows` (rows x vocab).
  virtual std::vector<float> append(std::span<const int32_t> tokens, bool all_rows = false) = 0;
  virtual void reset() = 0;
  virtual int64_t forward_passes() const = 0;

  // Extra embedding rows the graphs carry beyond the logits' vocab (metadata
  // "extra_embeddings"): token ids vocab .. vocab+n-1 are valid inputs.
  void set_extra_input_tokens(size_t n) { extra_input_tokens_ = n; }
  size_t input_vocab_size() const override { return vocab_size() + extra_input_tokens_; }

  // The graphs open_role looks in and this runner's role ("": the target), set by make_runner.
  void set_model(BackendSession& session, nlohmann::json graph_specs, nlohmann::json metadata, std::string role);
  // A runner over the graphs of another role (metadata "roles"), or null when there are none.
  // A role whose entry says "shares_cache_of": this runner's role reads and writes this
  // runner's KV cache (a draft's tree graph and the draft).
  nf_runner* open_role(const char* role) override;

 protected:
  size_t extra_input_tokens_ = 0;
  BackendSession* model_session_ = nullptr;
  nlohmann::json model_specs_, model_metadata_;
  std::string role_;
};

// Runner over the dynamic KV layout of HF exports: past key/values grow by concatenation.
// Row calls score each root-to-leaf path of a tree as its own pass (the layout has no
// tree mask); the static layout after arcl scores a whole tree in one pass.
class DynamicRunner final : public Runner {
 public:
  DynamicRunner(BackendSession& session, DecoderIO io);

  std::vector<float> append(std::span<const int32_t> tokens, bool all_rows = false) override;
  void reset() override;
  int64_t forward_passes() const override { return passes_; }

  size_t vocab_size() const override { return static_cast<size_t>(vocab_); }
  size_t max_rows() const override { return 64; }
  size_t n_past() const override { return static_cast<size_t>(n_past_); }
  void forward(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) override;
  void commit(const int32_t* rows, size_t n) override;
  nf_tensor* last_output(const char* name) override;
  // The prefix is prepended to the past of flagged rows' passes: a path's plain rows run
  // first, its flagged tail then runs after [prefix | committed | plain rows].
  void set_prefix_kv(size_t layers, size_t kv_heads, size_t n, size_t head_dim, const float* keys,
                     const float* values) override;
  // The KV prefix of the model's graph of role kv_prefix (graph_roles.hpp), run once on the
  // session: kept across reset; the host cannot replace it.
  void hold_graph_prefix(const std::string& graph, int64_t rows);
  void forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                     float* logits) override;
  void set_row_input(const char* name, const float* data, size_t n_rows, size_t width) override;

 private:
  struct Pass {
    std::vector<float> logits;            // rows x vocab
    std::vector<TensorPtr> keys, values;  // presents after the pass
    std::vector<TensorPtr> extras;        // extra outputs
  };
  // One pass over `tokens` after the committed cache; does not commit. `rows`: the row of
  // each token in the caller's call (where its per-row inputs are).
  Pass run(std::span<const int32_t> tokens, bool all_rows, std::span<const int32_t> rows);
  // One pass after the given past (past_len positions of attention_mask), tokens at
  // positions first_pos.. ; all rows' logits.
  Pass run_after(const std::vector<TensorPtr>& past_k, const std::vector<TensorPtr>& past_v, int64_t past_len,
                 int64_t first_pos, std::span<const int32_t> tokens, bool all_rows, std::span<const int32_t> rows);
  void adopt(Pass& p, int64_t new_len);  // makes p's presents (cut to new_len) the cache
  // Extra output e of the last row call, one row per scored row.
  TensorPtr gather_rows(size_t e, const std::vector<std::vector<int32_t>>& paths) const;

  BackendSession& session_;
  DecoderIO io_;
  int64_t vocab_ = 0;
  int64_t n_past_ = 0;
  int64_t passes_ = 0;
  std::vector<TensorPtr> keys_, values_;
  std::vector<TensorPtr> extras_;
  // Last row call: each row's path (row indices from the root) and that path's pass.
  std::vector<std::vector<int32_t>> row_paths_;
  std::vector<int32_t> row_tokens_;
  std::vector<std::shared_ptr<Pass>> row_pass_;
  std::vector<uint32_t> row_flags_;             // last row call's flags (empty: none)
  std::vector<TensorPtr> prefix_k_, prefix_v_;  // per layer [1, kv_heads, P, head_dim]
  bool graph_prefix_ = false;                   // prefix_k_/v_ came from the graphs
  std::vector<std::vector<float>> row_inputs_;  // per io_.row_inputs, for the next forward
};

// Checks row flags of a row call: known bits only, a prefix to see, and a flagged row's
// children flagged too. Throws a one-line error.
void check_row_flags(const int32_t* parents, const uint32_t* flags, size_t n_rows, size_t prefix_rows);

}  // namespace nf::host
