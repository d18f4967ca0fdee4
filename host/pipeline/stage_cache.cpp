#include "pipeline/stage_cache.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <ctime>

#include "common/util.h"
#include "onnx/onnx_io.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// Beside the model set in each entry: {"files": {relative path: hash}} of all its files.
constexpr const char* kEntryDigest = "entry.json";
// Beside the digest once an entry was verified: {"files": {relative path: stamp}}, each file's
// stat (device, inode, size, modification and change times) as it was when its bytes matched
// the digest. A later load hashes only the files whose stamp differs, so the stage after its
// parts, or a rebuild, does not read a 70B model's weights again to verify them. Writing,
// truncating, replacing or re-linking a file changes its change time, which no user can set:
// an edited file is always hashed again. What the memo cannot see is storage that changes
// bytes without a trace (bit rot); a file changed within two seconds of being stamped is not
// memoized (a file system with coarse times could hide a change in the same tick).
constexpr const char* kVerifiedMemo = "verified.json";
// The memo, or one being written beside it (<memo>.tmp<pid>): not part of the entry, so a
// load that meets another process writing the memo does not take the entry for damaged.
bool is_memo(const std::string& rel) { return rel.starts_with(kVerifiedMemo); }
// Part of every key: a host that writes model sets differently never reads older entries.
// The model-set format's number goes up with each such change (2: metadata imported_files).
constexpr const char* kHostVersion = "npuforge 0.1.0, model sets 2";

// Weights of at least this size are blobs shared between entries (root/blobs/<hash>.bin,
// hard-linked into each entry that holds them): a quant stage that only adds encodings, or
// a transform that only rewires the graph, stores no second copy of an 8B model's weights.
constexpr size_t kBlobBytes = size_t{1} << 20;
constexpr const char* kBlobs = "blobs";
// A compile entry's copy of the backend's output folder.
constexpr const char* kArtifacts = "artifacts";

// {relative path: hash} of an entry's files, but those under `skip` (already hashed as they
// were copied). A blob's name is the hash of the bytes it was written from
// (`blobs_by_name`), which spares hashing an 8B model's weights at every store; verify_entry
// hashes them all.
nlohmann::json file_hashes(const fs::path& dir, bool blobs_by_name = false, const std::string& skip = "") {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel == kEntryDigest || is_memo(rel) || (!skip.empty() && rel.starts_with(skip))) continue;
    const bool blob = blobs_by_name && e.path().parent_path().filename() == kBlobs && e.path().extension() == ".bin";
    files[rel] = blob ? e.path().stem().string() : hash_file(e.path());
  }
  return files;
}

// "" when `have` holds exactly the files of the entry's digest, each with the hash it was
// stored with; else why not (`bad_file`, when given: the relative path at fault, if one is).
std::string compare_with_digest(const fs::path& dir, const nlohmann::json& have, std::string* bad_file = nullptr) {
  nlohmann::json digest;
  try {
    digest = nlohmann::json::parse(read_regular_file(dir / kEntryDigest, kJsonMax, "cache entry digest"));
  } catch (const std::exception&) {
    return "it has no readable " + std::string(kEntryDigest);
  }
  if (!digest.is_object() || !digest.contains("files") || !digest["files"].is_object()) return "its digest is malformed";
  for (const auto& [rel, hash] : digest["files"].items()) {
    if (!have.contains(rel)) return rel + " is missing";
    if (have[rel] != hash) {
      if (bad_file) *bad_file = rel;
      return rel + " does not match its hash";
    }
  }
  for (const auto& [rel, hash] : have.items())
    if (!digest["files"].contains(rel)) return rel + " was not part of it";
  return "";
}

// A file's stamp for the memo: "" when it cannot be stat'ed or was changed too recently to
// be memoized.
std::string file_stamp(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return "";
  timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec - std::max(st.st_mtim.tv_sec, st.st_ctim.tv_sec) < 2) return "";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

