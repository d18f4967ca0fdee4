// Shared pieces of the ONNX import/export implementation (not part of the public API).
#pragma once

#include "onnx/onnx_io.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

namespace nf::onnx_io::detail {

// Makes text safe for a one-line message: control characters become spaces, long text is cut.
std::string one_line(std::string_view s, size_t max_len = 200);
// Throws ModelError("<origin>: <reason>") as one line.
[[noreturn]] void fail(const std::string& origin, const std::string& reason);

// ---- import ---------------------------------------------------------------------------
struct ImportContext {
  std::string origin;    // path shown in errors
  std::string base_dir;  // external data must resolve inside this folder
  // Canonical path -> mapping, so each external-data file is mapped once.
  std::map<std::string, std::shared_ptr<ir::MappedFile>> files;
};

// Replaces every call of a model-local function with the function's body (values renamed
// per call, attribute references bound) and drops ModelProto.functions; ModelError on a
// recursive call, a call with more inputs or outputs than the function, or a function whose
// opset of a domain differs from the model's.
void inline_local_functions(onnx::ModelProto& m, const std::string& origin);

// Parses a serialized ModelProto (any size up to the 2 GB protobuf limit) and converts it.
std::unique_ptr<ir::Graph> parse_and_import(std::string_view bytes, ImportContext& ctx);
std::unique_ptr<ir::Graph> parse_and_import_file(const std::string& path, ImportContext& ctx);
// Canonical form of a folder (or the folder itself if it cannot be resolved).
std::string canonical_dir(const std::string& dir);

// ---- export ---------------------------------------------------------------------------
// Appends tensor bytes to one data file at 64-byte aligned offsets, writing each distinct
// (buffer, offset, size) view once. Writes to "<path>.tmp" and renames on commit(), so a
// file that is currently mapped by the graph being saved is never truncated under it.
class DataWriter {
 public:
  DataWriter(std::string path, std::string location);
  ~DataWriter();
  DataWriter(const DataWriter&) = delete;
  DataWriter& operator=(const DataWriter&) = delete;

  uint64_t put(const ir::Tensor& t);  // offset of the tensor's bytes in the file
  const std::string& location() const { return location_; }
  uint64_t size() const { return size_; }
  void commit();

 private:
  std::string path_, tmp_, location_;
  std::ofstream out_;
  uint64_t size_ = 0;
  bool committed_ = false;
  std::map<std::tuple<const ir::Buffer*, size_t, size_t>, uint64_t> written_;
};

// Writes each distinct tensor content to its own file blobs/<hash>.bin of a model set
// folder (see BlobOptions), each (buffer, offset, size) view hashed once.
class BlobWriter {
 public:
  BlobWriter(std::string dir, const BlobOptions& opts) : dir_(std::move(dir)), opts_(opts) {}
  std::string put(const ir::Tensor& t);  // the file's location, relative to the folder
  size_t min_bytes() const { return opts_.min_bytes; }

 private:
  std::string dir_;
  const BlobOptions& opts_;
  std::map<std::tuple<const ir::Buffer*, size_t, size_t>, std::string> written_;
};

struct ExportPolicy {
  std::string origin;               // path shown in errors
  DataWriter* data = nullptr;       // null: everything inline
  BlobWriter* blobs = nullptr;      // set: initializers of blobs->min_bytes or more go there
  size_t initializer_threshold = 1024;  // initializers of at least this many bytes go to data
  size_t attribute_threshold = 1024;    // same for tensors in attributes (Constant nodes)
};

void export_model(const ir::Graph& g, const ExportPolicy& policy, onnx::ModelProto* model);
// Serializes to "<path>.tmp" and renames; refuses protos over the 2 GB protobuf limit.
void write_model_file(const onnx::ModelProto& model, const std::string& path);

}  // namespace nf::onnx_io::detail
