#include "runtime/package.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include "common/util.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// A path in package.json's file list stays inside the package.
bool confined(const std::string& rel) {
  if (rel.empty() || fs::path(rel).is_absolute()) return false;
  for (const auto& part : fs::path(rel))
    if (part == ".." || part == ".") return false;
  return true;
}

// package.json of the folder `root`, checked for our format and version (and, when
// `sealed`, its digest); `shown` names the folder in messages.
nlohmann::json read_meta(const fs::path& root, const fs::path& shown, bool sealed) {
  const fs::path meta_path = shown / "package.json";
  std::error_code ec;
  if (!fs::is_regular_file(root / "package.json", ec))
    throw PackageError(shown.string() + ": not a package (no package.json)");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_regular_file(root / "package.json", kJsonMax, "package.json"));
  } catch (const nlohmann::json::exception& e) {
    throw PackageError(meta_path.string() + ": not valid JSON (" + e.what() + ")");
  } catch (const FileError& e) {
    throw PackageError(meta_path.string() + ": " + e.reason);
  }
  if (!meta.is_object() || meta.value("format", "") != kPackageFormat)
    throw PackageError(meta_path.string() + ": not an npuforge package");
  if (sealed && !meta.contains("digest"))
    throw PackageError(meta_path.string() + ": not sealed (no digest; made by an older npuforge?): rebuild the package");
  if (sealed && meta["digest"] != package_digest(meta))
    throw PackageError(meta_path.string() + ": changed after the package was sealed (its digest does not match)");
  if (meta.value("version", 0) != kPackageVersion)
    throw PackageError(meta_path.string() + ": package version " + meta.value("version", nlohmann::json()).dump() +
                       " is not supported (want " + std::to_string(kPackageVersion) + ")");
  for (const char* key : {"backend", "files", "graphs"})
    if (!meta.contains(key)) throw PackageError(meta_path.string() + ": missing '" + key + "'");
  if (!meta["files"].is_object()) throw PackageError(meta_path.string() + ": 'files' is not an object");
  for (const auto& [rel, want] : meta["files"].items())
    if (!confined(rel) || !want.is_string()) throw PackageError(meta_path.string() + ": bad file entry '" + rel + "'");
  return meta;
}

enum class Swap { exchanged, unsupported };

// Swaps the folders at `a` and `b` in one step (renameat2 RENAME_EXCHANGE): a reader sees
// the old package or the new one, never neither.
Swap exchange(const fs::path& a, const fs::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return Swap::exchanged;
  const int e = errno;
  if (e == EINVAL || e == ENOSYS || e == ENOTSUP) return Swap::unsupported;  // e.g. some network file systems
  throw PackageError("cannot swap " + a.string() + " and " + b.string() + ": " + std::strerror(e));
}

// Moves `from` to the absent `to`, never over something that appeared there meanwhile.
void move_new(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  const int e = errno;
  if (e == EINVAL || e == ENOSYS || e == ENOTSUP) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(to, ec))) {
      fs::rename(from, to);
      return;
    }
  }
  throw PackageError("cannot move " + from.string() + " to " + to.string() + ": " + std::strerror(e));
}

// Removes a replaced package unless a reader still holds it; the next build's
// remove_stale_build_dirs removes it then.
void remove_old_package(const fs::path& old) {
  DirLock lock(old, DirLock::exclusive_nowait);
  if (!lock.held()) {
    spdlog::debug("{} is still in use; a later build removes it", old.string());
    return;
  }
  std::error_code ec;
  fs::remove_all(old, ec);
  if (ec) spdlog::warn("could not remove the replaced package {}: {}", old.string(), ec.message());
}

// The work-folder prefix of a target's staging and old package: ".cpu.partial-", ".cpu.old-".
const char* kStalePattern = R"(\..+\.(?:partial|old)-)";

}  // namespace

std::string package_digest(const nlohmann::json& meta) {
  nlohmann::json rest = meta;
  rest.erase("digest");
  return hash_string(rest.dump());  // dump sorts keys: one text per content
}

