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
  int64_t first_layer = 0;  // a draft beside the target numbers its layers after the target's
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  nf_dtype kv_dtype = NF_DTYPE_FLOAT32;
  int64_t source_seq_len = -1;  // input_ids' sequence dim; -1 when dynamic
  bool has_position_ids = true;  // false for ALiBi exports (Bloom): positions come from the mask
  nf_dtype mask_dtype = NF_DTYPE_INT64;  // the source's 2-D attention_mask
  std::optional<int64_t> sliding_window;
  std::vector<int64_t> sliding_layers;  // layers attending within the window

  bool is_sliding(int64_t layer) const;
  // Cache IO of the graph's layer l (0 = its first), named by the layer's number.
  std::string past_key(int64_t l) const { return nf::decoder::past_key(first_layer + l); }
  std::string past_value(int64_t l) const { return nf::decoder::past_value(first_layer + l); }
  std::string present_key(int64_t l) const { return nf::decoder::present_key(first_layer + l); }
  std::string present_value(int64_t l) const { return nf::decoder::present_value(first_layer + l); }
  // Inputs fed per row beside the decoder's (a draft's target_hidden_states): name -> width.
  std::vector<std::pair<std::string, int64_t>> row_inputs;
  // KV prefix rows the static graphs hold (role kv_prefix): each cache is that much shorter.
  int64_t prefix_rows = 0;
};

// Reads the optimum-layout IO of `source` and the HF config (may be null). Throws nf::Error.
ModelInfo read_model_info(const nf::Graph& source, const nlohmann::json& config);

}  // namespace arcl