// Verifies an entry against its digest, hashing the files the memo does not vouch for, and
// memoizes what it hashed.
std::string verify_entry(const fs::path& dir, std::string* bad_file = nullptr) {
  nlohmann::json memo = nlohmann::json::object(), digest = nlohmann::json::object();
  try {  // a missing or unreadable memo vouches for nothing; a bad digest fails below
    memo = nlohmann::json::parse(read_regular_file(dir / kVerifiedMemo, kJsonMax, "verified memo")).at("files");
    digest = nlohmann::json::parse(read_regular_file(dir / kEntryDigest, kJsonMax, "cache entry digest")).at("files");
  } catch (const std::exception&) {
  }
  if (!memo.is_object() || !digest.is_object()) memo = digest = nlohmann::json::object();
  nlohmann::json have = nlohmann::json::object(), stamps = nlohmann::json::object();
  size_t hashed = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel == kEntryDigest || is_memo(rel)) continue;
    const std::string stamp = file_stamp(e.path());  // before reading: a change while hashing shows later
    if (!stamp.empty()) stamps[rel] = stamp;
    if (!stamp.empty() && memo.contains(rel) && memo[rel] == stamp && digest.contains(rel)) {
      have[rel] = digest[rel];
    } else {
      have[rel] = hash_file(e.path());
      ++hashed;
    }
  }
  std::string why = compare_with_digest(dir, have, bad_file);
  spdlog::debug("stage cache: {} {}, {} of {} file(s) hashed", dir.filename().string(), why.empty() ? "verified" : "damaged",
                hashed, have.size());
  if (why.empty() && hashed > 0) {
    try {
      write_text_file_atomic(dir / kVerifiedMemo, nlohmann::json{{"files", stamps}}.dump(1) + "\n");
    } catch (const std::exception& e) {
      spdlog::debug("stage cache: could not memoize the verification of {} ({})", dir.string(), e.what());
    }
  }
  return why;
}

// Every regular file under `from` copied to the same relative path under `to`; returns
// {prefix + relative path: hash} of the bytes copied. Copies, not links: a package never
// shares its files with the cache.
nlohmann::json copy_tree(const fs::path& from, const fs::path& to, const std::string& prefix = "") {
  nlohmann::json hashes = nlohmann::json::object();
  fs::create_directories(to);
  for (const auto& e : fs::recursive_directory_iterator(from)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), from);
    fs::create_directories((to / rel).parent_path());
    hashes[prefix + rel.generic_string()] = copy_file_hashed(e.path(), to / rel);
  }
  return hashes;
}

// Seals a written entry with its digest (`files`: the hashes of the files under `skip`,
// taken as they were copied in) and moves it into place (another build may have stored the
// same key first: fine, this one goes).
void seal_entry(TempDir& tmp, const fs::path& final_dir, bool blobs_by_name, nlohmann::json files = nlohmann::json::object(),
                const std::string& skip = "") {
  files.update(file_hashes(tmp.path(), blobs_by_name, skip));
  write_text_file_atomic(tmp.path() / kEntryDigest, nlohmann::json{{"files", files}}.dump(1) + "\n");
  std::error_code ec;
  fs::rename(tmp.path(), final_dir, ec);
  if (!ec) tmp.release();
}

}  // namespace

