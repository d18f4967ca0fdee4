// Trained assets of a speculative decoder (e.g. ssd's forecast embeddings and KV prefix):
// a folder with assets.json and the files it names, given by an asset option of the
// decoder. The build appends its extra embedding rows to the model's token embedding table
// (and copies the folder into the package with the other asset options), so the package is
// self-contained; `npuforge run` on a bare model.onnx appends them before opening it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ir/ir.h"
#include "manifest/manifest.h"

namespace nf::host {

struct SpeculativeAssets {
  std::filesystem::path dir;
  nlohmann::json meta;  // assets.json
};

// Reads DIR/assets.json; throws a one-line error naming the file and the rule.
SpeculativeAssets load_speculative_assets(const std::filesystem::path& dir);

// The assets of a decoder: the first of its resolved asset options (manifest::asset_paths)
// that is a folder with assets.json; nullopt when none is.
std::optional<SpeculativeAssets> find_speculative_assets(const std::vector<manifest::AssetPath>& assets);

// Appends the assets' "extra_embeddings" rows to the token embedding table of every graph
// (the Gather whose indices are input_ids) and records metadata "extra_embeddings"
// {rows, first_id, decoder}. Token ids first_id.. then embed those rows. Returns a hash of
// the rows for the stage-cache key ("" when the assets add none).
std::string add_extra_embeddings(ir::ModelSet& ms, const SpeculativeAssets& assets);

}  // namespace nf::host
