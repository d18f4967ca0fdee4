#include "assets.h"

#include <npuforge/plugin.hpp>

#include <fstream>
#include <sstream>

namespace ssd {

void fail(const std::string& file, const std::string& what) { throw nf::Error("ssd: " + file + ": " + what); }

namespace {

size_t positive(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<size_t>() == 0)
    fail(file, std::string("needs a positive integer '") + key + "'");
  return j[key].get<size_t>();
}

}  // namespace

nlohmann::json read_assets_json(const std::string& dir) {
  const std::string file = dir + "/assets.json";
  std::ifstream in(file);
  if (!in) fail(file, "cannot read (ssd assets: a folder made by tools/speculative/train_ssd.py)");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(file, "not valid JSON");
  if (j.value("decoder", "") != "ssd") fail(file, "assets of decoder '" + j.value("decoder", "") + "', not ssd");
  if (!j.contains("ssd") || !j["ssd"].is_object() || !j.contains("extra_embeddings") || !j["extra_embeddings"].is_object())
    fail(file, "needs 'ssd' and 'extra_embeddings' entries");
  return j;
}

Assets load_assets(const std::string& dir, bool kv_rows) {
  const std::string file = dir + "/assets.json";
  const nlohmann::json j = read_assets_json(dir);
  const auto& s = j["ssd"];
  const auto& e = j["extra_embeddings"];
  Assets a;
  a.forecast_tokens = static_cast<int>(positive(s, "forecast_token_count", file));
  if (positive(e, "rows", file) != static_cast<size_t>(a.forecast_tokens))
    fail(file, "extra_embeddings.rows differs from ssd.forecast_token_count");
  a.first_id = static_cast<int64_t>(positive(e, "first_id", file));
  a.prefix = static_cast<int>(positive(s, "forecast_prefix", file));
  if (!s.contains("kv_prefix") || !s["kv_prefix"].is_object()) fail(file, "needs ssd.kv_prefix");
  const auto& kv = s["kv_prefix"];
  a.layers = positive(kv, "layers", file);
  a.kv_heads = positive(kv, "kv_heads", file);
  a.head_dim = positive(kv, "head_dim", file);
  if (!kv.contains("file") || !kv["file"].is_string()) fail(file, "ssd.kv_prefix needs a 'file'");
  if (!kv_rows) return a;

  // [layers][key, value][kv_heads][P][head_dim] -> keys and values [layers][kv_heads][P][head_dim]
  const std::string data = dir + "/" + kv["file"].get<std::string>();
  const size_t per = a.kv_heads * static_cast<size_t>(a.prefix) * a.head_dim;
  std::vector<float> all(a.layers * 2 * per);
  std::ifstream bin(data, std::ios::binary);
  if (!bin || !bin.read(reinterpret_cast<char*>(all.data()), static_cast<std::streamsize>(all.size() * sizeof(float))) ||
      bin.peek() != std::char_traits<char>::eof())
    fail(data, "needs exactly " + std::to_string(all.size()) + " float32 values (layers x 2 x kv_heads x prefix x head_dim)");
  a.keys.resize(a.layers * per);
  a.values.resize(a.layers * per);
  for (size_t l = 0; l < a.layers; ++l) {
    std::copy(all.begin() + static_cast<long>((2 * l) * per), all.begin() + static_cast<long>((2 * l + 1) * per),
              a.keys.begin() + static_cast<long>(l * per));
    std::copy(all.begin() + static_cast<long>((2 * l + 1) * per), all.begin() + static_cast<long>((2 * l + 2) * per),
              a.values.begin() + static_cast<long>(l * per));
  }
  return a;
}

}  // namespace ssd