fs::path StageCache::default_root() {
  if (const char* d = std::getenv("NPUFORGE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "npuforge";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "npuforge";
  return fs::temp_directory_path() / "npuforge-cache";
}

StageCache::StageCache(fs::path root, bool enabled) : root_(std::move(root)), enabled_(enabled) {
  if (!enabled_) return;
  // Entries half-written by builds that died (".tmp-<host>-<pid>-<n>") go first, then blobs
  // no entry links any more (a store that meets one gone writes its bytes itself).
  remove_stale_work_dirs(root_ / "stages", R"(\.tmp-)");
  remove_stale_work_dirs(root_ / "compiles", R"(\.tmp-)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_ / kBlobs, ec)) {
    std::error_code ec2;
    if (e.is_regular_file(ec2) && fs::hard_link_count(e.path(), ec2) == 1) fs::remove(e.path(), ec2);
  }
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
  std::string bad_file;
  if (std::string why = verify_entry(dir, &bad_file); !why.empty()) {
    // A damaged blob is damaged in every entry that links it: no later store reuses it.
    if (fs::path(bad_file).parent_path() == kBlobs) fs::remove(root_ / bad_file, ec);
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

bool StageCache::contains_compile(const std::string& key) const {
  std::error_code ec;
  return enabled_ && fs::is_regular_file(root_ / "compiles" / key / kEntryDigest, ec);
}

bool StageCache::store(const std::string& key, const ir::ModelSet& ms) const {
  if (!enabled_) return false;
  try {
    fs::path stages = root_ / "stages";
    TempDir tmp(stages, ".tmp-");
    const fs::path shared = root_ / kBlobs;
    onnx_io::BlobOptions blobs;
    blobs.min_bytes = kBlobBytes;
    blobs.reuse = [&](const std::string& name, const fs::path& dest) {
      std::error_code ec;
      fs::create_hard_link(shared / name, dest, ec);
      return !ec;
    };
    onnx_io::save_model_set(ms, tmp.path().string(), &blobs);
    // The blobs this entry wrote become shared (another build may have shared one first).
    std::error_code ec;
    fs::create_directories(shared, ec);
    for (const auto& e : fs::directory_iterator(tmp.path() / kBlobs, ec)) {
      std::error_code ec2;
      if (fs::hard_link_count(e.path(), ec2) == 1) fs::create_hard_link(e.path(), shared / e.path().filename(), ec2);
    }
    seal_entry(tmp, stages / key, true);
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("could not store stage cache entry: {}", e.what());
    return false;
  }
}

std::optional<nlohmann::json> StageCache::load_compile(const std::string& key, const fs::path& dest,
                                                      nlohmann::json* hashes) const {
  if (!enabled_) return std::nullopt;
  const fs::path dir = root_ / "compiles" / key;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  auto empty_dest = [&] {
    for (const auto& f : fs::directory_iterator(dest, ec)) fs::remove_all(f.path(), ec);
  };
  // Verified as it is copied: each artifact is read once, for its copy and its hash.
  nlohmann::json copied;
  try {
    copied = copy_tree(dir / kArtifacts, dest, std::string(kArtifacts) + "/");
  } catch (const std::exception& e) {
    spdlog::warn("could not take the compiled artifacts from the stage cache: {}", e.what());
    empty_dest();
    return std::nullopt;
  }
  nlohmann::json have = copied;
  have.update(file_hashes(dir, false, std::string(kArtifacts) + "/"));
  std::string why = compare_with_digest(dir, have);
  nlohmann::json model;
  if (why.empty()) {
    try {
      model = nlohmann::json::parse(read_regular_file(dir / "model.json", kJsonMax, "compile description"));
      if (!model.is_object() || !model.contains("graphs") || !model["graphs"].is_array() ||
          !model.contains("graph_count") || !model.contains("metadata") || !model["metadata"].is_object() ||
          !model["metadata"].contains("source_key"))
        why = "model.json is malformed";
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  if (!why.empty()) {
    empty_dest();
    evict(dir, why);
    return std::nullopt;
  }
  if (hashes) *hashes = std::move(copied);
  return model;
}

bool StageCache::store_compile(const std::string& key, const fs::path& artifacts, const nlohmann::json& model,
                               nlohmann::json* hashes) const {
  if (!enabled_) return false;
  try {
    const fs::path compiles = root_ / "compiles";
    TempDir tmp(compiles, ".tmp-");
    nlohmann::json copied = copy_tree(artifacts, tmp.path() / kArtifacts, std::string(kArtifacts) + "/");
    write_text_file_atomic(tmp.path() / "model.json", model.dump() + "\n");
    if (hashes) *hashes = copied;
    seal_entry(tmp, compiles / key, false, std::move(copied), std::string(kArtifacts) + "/");
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("could not store the compile in the stage cache: {}", e.what());
    return false;
  }
}

}  // namespace nf::host
