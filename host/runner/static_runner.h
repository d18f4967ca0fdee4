// The runner over static-shape graphs (the layout arcl produces): one graph per AR/CL
// variant (optionally cut into parts), fixed-size KV inputs, an explicit additive mask.
// The KV cache lives here, once per layer, independent of the variants; every pass copies
// the committed rows a variant needs into its inputs and reads back the new rows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <npuforge/decoder_io.hpp>

#include "runner/runner.h"

namespace nf::host {

// package.json metadata "io" with "layout": "static", checked against the graphs' IO specs.
struct StaticIO {
  struct Part {
    std::string graph;
    std::vector<std::string> inputs, outputs;
    std::map<std::string, std::string> dtypes;  // input name -> dtype ("int64", "int32", "float32")
  };
  struct Variant {
    std::string name;  // base graph name: ar{AR}_cl{CL}[_scl{SCL}]
    int64_t ar = 0, cl = 0, scl = 0;  // scl 0: no sliding cache
    std::vector<Part> parts;          // run in order; one part when the graph is not split
    std::set<std::string> chained;    // values one part hands to a later one (not outputs)
    std::vector<int64_t> cache_len;   // per layer: CL-AR, or SCL-AR for a sliding cache
    bool window_in_mask = false;      // the window applies to attention_mask (all layers slide)
    // The largest n_past at which a pass is exact: a sliding cache shorter than window-1
    // slots loses positions the window still needs once n_past exceeds it.
    int64_t exact_until = INT64_MAX;
  };
  bool htp = false;  // kv_layout "htp": key cache transposed ([n_kv, 1, head_dim, T])
  float mask_value = -65504.f;
  int64_t layers = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  int64_t first_layer = 0;  // a draft beside the target numbers its layers after the target's
  std::map<std::string, int64_t> row_inputs;  // per-row float inputs (a draft's features) -> width
  int64_t window = 0;  // sliding_window; 0: none
  std::vector<bool> sliding;
  // KV prefix rows the graphs hold (io "kv_prefix_rows", graph_roles.hpp kv_prefix): between
  // each cache input's slots and the new rows, P columns of every mask; 0: none.
  int64_t prefix_rows = 0;
  std::vector<Variant> variants;

  // Cache IO names of the graphs' layer l (0 = their first).
  std::string past_key(int64_t l) const { return decoder::past_key(first_layer + l); }
  std::string past_value(int64_t l) const { return decoder::past_value(first_layer + l); }
  std::string present_key(int64_t l) const { return decoder::present_key(first_layer + l); }
  std::string present_value(int64_t l) const { return decoder::present_value(first_layer + l); }

  // Throws a one-line error naming what is missing or inconsistent.
  static StaticIO parse(const nlohmann::json& io, const nlohmann::json& graph_specs);
};

// Scores rows in one pass of the smallest fitting AR variant; prefill runs chunks of the
// largest AR (a last short chunk takes the smallest AR that holds it, padded). Padding rows
// sit at the next positions, see only themselves and are never kept. Sliding-window layers
// of `_scl` variants get a shifted window: cache slot j holds position
// max(0, n_past - (SCL-AR)) + j, i.e. the last SCL-AR committed positions in order, and
// sliding_attention_mask lets a row at position p see positions > p - window (as HF does).
// last_output() after a row call is that pass's tensor as the graph made it: [1, AR, ...],
// rows first; after append() it holds one row per appended token (chunks joined).
class StaticRunner final : public Runner {
 public:
  StaticRunner(BackendSession& session, StaticIO io);

  std::vector<float> append(std::span<const int32_t> tokens, bool all_rows = false) override;
  void reset() override;
  int64_t forward_passes() const override { return passes_; }

  size_t vocab_size() const override { return static_cast<size_t>(io_.vocab); }
  size_t max_rows() const override { return static_cast<size_t>(max_ar_); }
  size_t n_past() const override { return static_cast<size_t>(kv_->n_past); }
  // The largest AR variant that fits after n_past (and the prefix KV), as pick() decides.
  size_t rows_available() const override;
  void forward(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) override;
  void commit(const int32_t* rows, size_t n) override;
  // The prefix KV takes the last P slots of every cache input (and P of the context).
  // Refused when the graphs hold their own prefix (StaticIO::prefix_rows).
  void set_prefix_kv(size_t layers, size_t kv_heads, size_t n, size_t head_dim, const float* keys,
                     const float* values) override;
  void forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                     float* logits) override;
  nf_tensor* last_output(const char* name) override;
  void set_row_input(const char* name, const float* data, size_t n_rows, size_t width) override;
  // Scratch rows live in the cache slots after the committed ones (not with sliding windows,
  // whose short caches shift slots).
  bool keeps_scratch() const override { return io_.window == 0; }
  void forward_scratch(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) override;
  void clear_scratch() override;

