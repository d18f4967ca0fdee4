// split's options, read from the manifest table, and the part count they resolve to.
#pragma once

#include <npuforge/plugin.hpp>

#include <optional>
#include <string>

namespace split {

struct SplitOptions {
  std::optional<int64_t> num_splits;  // unset: 3 + parameter bytes // 2 GiB (seed formula)
  bool split_embedding = true;
  bool split_lm_head = true;
  std::optional<std::string> layer_boundary_name_regex;  // unset: residual-Add heuristic
};

// The JSON schema of the options (defaults and names from the Gen AI Builder seed).
const char* options_schema();
// Throws nf::Error naming the option on a wrong type or value.
SplitOptions parse_options(const nf::Options& o);

// Bytes per decoder part the default aims at: 2 GiB (the seed's "about 2 GB" splits).
inline constexpr int64_t kBytesPerDecoderPart = int64_t{2} << 30;

// The seed's default: one part for the embedding and one for the LM head when they are
// split off, one decoder part, plus one decoder part per full 2 GiB of parameters.
int64_t default_num_splits(const SplitOptions& o, int64_t parameter_bytes);

}  // namespace split
