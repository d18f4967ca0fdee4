// Stage cache: the model set after each quant/transform stage, stored under a key of
// everything the stage's output depends on: the key of its input, the plugin (kind, name,
// version and the hash of its library file), its options, the bytes of every file an
// option names, and the host's version. A rebuild replays the stages that did not change
// from here instead of running them. Each entry carries the hash of each of its files and
// is verified when reused: a damaged entry is evicted and rebuilt, with a warning.
// Layout: <root>/stages/<key>/ (a model set, onnx_io::save_model_set), <root>/compiles/<key>/
// (a backend's artifacts and model.json) and <root>/blobs/,
// one file per distinct weight of 1 MiB or more, named by the hash of its bytes and
// hard-linked into every entry that holds it; a blob no entry links goes when a cache is
// next opened.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "ir/ir.h"

namespace nf::host {

class StageCache {
 public:
  // Default root: $NPUFORGE_CACHE_DIR, else $XDG_CACHE_HOME/npuforge, else ~/.cache/npuforge.
  static std::filesystem::path default_root();
  explicit StageCache(std::filesystem::path root, bool enabled = true);

  // `inputs` is everything else the output depends on (options, file hashes, ...); object
  // keys are sorted, so equal inputs give equal keys.
  static std::string key(const std::string& input_key, const std::string& kind, const std::string& name,
                         const std::string& version, const std::string& library_hash, const nlohmann::json& inputs);
  // The cached model set for `key`, or null (also when the entry fails verification: it is
  // then removed, with a warning).
  std::unique_ptr<ir::ModelSet> load(const std::string& key) const;
  // Whether an entry for `key` is there (not verified: load() does that).
  bool contains(const std::string& key) const;
  // Stores atomically; a failure to store only costs a warning (and returns false).
  bool store(const std::string& key, const ir::ModelSet& ms) const;
  bool enabled() const { return enabled_; }

  // A compile under `key`, in <root>/compiles/: the backend's output folder (artifacts/)
  // and a description of the model set it compiled (model.json: graph specs, metadata), so
  // a rebuild whose compiles are all cached never loads the model set. load copies the
  // artifacts into the empty folder `dest` (a package never shares its files with the
  // cache), verifying the entry like a stage entry as it copies, and returns the
  // description; nullopt when there is no entry or it was damaged (then evicted, with a
  // warning; `dest` left empty). Both give `hashes`: {"artifacts/<path>": hash} of the
  // artifacts copied, which the package's seal need not take again.
  std::optional<nlohmann::json> load_compile(const std::string& key, const std::filesystem::path& dest,
                                             nlohmann::json* hashes = nullptr) const;
  // Whether a compile entry for `key` is there (not verified: load_compile does that).
  bool contains_compile(const std::string& key) const;
  // Stores atomically; a failure only costs a warning (and returns false).
  bool store_compile(const std::string& key, const std::filesystem::path& artifacts, const nlohmann::json& model,
                     nlohmann::json* hashes = nullptr) const;

 private:
  void evict(const std::filesystem::path& entry, const std::string& why) const;
  std::filesystem::path root_;
  bool enabled_;
};

}  // namespace nf::host
