#include "options.h"

#include <npuforge/plugin.hpp>

namespace nf::htp {

const char* const kOptionsSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "anyOf": [{"type": "object", "required": ["chipset"]}, {"type": "object", "required": ["soc_model"]}],
  "properties": {
    "chipset": {"type": "string", "enum": ["", "sm8550", "sm8650", "sm8750", "sm8850", "sc8380xp", "sc8480xp", "sa8295p"], "default": "",
                "description": "Required (or soc_model): the target SoC (set_targets chipset), e.g. \"sm8750\"; the chip's data file (htp/chips/<chipset>.json) supplies every hardware figure."},
    "soc_model": {"type": "integer", "minimum": 0, "default": 0,
                  "description": "QNN SoC id (devices.soc_model), e.g. 69 = sm8750; 0 = from chipset. Must match chipset when both are given."},
    "dsp_arch": {"type": "string", "enum": ["", "v68", "v69", "v73", "v75", "v79", "v81"], "default": "",
                 "description": "Hexagon architecture; empty = the chip's. Must match the chip."},
    "vtcm_size_in_mb": {"type": "integer", "minimum": 0, "maximum": 64, "default": 0,
                        "description": "VTCM the graphs may use (graphs.vtcm_size_in_mb); 0 = the chip's whole VTCM. At most the chip's VTCM."},
    "hvx_threads": {"type": "integer", "minimum": 0, "maximum": 64, "default": 0,
                    "description": "HVX threads (graphs.hvx_threads); 0 = backend default (all the chip has). At most the chip's."},
    "optimization_type": {"type": "integer", "enum": [1, 2, 3], "default": 3,
                          "description": "Graph optimization level O (graphs.O). Recorded in the backend extensions; the simulator models the O3 schedule."},
    "perf_profile": {"type": "string", "enum": ["burst", "sustained_high_performance", "high_performance", "balanced", "low_balanced", "high_power_saver", "power_saver", "low_power_saver", "default"], "default": "burst",
                     "description": "devices.cores.perf_profile. The chip figures are calibrated at burst; estimates for other profiles say they assume burst clocks."},
    "extended_udma": {"type": "boolean", "default": false,
                      "description": "context.extended_udma (recorded in the backend extensions; the simulator does not model it)."},
    "fp16_relaxed_precision": {"type": "boolean", "default": true,
                               "description": "graphs.fp16_relaxed_precision: what carries no integer encoding runs at fp16 (weights stored as fp16). When false, a MatMul/Gemm/Conv/Gather weight without an encoding is refused at compile."},
    "weight_sharing": {"type": "boolean", "default": true,
                       "description": "context.weight_sharing_enabled: one weight set per split for all its AR/CL variants. false needs a single AR variant (each graph then stores its own copy)."},
    "rpc_control_latency": {"type": "integer", "minimum": 0, "default": 100,
                            "description": "devices.cores.rpc_control_latency in microseconds (recorded in the backend extensions)."},
    "memory_limit_mb": {"type": "integer", "minimum": 0, "default": 0,
                        "description": "Device memory the package may use (weights + KV cache + activations); 0 = the chip file's budget, unlimited when it has none. Compile refuses a bigger package."},
    "assume_activation_bw": {"type": "integer", "enum": [0, 8, 16], "default": 0,
                             "description": "Costing only (estimate): activations without an integer encoding are timed as integers of this width instead of fp16; 0 = off. For models that could not be calibrated (bench/htp_estimate.sh); execution is unaffected."},
    "assume_kv_bw": {"type": "integer", "enum": [0, 4, 8, 16], "default": 0,
                     "description": "Costing only (estimate): KV-cache inputs/outputs without an integer encoding are timed at this width; 0 = off (as assume_activation_bw)."},
    "assume_weight_bw": {"type": "integer", "enum": [0, 4, 8], "default": 0,
                         "description": "Costing only (estimate): MatMul/Gemm/Conv weights without an encoding are timed as 4-bit LPBQ (block 64, per-channel fp32 scale) or int8 per channel, the LM head (the matmul producing logits) at int8, as AIMET's LLM recipe stores them; 0 = off. Needs pack_weights = false (such a package cannot run)."},
    "assume_int8_share": {"type": "number", "minimum": 0, "maximum": 1, "default": 0,
                          "description": "Costing only (estimate), with assume_weight_bw = 4: the share of those 4-bit weights' elements a mixed recipe keeps at int8 (AI Hub's 'w4a16 + w8a16 (few layers)', whose 8-bit layers are not listed), spread evenly over them; 0 = none."},
    "pack_weights": {"type": "boolean", "default": true,
                     "description": "Write the weight containers. false: an estimate-only package (graphs, summaries, no weights): open refuses it. For models too big to quantize and pack here (bench/htp_estimate.sh)."},
    "threads": {"type": "integer", "minimum": 0, "default": 0,
                "description": "Host threads of the simulator's integer execution; 0 = every core."}
  }
})json";

