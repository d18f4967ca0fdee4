// What arcl needs to know about the source decoder: layer count, KV geometry, vocabulary,
// sequence length, and the sliding-window layout from the HF config.
#pragma once

#include <npuforge/decoder_io.hpp>
#include <npuforge/plugin.hpp>

#include <optional>
#include <string>
#include <vector>

namespace arcl {

struct ModelInfo {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  nf_dtype kv_dtype = NF_DTYPE_FLOAT32;
  int64_t source_seq_len = -1;  // input_ids' sequence dim; -1 when dynamic
  std::optional<int64_t> sliding_window;
  std::vector<int64_t> sliding_layers;  // layers attending within the window

  bool is_sliding(int64_t layer) const;
};

using nf::decoder::past_key;
using nf::decoder::past_value;
using nf::decoder::present_key;
using nf::decoder::present_value;

// Reads the optimum-layout IO of `source` and the HF config (may be null). Throws nf::Error.
ModelInfo read_model_info(const nf::Graph& source, const nlohmann::json& config);

}  // namespace arcl
