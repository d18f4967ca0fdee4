#include "spinquant/rotations_file.h"

#include <npuforge/plugin.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace spinquant {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw nf::Error("spinquant: rotations '" + path + "': " + why);
}

int64_t positive(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
    fail(path, std::string("\"") + key + "\" must be a positive integer");
  return j[key].get<int64_t>();
}

double orthogonality_error(const std::vector<double>& R, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += R[static_cast<size_t>(i * n + k)] * R[static_cast<size_t>(j * n + k)];
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

}  // namespace

LearnedRotations load_rotations(const std::string& json_path) {
  namespace fs = std::filesystem;
  std::ifstream in(json_path);
  if (!in) fail(json_path, "cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(json_path, "is not a JSON object");
  if (j.value("format", "") != "npuforge-spinquant-rotations")
    fail(json_path, "not spinquant rotations (\"format\": \"npuforge-spinquant-rotations\"; made by "
                    "tools/quant/train_spinquant.py)");
  if (j.value("version", 0) != 1) fail(json_path, "version must be 1");
  if (j.value("dtype", "") != "float64") fail(json_path, "dtype must be \"float64\"");
  LearnedRotations r;
  r.path = json_path;
  r.hidden = positive(j, "hidden_size", json_path);
  r.head_dim = positive(j, "head_dim", json_path);
  const int64_t layers = positive(j, "num_layers", json_path);
  if (!j.contains("data") || !j["data"].is_string()) fail(json_path, "\"data\" must name the matrices' file");
  fs::path data = fs::path(json_path).parent_path() / j["data"].get<std::string>();
  const uint64_t want = static_cast<uint64_t>(r.hidden * r.hidden + layers * r.head_dim * r.head_dim) * sizeof(double);
  std::error_code ec;
  const uint64_t have = fs::file_size(data, ec);
  if (ec) fail(json_path, "data file " + data.string() + " cannot be read");
  if (have != want)
    fail(json_path, "data file " + data.string() + " has " + std::to_string(have) + " bytes; hidden_size " +
                        std::to_string(r.hidden) + ", head_dim " + std::to_string(r.head_dim) + " and " +
                        std::to_string(layers) + " layers need " + std::to_string(want));
  std::ifstream bin(data, std::ios::binary);
  std::vector<double> all(static_cast<size_t>(want / sizeof(double)));
  bin.read(reinterpret_cast<char*>(all.data()), static_cast<std::streamsize>(want));
  if (!bin) fail(json_path, "data file " + data.string() + " could not be read whole");
  const size_t n1 = static_cast<size_t>(r.hidden * r.hidden), n2 = static_cast<size_t>(r.head_dim * r.head_dim);
  r.r1.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n1));
  for (int64_t l = 0; l < layers; ++l) {
    auto start = all.begin() + static_cast<std::ptrdiff_t>(n1 + static_cast<size_t>(l) * n2);
    r.r2.emplace_back(start, start + static_cast<std::ptrdiff_t>(n2));
  }
  if (double e = orthogonality_error(r.r1, r.hidden); !(e < 1e-6))
    fail(json_path, "R1 is not orthogonal (max |R R^T - I| = " + std::to_string(e) + ")");
  for (size_t l = 0; l < r.r2.size(); ++l)
    if (double e = orthogonality_error(r.r2[l], r.head_dim); !(e < 1e-6))
      fail(json_path, "R2 of layer " + std::to_string(l) + " is not orthogonal (max |R R^T - I| = " + std::to_string(e) + ")");
  return r;
}

}  // namespace spinquant
