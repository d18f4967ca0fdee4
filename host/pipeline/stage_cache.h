// Stage cache: the model set after each quant/transform stage, stored under a key of
// (key of the stage's input, plugin kind + name + version, options). A rebuild replays
// the stages that did not change from here instead of running them.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ir/ir.h"

namespace nf::host {

class StageCache {
 public:
  // Default root: $NPUFORGE_CACHE_DIR, else $XDG_CACHE_HOME/npuforge, else ~/.cache/npuforge.
  static std::filesystem::path default_root();
  explicit StageCache(std::filesystem::path root, bool enabled = true);

  static std::string key(const std::string& input_key, const std::string& kind, const std::string& name,
                         const std::string& version, const nlohmann::json& options);
  // The cached model set for `key`, or null.
  std::unique_ptr<ir::ModelSet> load(const std::string& key) const;
  // Stores atomically; a failure to store only costs a warning.
  void store(const std::string& key, const ir::ModelSet& ms) const;
  bool enabled() const { return enabled_; }

 private:
  std::filesystem::path root_;
  bool enabled_;
};

}  // namespace nf::host
