// The hardware model, per op: HMX MACs at the operands' precision (VTCM-tiled matmuls) or
// HVX vector work, against the weight bytes streamed behind it; plus the activation traffic
// (the KV cache and other graph inputs read from DRAM once, spills), which does not hide
// under compute; plus per-op and per-graph overheads. Every figure comes from the chip file;
// the output fields follow host/cli/cmd_estimate.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include "options.h"

namespace nf::htp {

// Refuses at compile what the chip cannot hold: an HMX tile pass that does not fit the
// configured VTCM, a package bigger than the memory limit.
void check_fits(const HtpOptions& o, const nlohmann::json& meta, const nlohmann::json& summaries);

// workload: {"prompt_len"?: N, "context_len"?: N}, or {"graph_pass": {"linears": [[K, N], ...],
// "rows": R}} for one pass of a graph outside the package (a speculative decoder's draft).
nlohmann::json estimate(const HtpOptions& o, const nlohmann::json& meta, const nlohmann::json& summaries,
                        const nlohmann::json& workload);

}  // namespace nf::htp
