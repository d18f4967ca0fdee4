// Packages: a directory with package.json (graphs, IO, backend and options, tokenizer,
// stages, and a hash of every file), the backend's artifacts, and the model's side files.
// A package appears whole or not at all: it is written aside, then swapped into place.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace nf::host {

class DirLock;

struct PackageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* kPackageFormat = "npuforge-package";
constexpr int kPackageVersion = 1;

struct Package {
  std::filesystem::path dir;   // as the user named it, for messages
  std::filesystem::path root;  // where its files are read: the folder opened and locked at open time
  nlohmann::json meta;         // package.json
  std::shared_ptr<DirLock> lock;  // held while the package is in use: a rebuild does not delete it under us
  std::string backend() const { return meta.at("backend").at("name"); }
  nlohmann::json backend_options() const { return meta.at("backend").at("options"); }
  std::filesystem::path artifacts() const { return root / "artifacts"; }
  // "" when the package has no tokenizer.
  std::string tokenizer() const;
  // "" when the package has no config.json.
  std::string config() const;
};

bool looks_like_package(const std::filesystem::path& dir);
// The digest package.json carries ("digest"): a hash of all its other fields. With each
// listed file's hash in "files", it seals the package: an edit anywhere is refused.
std::string package_digest(const nlohmann::json& meta);
// Reads package.json and checks format, version, its digest and every file's hash; a
// mismatch or a missing file is a PackageError naming the file. Paths in package.json stay
// inside the package, and the tokenizer and config it names are files it lists. The package's folder is locked shared
// and read through its descriptor, so a concurrent rebuild that swaps a new package in
// leaves this reader with the whole old one.
Package open_package(const std::filesystem::path& dir);

// Why a new package may not replace what is at `dir` ("" when it may). Only an absent
// path, an empty folder, or a package of ours that holds nothing but its own files may be
// replaced: `build --out` never deletes anything else.
std::string why_not_replaceable(const std::filesystem::path& dir);

// Hashes every file under `staging` into meta["files"] and writes package.json. `known`
// ({relative path: hash}) holds the hashes of files taken as they were copied in: those are
// not read again.
void seal_package(const std::filesystem::path& staging, nlohmann::json meta,
                  const nlohmann::json& known = nlohmann::json::object());

struct StagedPackage {
  std::filesystem::path staging;    // sealed, beside final_dir
  std::filesystem::path final_dir;
};
// Moves every staged package into place, all or none: each replaces the folder there in
// one atomic swap (renameat2 RENAME_EXCHANGE; a move aside where the file system has no
// exchange); when one fails, those already swapped are swapped back. Old packages are
// removed after, unless a reader still holds one (a later build removes it then).
void commit_packages(const std::vector<StagedPackage>& packages);

// Removes what earlier builds that died left in `out_dir`: staging and old package
// folders of this host whose process is gone.
void remove_stale_build_dirs(const std::filesystem::path& out_dir);

// IO specs of every graph, as package.json stores them: [{name, inputs:[{name, dtype,
// shape}], outputs:[...]}], symbolic dims by name.
nlohmann::json graph_specs(const ir::ModelSet& ms);

}  // namespace nf::host