namespace {
std::string named_file(const Package& p, const char* key) {
  if (!p.meta.contains(key) || p.meta[key].is_null()) return "";
  return (p.root / p.meta[key].get<std::string>()).string();
}
}  // namespace

std::string Package::tokenizer() const { return named_file(*this, "tokenizer"); }
std::string Package::config() const { return named_file(*this, "config"); }

bool looks_like_package(const fs::path& dir) { return fs::is_regular_file(dir / "package.json"); }

Package open_package(const fs::path& dir) {
  Package p;
  p.dir = fs::absolute(dir).lexically_normal();
  // Lock the folder, then read everything through its descriptor. A rebuild may have
  // swapped a new package in and removed the old folder between our open and our lock:
  // then the folder we hold is deleted (no links) and we open the path again.
  for (int attempt = 0; attempt < 5 && !p.lock; ++attempt) {
    auto lock = std::make_shared<DirLock>(p.dir, DirLock::shared);
    if (!lock->held()) throw PackageError(p.dir.string() + ": not a package (cannot open the folder)");
    struct stat st {};
    if (::fstat(lock->fd(), &st) == 0 && st.st_nlink == 0) continue;
    p.lock = lock;
  }
  if (!p.lock) throw PackageError(p.dir.string() + ": the package keeps being replaced; try again");
  std::error_code ec;
  p.root = "/proc/self/fd/" + std::to_string(p.lock->fd());
  if (!fs::is_directory(p.root, ec)) p.root = p.dir;  // no /proc: read by path
  p.meta = read_meta(p.root, p.dir, true);
  for (const auto& [rel, want] : p.meta["files"].items()) {
    const fs::path f = p.root / rel;
    if (!fs::is_regular_file(fs::symlink_status(f, ec)))
      throw PackageError(p.dir.string() + ": corrupt package: missing file " + rel);
    if (hash_file(f) != want.get<std::string>())
      throw PackageError(p.dir.string() + ": corrupt package: " + rel + " does not match its hash");
  }
  // The shapes of the fields the host reads (a sealed package.json was made by a build;
  // this is for one sealed again by hand or by another tool).
  const auto& m = p.meta;
  const std::string where = (p.dir / "package.json").string() + ": ";
  if (!m["backend"].is_object() || !m["backend"].contains("name") || !m["backend"]["name"].is_string() ||
      !m["backend"].contains("options") || !m["backend"]["options"].is_object())
    throw PackageError(where + "'backend' needs a string 'name' and an object 'options'");
  if (!m["graphs"].is_array() || m["graphs"].empty()) throw PackageError(where + "'graphs' is not a list of graphs");
  for (const auto& g : m["graphs"])
    if (!g.is_object() || !g.contains("name") || !g["name"].is_string() || !g.contains("inputs") ||
        !g["inputs"].is_array() || !g.contains("outputs") || !g["outputs"].is_array())
      throw PackageError(where + "each graph needs a string 'name' and lists 'inputs' and 'outputs'");
  for (const char* key : {"metadata", "speculative"})
    if (m.contains(key) && !m[key].is_null() && !m[key].is_object())
      throw PackageError(where + "'" + key + "' is not an object");
  // The files the host reads by name are files of the package, hashed above.
  for (const char* key : {"tokenizer", "config"})
    if (p.meta.contains(key) && !p.meta[key].is_null() &&
        (!p.meta[key].is_string() || !p.meta["files"].contains(p.meta[key].get<std::string>())))
      throw PackageError((p.dir / "package.json").string() + ": '" + key + "' names no file of the package");
  return p;
}

std::string why_not_replaceable(const fs::path& dir) {
  std::error_code ec;
  const auto st = fs::symlink_status(dir, ec);
  if (!fs::exists(st)) return "";
  if (fs::is_symlink(st)) return "is a symbolic link, not a package folder";
  if (!fs::is_directory(st)) return "is a file, not a package folder";
  if (fs::is_empty(dir, ec)) return "";
  nlohmann::json meta;
  try {
    meta = read_meta(dir, dir, false);  // ours even if edited since: replacing it loses nothing of the user's
  } catch (const std::exception&) {
    return "is not an npuforge package (no valid package.json)";
  }
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const auto s = it->symlink_status(ec);
    if (fs::is_directory(s)) continue;
    const std::string rel = fs::relative(it->path(), dir, ec).generic_string();
    if (rel == "package.json" || (fs::is_regular_file(s) && meta["files"].contains(rel))) continue;
    return "holds '" + rel + "', which is not a file of its package";
  }
  if (ec) return "cannot be read (" + ec.message() + ")";
  return "";
}

