// The ssd assets a package carries (tools/speculative/train_ssd.py writes them): the
// forecast embeddings live in the graphs' embedding table (the build appended them), the
// KV prefix is read here and handed to the runner.
#pragma once

#include <npuforge/plugin.hpp>

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

// DIR/assets.json, checked to be ssd's; throws nf::Error with one line naming the file.
nlohmann::json read_assets_json(const std::string& dir);
// Reads DIR/assets.json and the KV prefix; throws nf::Error with one line naming the file.
Assets load_assets(const std::string& dir);

// The build hook: appends the assets' forecast embeddings (extra_embeddings) to the token
// embedding table of every graph (the Gather of an initializer by input_ids), so the
// package's recipes quantize them with the table, and records metadata extra_embeddings
// {rows, first_id, decoder}. Token ids first_id.. then embed the forecast rows.
void append_forecast_embeddings(const std::string& dir, nf::ModelSet ms);

}  // namespace ssd
