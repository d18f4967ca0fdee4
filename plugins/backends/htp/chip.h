// A Hexagon SoC as the simulator sees it: every figure comes from chips/<chipset>.json,
// installed beside the plugin library (no chip constants in code). Each number in the file
// carries its source; fitted parameters say so.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nf::htp {

struct Chip {
  std::string chipset;         // "sm8750"
  std::string marketing_name;  // "Snapdragon 8 Elite"
  int soc_model = 0;           // QNN SoC id
  std::string dsp_arch;        // "v79"
  std::string npu_generation;  // "Hexagon NPU (v79)"
  std::string memory_type;     // "LPDDR5X-5300"
  double vtcm_mb = 0;
  int cores = 1;
  int hvx_threads_max = 1;
  double a16w8_macs_per_s = 0;                  // HMX rate at 16-bit activations, 8-bit weights
  std::map<std::string, double> relative_rate;  // precision -> rate / a16w8 rate
  double hvx_bytes_per_s = 0;
  // Integer weights the NPU expands to fp16 per second for an HMX op on fp16 activations
  // (none: estimate refuses such ops).
  std::optional<double> fp16_weight_expand_per_s;
  std::optional<double> dram_peak_bytes_per_s;  // the SoC's DRAM peak (none when unpublished)
  std::optional<double> npu_bytes_per_s;        // what the NPU itself can draw from DRAM (none: estimate refuses)
  double per_graph_s = 0;
  double per_op_s = 0;
  std::optional<double> memory_budget_bytes;
  std::string file;  // where it was read from

  // MAC rate for a precision name ("a16w8", "a16w4", "fp16", ...).
  double macs_per_s(const std::string& precision) const;
};

// Directory holding the chip files: `htp/chips/` beside this plugin's .so.
std::string chips_dir();
// Chipset ids with a data file, sorted.
std::vector<std::string> known_chipsets();
// Reads chips/<chipset>.json; throws naming the file and field on anything missing.
Chip load_chip(const std::string& chipset);

}  // namespace nf::htp
