// Checkpoints of a long stage (nf_host_api checkpoint_save / checkpoint_load): a recipe
// that works layer by layer saves each finished layer, and a rerun of the interrupted build
// (same stage key: model, options, calibration, plugin library) finds them again. They live
// in <cache root>/checkpoints/<stage key>/<name>/ as {data, digest.json}, each written
// aside and renamed into place, verified on load; the build removes the stage's folder once
// the stage's result is in the stage cache.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "api/host_api.h"

namespace nf::host {

class StageCheckpoints : public CheckpointStore {
 public:
  // `on_save` (may be empty) is called after each checkpoint is in place.
  StageCheckpoints(const std::filesystem::path& cache_root, const std::string& stage_key,
                   std::function<void(const std::string& name)> on_save = {});
  void save(const std::string& name, const void* data, size_t bytes) override;
  bool load(const std::string& name, std::string* bytes) override;
  // How many checkpoints load returned, to say that the stage resumed.
  size_t loaded() const { return loaded_; }
  // The stage finished and is cached: its checkpoints are not needed again.
  void remove_all();

 private:
  std::filesystem::path dir_;
  std::function<void(const std::string&)> on_save_;
  size_t loaded_ = 0;
};

}  // namespace nf::host