void seal_package(const fs::path& staging, nlohmann::json meta, const nlohmann::json& known) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::recursive_directory_iterator(staging)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), staging).generic_string();
    if (rel == "package.json") continue;
    auto k = known.is_object() ? known.find(rel) : known.end();
    files[rel] = k != known.end() ? k->get<std::string>() : hash_file(e.path());
  }
  meta["files"] = files;
  meta["digest"] = package_digest(meta);
  write_text_file_atomic(staging / "package.json", meta.dump(2) + "\n");
}

void commit_packages(const std::vector<StagedPackage>& packages) {
  // Checked again here: something may have appeared at a final path since the build began.
  for (const auto& p : packages)
    if (std::string why = why_not_replaceable(p.final_dir); !why.empty())
      throw PackageError(p.final_dir.string() + " " + why + "; not replacing it (move it away or choose another --out)");

  struct Done {
    StagedPackage p;
    fs::path old;          // where the replaced package is now ("" when there was none)
    bool exchanged = false;
  };
  std::vector<Done> done;
  auto undo = [&] {
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      std::error_code ec;
      if (it->exchanged) {
        exchange(it->p.final_dir, it->p.staging);
      } else {
        fs::rename(it->p.final_dir, it->p.staging, ec);
        if (!it->old.empty()) fs::rename(it->old, it->p.final_dir, ec);
      }
    }
  };
  try {
    for (const auto& p : packages) {
      Done d{p, {}, false};
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(p.final_dir, ec))) {
        move_new(p.staging, p.final_dir);
      } else if (exchange(p.staging, p.final_dir) == Swap::exchanged) {
        d.old = p.staging;  // the staging name now holds the old package
        d.exchanged = true;
      } else {
        // No exchange here: move the old package aside, then the new one in.
        d.old = p.final_dir.parent_path() / work_dir_name("." + p.final_dir.filename().string() + ".old-");
        fs::rename(p.final_dir, d.old);
        try {
          move_new(p.staging, p.final_dir);
        } catch (...) {
          fs::rename(d.old, p.final_dir, ec);
          throw;
        }
      }
      done.push_back(d);
    }
  } catch (...) {
    try {
      undo();
    } catch (const std::exception& u) {
      spdlog::error("could not put back the packages replaced before the error: {}", u.what());
    }
    throw;
  }
  for (const auto& d : done)
    if (!d.old.empty()) remove_old_package(d.old);
}

void remove_stale_build_dirs(const fs::path& out_dir) { remove_stale_work_dirs(out_dir, kStalePattern); }

namespace {

nlohmann::json value_spec(const ir::Graph& g, const std::string& name) {
  nlohmann::json spec{{"name", name}};
  auto it = g.types.find(name);
  if (it == g.types.end()) return spec;
  spec["dtype"] = ir::dtype_name(it->second.dtype);
  if (it->second.shape) {
    nlohmann::json shape = nlohmann::json::array();
    for (const auto& d : *it->second.shape) shape.push_back(d.value >= 0 ? nlohmann::json(d.value) : nlohmann::json(d.param));
    spec["shape"] = shape;
  }
  return spec;
}

}  // namespace

nlohmann::json graph_specs(const ir::ModelSet& ms) {
  nlohmann::json graphs = nlohmann::json::array();
  for (const auto& g : ms.graphs) {
    nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
    for (const auto& n : g->inputs) in.push_back(value_spec(*g, n));
    for (const auto& n : g->outputs) out.push_back(value_spec(*g, n));
    graphs.push_back({{"name", g->name}, {"inputs", in}, {"outputs", out}});
  }
  return graphs;
}

}  // namespace nf::host
