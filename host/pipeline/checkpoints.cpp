#include "pipeline/checkpoints.h"

#include <spdlog/spdlog.h>

#include <fstream>

#include "common/util.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

constexpr const char* kData = "data";
constexpr const char* kDigest = "digest.json";
// A checkpoint holds one step's result (a layer's encodings), far below this.
constexpr uint64_t kCheckpointMax = 4ull << 30;

}  // namespace

StageCheckpoints::StageCheckpoints(const fs::path& cache_root, const std::string& stage_key,
                                   std::function<void(const std::string& name)> on_save)
    : dir_(cache_root / "checkpoints" / stage_key), on_save_(std::move(on_save)) {
  // Checkpoints half-written by a build that died (".tmp-<host>-<pid>-<n>") go first.
  remove_stale_work_dirs(dir_, R"(\.tmp-)");
}

void StageCheckpoints::save(const std::string& name, const void* data, size_t bytes) {
  try {
    TempDir tmp(dir_, ".tmp-");
    {
      std::ofstream out(tmp.path() / kData, std::ios::binary | std::ios::trunc);
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
      if (!out.flush()) throw std::runtime_error((tmp.path() / kData).string() + ": write failed");
    }
    write_text_file_atomic(tmp.path() / kDigest,
                           nlohmann::json{{"bytes", bytes}, {"hash", hash_bytes(data, bytes)}}.dump() + "\n");
    const fs::path entry = dir_ / name;
    std::error_code ec;
    fs::remove_all(entry, ec);  // an older save of the same step (a damaged one, or a rerun's)
    fs::rename(tmp.path(), entry, ec);
    if (ec) throw std::runtime_error(entry.string() + ": " + ec.message());
    tmp.release();
  } catch (const std::exception& e) {
    spdlog::warn("could not save checkpoint '{}' ({}); an interrupted build would redo that step", name, e.what());
    return;
  }
  if (on_save_) on_save_(name);
}

bool StageCheckpoints::load(const std::string& name, std::string* bytes) {
  const fs::path entry = dir_ / name;
  std::error_code ec;
  if (!fs::is_directory(entry, ec)) return false;
  std::string why;
  try {
    auto digest = nlohmann::json::parse(read_regular_file(entry / kDigest, kJsonMax, "checkpoint digest"));
    std::string data = read_regular_file(entry / kData, kCheckpointMax, "checkpoint");
    if (!digest.is_object() || digest.value("bytes", uint64_t{0}) != data.size() ||
        digest.value("hash", std::string()) != hash_bytes(data.data(), data.size()))
      why = "its bytes do not match its digest";
    else {
      *bytes = std::move(data);
      ++loaded_;
      return true;
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  spdlog::warn("checkpoint {} is damaged ({}); removing it and redoing that step", entry.string(), why);
  fs::remove_all(entry, ec);
  return false;
}

void StageCheckpoints::remove_all() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::remove(dir_.parent_path(), ec);  // the checkpoints folder, when no other stage has one
}

}  // namespace nf::host
