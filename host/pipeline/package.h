// Packages: a directory with package.json (graphs, IO, backend and options, tokenizer,
// stages, and a hash of every file), the backend's artifacts, and the model's side files.
// A package appears whole or not at all: it is written aside, then renamed into place.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace nf::host {

struct PackageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* kPackageFormat = "npuforge-package";
constexpr int kPackageVersion = 1;

struct Package {
  std::filesystem::path dir;
  nlohmann::json meta;  // package.json
  std::string backend() const { return meta.at("backend").at("name"); }
  nlohmann::json backend_options() const { return meta.at("backend").at("options"); }
  std::filesystem::path artifacts() const { return dir / "artifacts"; }
  // "" when the package has no tokenizer.
  std::string tokenizer() const;
};

bool looks_like_package(const std::filesystem::path& dir);
// Reads package.json and checks format, version and every file's hash; a mismatch or a
// missing file is a PackageError naming the file.
Package open_package(const std::filesystem::path& dir);

// Hashes every file under `staging` into meta["files"], writes package.json, then moves
// `staging` to `final_dir` (replacing an older package there only after the new one is whole).
void seal_package(const std::filesystem::path& staging, nlohmann::json meta, const std::filesystem::path& final_dir);

}  // namespace nf::host