  // From now on this runner reads and writes `other`'s KV cache (graphs of two roles over the
  // same layers: a draft and its tree graph, metadata roles.<role>.shares_cache_of): what one
  // commits the other sees. Throws when the layers or their geometry differ, or when
  // `other`'s cache is shorter than this runner's context.
  void share_cache(StaticRunner& other);

  // The base graph name of the last pass's variant (for logs and tests).
  const std::string& last_variant() const { return last_variant_; }
  int64_t context_length() const { return max_cl_; }

 private:
  struct Pass {
    size_t variant = 0;
    int64_t rows = 0;                     // real rows (the rest of AR is padding)
    std::vector<float> logits;            // rows x vocab
    std::vector<TensorPtr> keys, values;  // per layer: this pass's AR new rows
    std::map<std::string, TensorPtr> extras;
  };
  // The variant for a pass of `rows` rows after n_past: the smallest AR >= rows that fits
  // (n_past + AR <= CL, and exact for the window), then the smallest CL; with `partial`,
  // else the largest fitting AR.
  size_t pick(int64_t rows, bool partial) const;
  // One pass: rows[i] has token, position and parent (-1: sees only the cache; the rows of
  // a chunk chain to each other). Does not commit.
  // scratch_sees[i * S + s]: row i sees kept scratch row s (S = scratch rows held).
  // `prompt_end`: the rows are part of a prompt the model takes whole, and the sequence's
  // length at its end is what a length switch (decoder::kSequenceLengths) compares; 0: the
  // rows come a token at a time (each compares its position + 1).
  Pass run(size_t variant, std::span<const int32_t> tokens, std::span<const int32_t> parents,
           std::span<const int64_t> positions, std::span<const uint32_t> flags = {},
           std::span<const uint8_t> scratch_sees = {}, int64_t prompt_end = 0);
  // Writes rows `rows` of pass p into the KV store from slot `at` on.
  void store(const Pass& p, std::span<const int32_t> rows, int64_t at);
  // Appends rows `rows` of pass p to the committed KV store.
  void keep(const Pass& p, std::span<const int32_t> rows);
  // Cache slots in use: the committed rows, then the scratch rows.
  int64_t held() const { return kv_->n_past + static_cast<int64_t>(scratch_pos_.size()); }
  // After a prefill chunk of `rows` tokens: extra outputs accumulate one row per token.
  void append_extra_rows(Pass& p, size_t rows, bool first_chunk);

  // The committed rows, per layer [n_kv][capacity][head_dim]; shared by runners whose graphs
  // share their cache (share_cache).
  struct KvStore {
    int64_t capacity = 0, n_past = 0;
    std::vector<std::vector<float>> keys, values;
  };

  BackendSession& session_;
  StaticIO io_;
  int64_t max_ar_ = 0, max_cl_ = 0;
  int64_t passes_ = 0;
  std::shared_ptr<KvStore> kv_ = std::make_shared<KvStore>();
  std::map<std::string, TensorPtr> extras_;
  std::string last_variant_;
  // Last row call: its pass and each row's parent.
  std::shared_ptr<Pass> row_pass_;
  std::vector<int32_t> row_parents_;
  std::vector<uint32_t> row_flags_;                    // last row call's flags
  // KV prefix: the graphs' own rows (io_.prefix_rows) or rows the host gave (prefix_k_/v_).
  void clear_prefix();  // back to the graphs' own prefix (or none)
  int64_t prefix_len_ = 0;                             // prefix KV rows (NF_ROW_SEES_PREFIX)
  std::vector<std::vector<float>> prefix_k_, prefix_v_;  // per layer [n_kv][P][head_dim]
  std::map<std::string, std::vector<float>> row_inputs_;  // for the next forward, by name
  // Scratch rows (forward_scratch), in cache slots n_past .. held()-1: position and parent.
  std::vector<int64_t> scratch_pos_;
  std::vector<int32_t> scratch_parent_;
};

// The runner a model's graphs of `role` need ("": the target; others: metadata "roles",
// graph_roles.hpp): StaticRunner when the role's io (metadata "io", or the role's "io") has
// layout "static", else DynamicRunner over the role's single graph. `metadata` is
// package.json "metadata" (may be null). Throws a one-line error when neither fits.
std::unique_ptr<Runner> make_runner(BackendSession& session, const nlohmann::json& graph_specs,
                                    const nlohmann::json& metadata, const std::string& role = "");

}  // namespace nf::host
