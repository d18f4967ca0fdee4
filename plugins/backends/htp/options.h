// The htp backend's options (names as the Gen AI Builder seeds spell them) and the rules
// between them and the chip: each violated rule is one error naming the option.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "chip.h"

namespace nf::htp {

extern const char* const kOptionsSchema;

struct HtpOptions {
  std::string chipset;            // resolved from chipset or soc_model
  int soc_model = 0;
  std::string dsp_arch;           // resolved: the chip's when not given
  int vtcm_size_in_mb = 0;        // resolved: the chip's VTCM when 0
  int hvx_threads = 0;            // resolved: the chip's maximum when 0
  int optimization_type = 3;
  std::string perf_profile = "burst";
  bool extended_udma = false;
  bool fp16_relaxed_precision = true;
  bool weight_sharing = true;
  int rpc_control_latency = 100;
  int64_t memory_limit_mb = 0;    // 0: the chip file's device budget (none: unlimited)
  int assume_activation_bw = 0;   // costing only: width of unencoded activations (0 = fp16)
  int assume_kv_bw = 0;           // costing only: width of unencoded KV inputs/outputs
  int assume_weight_bw = 0;       // costing only: width of unencoded matmul weights (LM head: 8)
  double assume_int8_share = 0;   // costing only: share of those 4-bit weights stored at int8
  bool pack_weights = true;       // false: estimate-only package
  int threads = 0;                // simulator host threads (the engine's), 0 = all cores
  Chip chip;

  // Parses and checks the options against the chip data; throws one clear error.
  static HtpOptions parse(const nlohmann::json& j);
  // The options as given, for the package (re-parsed at open and estimate).
  nlohmann::json resolved_json() const;
};

}  // namespace nf::htp
