// ONNX import/export for the host IR, model sets on disk, AIMET 1.0.0 encodings and
// `npuforge inspect`. Weights stay where they are: external data is mmapped once per file
// and initializers are views into it; export writes large tensors to a data file.
#pragma once

#include "ir/ir.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace nf::onnx_io {

// A bad or unsafe model file. The message is one line: "<path>: <reason>".
struct ModelError : std::runtime_error {
  using runtime_error::runtime_error;
};

// Loads a .onnx file; external data is resolved beside it (never outside its folder).
std::unique_ptr<ir::Graph> load_model(const std::string& path);
// Same from bytes in memory; external data is resolved in base_dir.
std::unique_ptr<ir::Graph> load_model_from_bytes(std::string_view bytes, const std::string& base_dir);

struct SaveOptions {
  // File beside the model for tensors of external_threshold bytes or more; "<stem>" is
  // replaced by the model file's stem (model.onnx -> model.onnx.data). "" keeps all inline.
  std::string external_data_file = "<stem>.onnx.data";
  size_t external_threshold = 1024;
};
// Writes path (and its data file); offsets in the data file are 64-byte aligned.
void save_model(const ir::Graph& g, const std::string& path, const SaveOptions& opts = {});

// A model set on disk: DIR/model_set.json, DIR/<graph>.onnx, DIR/weights.bin (each distinct
// weight once) and DIR/encodings.json (AIMET 1.0.0, only when there are encodings).
// With `blobs`, each initializer of at least blobs->min_bytes is instead a file
// DIR/blobs/<hash of its bytes>.bin, each distinct content once; blobs->reuse(file name,
// destination) may put an existing copy there (a hard link) and return true, so a store of
// many model sets (the stage cache) keeps one copy of a weight that several of them hold.
struct BlobOptions {
  size_t min_bytes = size_t{1} << 20;
  std::function<bool(const std::string& file_name, const std::filesystem::path& dest)> reuse;
};
void save_model_set(const ir::ModelSet& ms, const std::string& dir,  // dir must exist and be empty
                    const BlobOptions* blobs = nullptr);
// Maps weights.bin once; every initializer views it.
std::unique_ptr<ir::ModelSet> load_model_set(const std::string& dir);

// AIMET 1.0.0 encodings. A name is a param encoding if it is an initializer of any graph.
nlohmann::json encodings_to_json(const ir::ModelSet& ms);
// The same document as encodings_to_json(ms).dump(2), written one entry at a time.
void write_encodings(const ir::ModelSet& ms, std::ostream& out);
// Validates field names, types and array lengths; throws ModelError naming the entry.
void encodings_from_json(const nlohmann::json& j, ir::ModelSet& ms);

// Summary of a decoder graph: parameters, layers, heads, KV IO, ops (see onnx_io docs in inspect.cpp).
nlohmann::json inspect(const ir::Graph& g);
// Human-readable table of inspect()'s result for `npuforge inspect`.
std::string format_inspect(const nlohmann::json& info);

}  // namespace nf::onnx_io