HtpOptions HtpOptions::parse(const nlohmann::json& j) {
  HtpOptions o;
  auto get_s = [&](const char* k, const std::string& d) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : d; };
  auto get_i = [&](const char* k, int64_t d) { return j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : d; };
  auto get_b = [&](const char* k, bool d) { return j.contains(k) && j[k].is_boolean() ? j[k].get<bool>() : d; };
  auto get_d = [&](const char* k, double d) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : d; };
  std::string chipset = get_s("chipset", "");
  int soc_model = static_cast<int>(get_i("soc_model", 0));
  if (chipset.empty() && soc_model == 0)
    throw Error("htp: set chipset (e.g. \"sm8750\") or soc_model (e.g. 69): the target SoC is required");
  if (chipset.empty()) {
    for (const auto& c : known_chipsets())
      if (load_chip(c).soc_model == soc_model) chipset = c;
    if (chipset.empty()) throw Error("htp: soc_model " + std::to_string(soc_model) + " is not a chip with a data file");
  }
  o.chip = load_chip(chipset);
  o.chipset = chipset;
  if (soc_model != 0 && soc_model != o.chip.soc_model)
    throw Error("htp: soc_model " + std::to_string(soc_model) + " does not match chipset " + chipset + " (soc_model " +
                std::to_string(o.chip.soc_model) + ")");
  o.soc_model = o.chip.soc_model;
  o.dsp_arch = get_s("dsp_arch", "");
  if (o.dsp_arch.empty()) o.dsp_arch = o.chip.dsp_arch;
  if (o.dsp_arch != o.chip.dsp_arch)
    throw Error("htp: dsp_arch " + o.dsp_arch + " is inconsistent with chipset " + chipset + " (" + o.chip.marketing_name +
                " is " + o.chip.dsp_arch + ")");
  o.vtcm_size_in_mb = static_cast<int>(get_i("vtcm_size_in_mb", 0));
  if (o.vtcm_size_in_mb == 0) o.vtcm_size_in_mb = static_cast<int>(o.chip.vtcm_mb);
  if (o.vtcm_size_in_mb > o.chip.vtcm_mb)
    throw Error("htp: vtcm_size_in_mb " + std::to_string(o.vtcm_size_in_mb) + " is beyond the VTCM of " + chipset + " (" +
                std::to_string(static_cast<int>(o.chip.vtcm_mb)) + " MB)");
  o.hvx_threads = static_cast<int>(get_i("hvx_threads", 0));
  if (o.hvx_threads == 0) o.hvx_threads = o.chip.hvx_threads_max;
  if (o.hvx_threads > o.chip.hvx_threads_max)
    throw Error("htp: hvx_threads " + std::to_string(o.hvx_threads) + " is more than " + chipset + " has (" +
                std::to_string(o.chip.hvx_threads_max) + ")");
  o.optimization_type = static_cast<int>(get_i("optimization_type", 3));
  if (o.optimization_type < 1 || o.optimization_type > 3)
    throw Error("htp: optimization_type must be 1, 2 or 3, not " + std::to_string(o.optimization_type));
  o.perf_profile = get_s("perf_profile", "burst");
  o.extended_udma = get_b("extended_udma", false);
  o.fp16_relaxed_precision = get_b("fp16_relaxed_precision", true);
  o.weight_sharing = get_b("weight_sharing", true);
  o.rpc_control_latency = static_cast<int>(get_i("rpc_control_latency", 100));
  o.memory_limit_mb = get_i("memory_limit_mb", 0);
  o.threads = static_cast<int>(get_i("threads", 0));
  o.assume_activation_bw = static_cast<int>(get_i("assume_activation_bw", 0));
  o.assume_kv_bw = static_cast<int>(get_i("assume_kv_bw", 0));
  o.assume_weight_bw = static_cast<int>(get_i("assume_weight_bw", 0));
  o.assume_int8_share = get_d("assume_int8_share", 0);
  o.pack_weights = get_b("pack_weights", true);
  if (o.assume_weight_bw && o.pack_weights)
    throw Error("htp: assume_weight_bw needs pack_weights = false: weights costed by assumption cannot be packed and run");
  if (o.assume_int8_share && o.assume_weight_bw != 4)
    throw Error("htp: assume_int8_share needs assume_weight_bw = 4: it is the share of the assumed 4-bit weights kept at int8");
  return o;
}

nlohmann::json HtpOptions::resolved_json() const {
  return {{"chipset", chipset},
          {"soc_model", soc_model},
          {"dsp_arch", dsp_arch},
          {"vtcm_size_in_mb", vtcm_size_in_mb},
          {"hvx_threads", hvx_threads},
          {"optimization_type", optimization_type},
          {"perf_profile", perf_profile},
          {"extended_udma", extended_udma},
          {"fp16_relaxed_precision", fp16_relaxed_precision},
          {"weight_sharing", weight_sharing},
          {"rpc_control_latency", rpc_control_latency},
          {"memory_limit_mb", memory_limit_mb},
          {"assume_activation_bw", assume_activation_bw},
          {"assume_kv_bw", assume_kv_bw},
          {"assume_weight_bw", assume_weight_bw},
          {"assume_int8_share", assume_int8_share},
          {"pack_weights", pack_weights},
          {"threads", threads}};
}

}  // namespace nf::htp
