// The ARIES hardware model behind nf_backend_api.estimate. Cycle-approximate per local
// core: each linear layer is a GEMM folded onto the core's MAC array (weight-stationary:
// a fold is one rows x cols weight tile; it costs its streamed rows, or the next tile's load
// when that is longer),
// attention as two GEMMs per head plus softmax on the vector unit, element-wise work on
// the vector unit, all overlapped with DRAM traffic (weights at their stored width, KV
// cache, activation spills past the on-chip buffer) over the shared DRAM bandwidth. Core
// modes split the work (global4/global8: output channels and heads across cores, a
// global-core barrier after each of the block's four GEMM groups). Prefill is chunked.
#pragma once

#include <npuforge/plugin.hpp>

#include <vector>

#include "device.h"
#include "model_info.h"
#include "options.h"

namespace nf::aries {

struct LinearCost {
  Kind kind = Kind::other;
  bool ffn_down = false;
  int64_t block = -1, K = 0, N = 0;
  int bits = 8;
};

struct SimModel {
  ModelShape shape;
  std::vector<LinearCost> linears;
  int64_t parts = 1;
  bool activations_calibrated = true;
  bool estimate_only = false;
  // A draft's depth loop as one graph (role draft_tree): after the catch-up pass, depth - 1
  // passes of `branches` rows in the same invocation, top-k on the vector unit. 0: none.
  int64_t tree_depth = 0, tree_branches = 0;
};

struct Workload {
  int64_t prompt_len = 0;   // 0: default (the calibration prompt, 240 tokens, capped by the cache)
  int64_t context_len = 0;  // 0: default (the package's max_cache_length)
  int64_t pass_rows = 0;    // > 0: also price one pass of this many rows at context_len (a tree pass)
};

// The linears of a dense decoder from its HF config.json (q, k, v, o, gate, up, down per
// block, no gate for the families with a plain MLP; the LM head), at the bit config: what
// compile's inspection finds in that model's ONNX export, for shapes too big to synthesize
// here (tools/aries_sim predict). A mixture-of-experts config is refused.
SimModel decoder_from_config(const nlohmann::json& config, const BitConfig& bits);

// Everything in the estimate JSON (fields documented in host/cli/cmd_estimate.cpp).
nlohmann::json simulate(const SimModel& m, const AriesOptions& o, const Device& d, Workload w);

// Seconds of one pass of `rows` new tokens attending over `keys` cache slots on the whole
// model (all parts), head included for `head_rows` rows; used by simulate and the fit tool.
struct PassTime {
  double seconds = 0, compute_s = 0, dram_s = 0, sync_s = 0, overhead_s = 0;
  double dram_bytes = 0;
  std::string bound;
};
PassTime pass_time(const SimModel& m, const AriesOptions& o, const Device& d, int64_t rows, int64_t keys,
                   int64_t head_rows, int64_t sequences);

// One pass through a graph outside the package (a speculative decoder's draft), its linears
// at int8 weights and 8-bit activations (ARIES has no float path): the same fold-based GEMM
// timing without attention or launch cost. Fields graph_pass_ms, per_graph_ms (one
// invocation), weights_stored_as.
nlohmann::json graph_pass(const GraphPass& pass, const AriesOptions& o, const Device& d);

// Device memory the package needs (weights, KV cache for batch x max_cache_length, scratch).
struct MemoryPlan {
  double weight_bytes = 0, kv_cache_bytes = 0, activation_bytes = 0;
  double total() const { return weight_bytes + kv_cache_bytes + activation_bytes; }
};
MemoryPlan memory_plan(const SimModel& m, const AriesOptions& o, int64_t cache_len);

}  // namespace nf::aries
