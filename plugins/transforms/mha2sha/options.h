// mha2sha's options (names from the Gen AI Builder seed) and their JSON schema.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

namespace mha2sha {

struct Mha2shaOptions {
  // Give the KV cache IO the HTP layout (keys [n_kv, 1, head_dim, T], values
  // [n_kv, 1, T, head_dim]): each KV head's slice is then contiguous and the key slice is
  // already the K^T the score MatMul reads.
  bool permute_kv_cache_io = false;
  // Names of extra nodes (an attention's Softmax or its score / value MatMul) whose
  // attention is rewritten too; by default only attention reading a past_key_values cache.
  std::vector<std::string> additional_start_points;
};

const char* options_schema();
// Throws nf::Error naming the option on a wrong value.
Mha2shaOptions parse_options(const nf::Options& o);

}  // namespace mha2sha
