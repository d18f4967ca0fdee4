// The ssd assets a package carries (tools/speculative/train_ssd.py writes them): the
// forecast embeddings live in the graphs' embedding table (the build appended them), the
// KV prefix is read here and handed to the runner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ssd {

struct Assets {
  int forecast_tokens = 0;        // F trained forecast embeddings (token ids first_id..first_id+F-1)
  int64_t first_id = 0;           // the model's vocab: the first forecast token id
  int prefix = 0;                 // P trained KV prefix rows per layer
  size_t layers = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> keys, values;  // each [layers][kv_heads][P][head_dim]
};

// Reads DIR/assets.json and the KV prefix; throws nf::Error with one line naming the file.
Assets load_assets(const std::string& dir);

}  // namespace ssd
