#include "pipeline/stage_cache.h"

#include <spdlog/spdlog.h>

#include "common/util.h"
#include "onnx/onnx_io.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// Beside the model set in each entry: {"files": {relative path: hash}} of all its files.
constexpr const char* kEntryDigest = "entry.json";
// Part of every key: a host that writes model sets differently never reads older entries.
constexpr const char* kHostVersion = "npuforge 0.1.0";

nlohmann::json file_hashes(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel != kEntryDigest) files[rel] = hash_file(e.path());
  }
  return files;
}

// "" when every file of the entry is there with the hash it was stored with; else why not.
std::string verify_entry(const fs::path& dir) {
  nlohmann::json digest;
  try {
    digest = nlohmann::json::parse(read_regular_file(dir / kEntryDigest, kJsonMax, "cache entry digest"));
  } catch (const std::exception&) {
    return "it has no readable " + std::string(kEntryDigest);
  }
  if (!digest.is_object() || !digest.contains("files") || !digest["files"].is_object()) return "its digest is malformed";
  const nlohmann::json have = file_hashes(dir);
  for (const auto& [rel, hash] : digest["files"].items()) {
    if (!have.contains(rel)) return rel + " is missing";
    if (have[rel] != hash) return rel + " does not match its hash";
  }
  for (const auto& [rel, hash] : have.items())
    if (!digest["files"].contains(rel)) return rel + " was not part of it";
  return "";
}

}  // namespace

fs::path StageCache::default_root() {
  if (const char* d = std::getenv("NPUFORGE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "npuforge";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "npuforge";
  return fs::temp_directory_path() / "npuforge-cache";
}

StageCache::StageCache(fs::path root, bool enabled) : root_(std::move(root)), enabled_(enabled) {
  // Entries half-written by builds that died (".tmp-<host>-<pid>-<n>") go first.
  if (enabled_) remove_stale_work_dirs(root_ / "stages", R"(\.tmp-)");
}

std::string StageCache::key(const std::string& input_key, const std::string& kind, const std::string& name,
                            const std::string& version, const std::string& library_hash, const nlohmann::json& inputs) {
  // json::dump sorts object keys, so equal inputs give equal keys.
  return hash_string(std::string(kHostVersion) + "\n" + input_key + "\n" + kind + "\n" + name + "\n" + version + "\n" +
                     library_hash + "\n" + inputs.dump());
}

void StageCache::evict(const fs::path& entry, const std::string& why) const {
  spdlog::warn("stage cache entry {} is damaged ({}); removing it and running the stage again", entry.string(), why);
  // Renamed out of the way first, so no other build picks up a half-removed entry.
  std::error_code ec;
  const fs::path doomed = entry.parent_path() / work_dir_name(".tmp-");
  fs::rename(entry, doomed, ec);
  fs::remove_all(ec ? entry : doomed, ec);
}

std::unique_ptr<ir::ModelSet> StageCache::load(const std::string& key) const {
  if (!enabled_) return nullptr;
  fs::path dir = root_ / "stages" / key;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return nullptr;
  if (std::string why = verify_entry(dir); !why.empty()) {
    evict(dir, why);
    return nullptr;
  }
  try {
    return onnx_io::load_model_set(dir.string());
  } catch (const std::exception& e) {
    evict(dir, e.what());
    return nullptr;
  }
}

bool StageCache::contains(const std::string& key) const {
  std::error_code ec;
  return enabled_ && fs::is_regular_file(root_ / "stages" / key / kEntryDigest, ec);
}

bool StageCache::store(const std::string& key, const ir::ModelSet& ms) const {
  if (!enabled_) return false;
  try {
    fs::path stages = root_ / "stages";
    TempDir tmp(stages, ".tmp-");
    onnx_io::save_model_set(ms, tmp.path().string());
    write_text_file_atomic(tmp.path() / kEntryDigest, nlohmann::json{{"files", file_hashes(tmp.path())}}.dump(1) + "\n");
    std::error_code ec;
    fs::rename(tmp.path(), stages / key, ec);  // another build may have stored it first: fine
    if (!ec) tmp.release();
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("could not store stage cache entry: {}", e.what());
    return false;
  }
}

}  // namespace nf::host
