// arcl's options and the list of static variants they describe (|AR| x |CL| x |SCL|),
// checked against the model.
#pragma once

#include <npuforge/plugin.hpp>

#include <optional>
#include <string>
#include <vector>

#include "model_info.h"

namespace arcl {

struct ArclOptions {
  std::vector<int64_t> arn{1, 128};
  std::vector<int64_t> context_length{4096};
  std::optional<std::vector<int64_t>> sliding_context_length;  // unset: derived from the window
  std::string kv_layout = "hf";                                // "hf" | "htp"
  bool native_kv = false;
};

struct Variant {
  int64_t ar = 0, cl = 0;
  std::optional<int64_t> scl;
  std::string graph_name() const;
};

// The JSON schema of the options (defaults from the Gen AI Builder seed).
const char* options_schema();
// Reads options; throws nf::Error naming the option on a wrong type.
ArclOptions parse_options(const nf::Options& o);
// Resolves `arn` 0, rounds and defaults the sliding context, checks every rule; throws
// nf::Error naming the option that breaks one. Warnings go to ctx.
std::vector<Variant> plan_variants(const ArclOptions& opts, const ModelInfo& info, const nf::Context& ctx);

}  // namespace arcl
