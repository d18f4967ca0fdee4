// Reading the user's input files with bounds: regular files only (a FIFO or a device such
// as /dev/zero could hang or never end) and a size cap per kind of file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace nf::host {

// A file could not be read: what() is "<path>: <reason>".
struct FileError : std::runtime_error {
  FileError(const std::string& path, const std::string& why) : std::runtime_error(path + ": " + why), reason(why) {}
  std::string reason;
};

// Size caps: far above any real file of the kind, far below what would exhaust memory.
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kManifestMax = 4 * kMiB;     // manifest.toml
constexpr uint64_t kJsonMax = 64 * kMiB;        // config.json, package.json, assets.json, ...
constexpr uint64_t kTokenizerMax = 512 * kMiB;  // tokenizer.json (multilingual ones reach ~35 MB)
constexpr uint64_t kTextMax = 4096 * kMiB;      // calibration and evaluation text
// A model set's encodings.json (AIMET text; per-block scales make it ~200 MB at 1B, ~1.5 GB at 8B).
constexpr uint64_t kEncodingsMax = 4096 * kMiB;

// The bytes of the regular file `path`. Throws std::runtime_error "<path>: <why>" when it
// is missing, not a regular file, or larger than `max_bytes`; `what` names the file's role
// in that message ("tokenizer", "calibration text").
std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what);

}  // namespace nf::host
