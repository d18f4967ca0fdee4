// Generation with a speculative decoder plugin: the decoder proposes a tree per step, the
// runner scores it in one forward call and commits the accepted path.
#pragma once

#include <nlohmann/json.hpp>

#include "registry/registry.h"
#include "runner/generate.h"

namespace nf::host {

struct SpeculativeStats {
  GenerateStats gen;           // forward_passes: backend passes (a DynamicRunner runs one per tree path)
  int64_t steps = 0;           // decoder steps
  int64_t target_forwards = 0; // runner forward calls made by the decoder during decode
  int64_t draft_forwards = 0;  // draft model passes, as the decoder counts them (0: no draft model)
  int64_t max_rows = 0;        // most rows in one forward call
  double tau = 0;              // new tokens per target forward (the bonus token included)
  double acceptance_rate = 0;  // share of new tokens that were accepted draft tokens
  double wall_seconds = 0;     // prefill + decode
  nlohmann::json decoder;      // the decoder's own counters

  nlohmann::json to_json() const;
};

// Prefills the prompt, then steps the decoder until max_new tokens (the last step's extra
// tokens are dropped) or a stop token (kept in the output). `options` are validated
// against the decoder's schema (defaults filled in); errors throw std::runtime_error.
std::vector<int32_t> generate_speculative(Runner& runner, const PluginInfo& decoder, const nlohmann::json& options,
                                          std::span<const int32_t> prompt, int max_new, Sampler& sampler,
                                          std::span<const int32_t> stop_ids,
                                          const std::function<void(int32_t)>& on_token, SpeculativeStats* stats);

}  // namespace nf::host
