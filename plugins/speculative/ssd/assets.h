// The ssd assets (tools/speculative/train_ssd.py writes them); the build hook puts both into
// the model's graphs: the forecast embeddings into the embedding table, the KV prefix as
// graph state (role kv_prefix).
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
  std::vector<float> keys, values;  // each [layers][kv_heads][P][head_dim] (load_assets with kv_rows)
};

// Throws nf::Error "ssd: FILE: WHAT": every asset problem is one line naming its file.
[[noreturn]] void fail(const std::string& file, const std::string& what);

// DIR/assets.json, checked to be ssd's; throws nf::Error with one line naming the file.
nlohmann::json read_assets_json(const std::string& dir);
// Reads DIR/assets.json and, with `kv_rows`, the KV prefix (the build hook's; a run needs only
// the counts). Throws nf::Error with one line naming the file.
Assets load_assets(const std::string& dir, bool kv_rows = true);

// The build hook: appends the assets' forecast embeddings (extra_embeddings) to the token
// embedding table of every graph (the Gather of an initializer by input_ids), so the
// package's recipes quantize them with the table, and records metadata extra_embeddings
// {rows, first_id, decoder}. Token ids first_id.. then embed the forecast rows.
void append_forecast_embeddings(const std::string& dir, nf::ModelSet ms);

// The build hook, second part: the assets' KV prefix as a graph of role kv_prefix
// (graph_roles.hpp). check_kv_prefix, run before anything changes, refuses a prefix whose
// geometry is not the model's (metadata config) or a model set that has one.
void check_kv_prefix(const Assets& a, const std::string& dir, const nf::ModelSet& ms);
void add_kv_prefix_graph(const Assets& a, nf::ModelSet ms);

}  // namespace ssd
