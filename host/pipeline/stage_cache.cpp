#include "pipeline/stage_cache.h"

#include <spdlog/spdlog.h>

#include "onnx/onnx_io.h"
#include "pipeline/util.h"

namespace fs = std::filesystem;

namespace nf::host {

fs::path StageCache::default_root() {
  if (const char* d = std::getenv("NPUFORGE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "npuforge";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "npuforge";
  return fs::temp_directory_path() / "npuforge-cache";
}

StageCache::StageCache(fs::path root, bool enabled) : root_(std::move(root)), enabled_(enabled) {}

std::string StageCache::key(const std::string& input_key, const std::string& kind, const std::string& name,
                            const std::string& version, const nlohmann::json& options) {
  // json::dump sorts object keys, so equal options give equal keys.
  return hash_string(input_key + "\n" + kind + "\n" + name + "\n" + version + "\n" + options.dump());
}

std::unique_ptr<ir::ModelSet> StageCache::load(const std::string& key) const {
  if (!enabled_) return nullptr;
  fs::path dir = root_ / "stages" / key;
  if (!fs::is_regular_file(dir / "model_set.json")) return nullptr;
  try {
    return onnx_io::load_model_set(dir.string());
  } catch (const std::exception& e) {
    spdlog::warn("stage cache entry {} is unreadable ({}); rebuilding it", dir.string(), e.what());
    return nullptr;
  }
}

void StageCache::store(const std::string& key, const ir::ModelSet& ms) const {
  if (!enabled_) return;
  try {
    fs::path stages = root_ / "stages";
    TempDir tmp(stages, ".tmp-");
    onnx_io::save_model_set(ms, tmp.path().string());
    std::error_code ec;
    fs::rename(tmp.path(), stages / key, ec);  // another build may have stored it first: fine
    if (!ec) tmp.release();
  } catch (const std::exception& e) {
    spdlog::warn("could not store stage cache entry: {}", e.what());
  }
}

}  // namespace nf::host
