#include "pipeline/package.h"

#include <unistd.h>

#include "pipeline/util.h"

namespace fs = std::filesystem;

namespace nf::host {

std::string Package::tokenizer() const {
  if (!meta.contains("tokenizer") || meta["tokenizer"].is_null()) return "";
  return (dir / meta["tokenizer"].get<std::string>()).string();
}

bool looks_like_package(const fs::path& dir) { return fs::is_regular_file(dir / "package.json"); }

Package open_package(const fs::path& dir) {
  Package p;
  p.dir = fs::absolute(dir).lexically_normal();
  fs::path meta_path = p.dir / "package.json";
  if (!fs::is_regular_file(meta_path)) throw PackageError(p.dir.string() + ": not a package (no package.json)");
  try {
    p.meta = nlohmann::json::parse(read_text_file(meta_path));
  } catch (const nlohmann::json::exception& e) {
    throw PackageError(meta_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!p.meta.is_object() || p.meta.value("format", "") != kPackageFormat)
    throw PackageError(meta_path.string() + ": not an npuforge package");
  if (p.meta.value("version", 0) != kPackageVersion)
    throw PackageError(meta_path.string() + ": package version " + p.meta.value("version", nlohmann::json()).dump() +
                       " is not supported (want " + std::to_string(kPackageVersion) + ")");
  for (const char* key : {"backend", "files", "graphs"})
    if (!p.meta.contains(key)) throw PackageError(meta_path.string() + ": missing '" + key + "'");
  for (const auto& [rel, want] : p.meta["files"].items()) {
    fs::path f = (p.dir / rel).lexically_normal();
    if (rel.find("..") != std::string::npos || fs::path(rel).is_absolute())
      throw PackageError(meta_path.string() + ": bad file entry '" + rel + "'");
    if (!fs::is_regular_file(f)) throw PackageError(p.dir.string() + ": corrupt package: missing file " + rel);
    if (hash_file(f) != want.get<std::string>())
      throw PackageError(p.dir.string() + ": corrupt package: " + rel + " does not match its hash");
  }
  return p;
}

void seal_package(const fs::path& staging, nlohmann::json meta, const fs::path& final_dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::recursive_directory_iterator(staging)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), staging).generic_string();
    if (rel == "package.json") continue;
    files[rel] = hash_file(e.path());
  }
  meta["files"] = files;
  write_text_file_atomic(staging / "package.json", meta.dump(2) + "\n");

  // Swap in: the old package (if any) moves aside first and is deleted last.
  fs::path old;
  if (fs::exists(final_dir)) {
    old = final_dir;
    old += ".old-" + std::to_string(::getpid());
    fs::rename(final_dir, old);
  }
  try {
    fs::rename(staging, final_dir);
  } catch (...) {
    if (!old.empty()) fs::rename(old, final_dir);
    throw;
  }
  if (!old.empty()) fs::remove_all(old);
}

}  // namespace nf::host
