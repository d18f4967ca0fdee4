// The draft graph of the model set (role "draft", added by the build hook), run on the
// backend session through a runner of its own KV cache: on the device, with the precision
// the package compiled it at.
#pragma once

#include <npuforge/plugin.hpp>

#include "draft.h"

namespace eaglet {

class GraphDraft final : public Draft {
 public:
  // Takes `draft` (a runner_open_role of `target`) and releases it.
  GraphDraft(nf_runner* target, nf_runner* draft, const std::string& dir);
  ~GraphDraft() override;
  GraphDraft(const GraphDraft&) = delete;
  GraphDraft& operator=(const GraphDraft&) = delete;

  void run_committed(std::span<const Row> rows, float* features, float* logits) override;
  // Scratch entries persist until clear_scratch; each call runs its new entries only, kept
  // by the runner as scratch rows (runner_forward_scratch), or with their ancestors on a
  // runner that keeps no rows between forwards.
  std::vector<int32_t> run_scratch(std::span<const Row> rows, float* features, float* logits) override;
  void clear_scratch() override;
  void clear_cache() override;
  int64_t head_size() const override { return head_; }
  const char* where() const override { return "graph"; }
  size_t room() const override { return nf::host().runner_rows_available(r_); }
  nf_runner* runner() const { return r_; }  // the draft role's runner (clear_cache opens a new one)

 private:
  struct Entry {
    int32_t token;
    int32_t parent;
    std::vector<float> feature;
  };
  void forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents, const std::vector<float>& features,
               std::vector<float>& out_features, std::vector<float>& logits, bool keep = false);

  nf_runner* target_;
  nf_runner* r_;
  int64_t head_ = 0;
  std::vector<Entry> scratch_;
  bool keeps_scratch_ = true;  // until the runner says it cannot
};

}  // namespace eaglet
