// Calibration data for quant recipes: the manifest's [calibration] text or JSONL dataset,
// tokenized with the model's tokenizer, or pre-tokenized ids, cut into num_samples windows
// of sequence_length tokens.
// Recipes reach it through nf_calibration: run(batch) feeds one window through the float
// model set on the cpu backend and returns any named values of the graph, intermediate
// ones included.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/host_api.h"
#include "manifest/manifest.h"
#include "registry/registry.h"
#include "runtime/session.h"

namespace nf::host {

struct BatchState;

class TextCalibration final : public nf_calibration {
 public:
  // Reads (and tokenizes) the data. Throws std::runtime_error (one line) when the file is
  // missing, empty or malformed or holds fewer than num_samples windows. `backend` must
  // outlive this.
  TextCalibration(const manifest::Manifest::Calibration& config, const std::string& tokenizer_json,
                  const PluginInfo& backend);

  // num_samples consecutive, non-overlapping windows of `sequence_length` tokens of `ids`;
  // `what` names the text in the error when it holds fewer.
  static std::vector<std::vector<int32_t>> make_batches(const std::vector<int32_t>& ids, int num_samples,
                                                        int sequence_length, const std::string& what);

  size_t batch_count() const override { return batches_.size(); }
  const std::vector<int32_t>& batch(size_t index) const { return batches_.at(index); }
  // Runs batch `index` (from position 0, empty past KV, all-ones mask) through the first
  // graph of `ms` with fp32 weights (encodings ignored; with model-set metadata
  // "calibration_weights" = "encoded", weights run on their encodings' grids, activations
  // stay float) and writes a new reference to each named value to out[0..n). A value of a
  // graph of another role (a draft) comes from a run of that graph, float weights, over the
  // batch as a draft is trained: x[i+1] with the target's features f[i] (its LM head's
  // input). Outputs are untouched on error.
  //
  // The graph runs segment by segment (segments.h) on cpu sessions opened one at a time,
  // so one decoder layer's weights are packed and paged in, not the model's. Each batch
  // keeps the values carried into the segments it reached last; a request starts from the
  // latest of them computed with the weights the graph holds now (recipes replace a weight
  // with a new tensor, which the state notices), so a recipe asking layer by layer, batch
  // after batch, runs each segment once per batch.
  void run(ir::ModelSet& ms, size_t index, const char* const* names, size_t n, nf_tensor** out) override;
  ~TextCalibration() override;

  // How many sessions run() opened (segments and drafts) and how many segment runs it made
  // (for tests).
  size_t sessions_opened() const { return sessions_opened_; }
  size_t segments_run() const { return segments_run_; }

 private:
  struct Stream;
  struct DraftRun;
  void run_segment(const ir::ModelSet& ms, size_t s, BatchState& state, const std::vector<std::string>& wanted,
                   std::map<std::string, TensorPtr>& found);
  // The named values of a draft graph over batch `ids`, on the target's `features`.
  std::map<std::string, TensorPtr> run_draft(const ir::Graph& draft, const std::vector<int32_t>& ids,
                                             const TensorPtr& features, const std::vector<std::string>& names);

  const PluginInfo& backend_;  // runs the float model ([calibration] backend)
  std::vector<std::vector<int32_t>> batches_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<DraftRun> draft_;
  size_t sessions_opened_ = 0, segments_run_ = 0;
};

// What the calibration of `m` contributes to a quant stage's cache key: a hash of the data
// file's content (or of its absence), num_samples, sequence_length and, for text, the
// tokenizer's content; null without [calibration]. Never throws: an unreadable file is reported when
// the stage runs.
nlohmann::json calibration_cache_key(const manifest::Manifest& m);

// The calibration of a build: null when the manifest has no [calibration]. The tokenizer
// is [model] tokenizer, else tokenizer.json beside the model; the cpu backend must be in
// `registry`. Throws std::runtime_error (one line) on unusable calibration data.
std::unique_ptr<TextCalibration> make_calibration(const manifest::Manifest& m, const Registry& registry);

}  // namespace nf::host
