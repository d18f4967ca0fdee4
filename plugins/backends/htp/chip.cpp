#include "chip.h"

#include <dlfcn.h>

#include <npuforge/plugin.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace nf::htp {
namespace {

const nlohmann::json& field(const nlohmann::json& j, const std::string& path, const std::string& file) {
  const nlohmann::json* cur = &j;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object() || !cur->contains(key)) throw Error("htp: chip file " + file + " has no '" + path + "'");
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *cur;
}

// A documented figure: {"value": ..., "source": ...}. A figure without a source is refused.
const nlohmann::json& value(const nlohmann::json& j, const std::string& path, const std::string& file) {
  const nlohmann::json& f = field(j, path, file);
  if (!f.is_object() || !f.contains("value") || !f.contains("source"))
    throw Error("htp: chip file " + file + ": '" + path + "' must be {\"value\": ..., \"source\": ...}");
  return f["value"];
}

double number(const nlohmann::json& j, const std::string& path, const std::string& file, bool positive = true) {
  const nlohmann::json& v = value(j, path, file);
  if (!v.is_number() || (positive && !(v.get<double>() > 0)))
    throw Error("htp: chip file " + file + ": '" + path + "' must be a " + (positive ? "positive " : "") + "number");
  return v.get<double>();
}

}  // namespace

double Chip::macs_per_s(const std::string& precision) const {
  auto it = relative_rate.find(precision);
  if (it == relative_rate.end())
    throw Error("htp: chip file " + file + " has no relative rate for precision '" + precision + "'");
  return a16w8_macs_per_s * it->second;
}

std::string chips_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&chips_dir), &info) == 0 || !info.dli_fname)
    throw Error("htp: cannot locate the plugin library to find its chips/ directory");
  return (fs::path(info.dli_fname).parent_path() / "htp" / "chips").string();
}

std::vector<std::string> known_chipsets() {
  std::vector<std::string> r;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(chips_dir(), ec))
    if (e.path().extension() == ".json") r.push_back(e.path().stem().string());
  std::sort(r.begin(), r.end());
  return r;
}

Chip load_chip(const std::string& chipset) {
  std::string file = (fs::path(chips_dir()) / (chipset + ".json")).string();
  std::ifstream in(file);
  if (!in) {
    std::string known;
    for (const auto& c : known_chipsets()) known += (known.empty() ? "" : ", ") + c;
    throw Error("htp: no chip data file for chipset '" + chipset + "' (" + file + "); known: " + known);
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || j.value("format", "") != "npuforge-htp-chip")
    throw Error("htp: chip file " + file + " is not an npuforge-htp-chip JSON document");
  Chip c;
  c.file = file;
  c.chipset = field(j, "chipset", file).get<std::string>();
  if (c.chipset != chipset) throw Error("htp: chip file " + file + " describes '" + c.chipset + "'");
  c.marketing_name = j.value("marketing_name", "");
  c.soc_model = static_cast<int>(number(j, "soc_model", file));
  c.dsp_arch = value(j, "dsp_arch", file).get<std::string>();
  c.npu_generation = value(j, "npu_generation", file).get<std::string>();
  const auto& mem = value(j, "dram.type", file);
  c.memory_type = mem.is_string() ? mem.get<std::string>() : "";
  c.vtcm_mb = number(j, "vtcm_mb", file);
  c.cores = static_cast<int>(number(j, "cores", file));
  c.hvx_threads_max = static_cast<int>(number(j, "hvx_threads_max", file));
  c.a16w8_macs_per_s = number(j, "hmx_macs_per_s.a16w8", file);
  for (const auto& [k, v] : value(j, "hmx_macs_per_s.relative", file).items()) c.relative_rate[k] = v.get<double>();
  c.hvx_bytes_per_s = number(j, "hvx_bytes_per_s", file);
  if (j.contains("fp16_weight_expand_per_s")) {  // optional: chip files before it still load
    const auto& e = value(j, "fp16_weight_expand_per_s", file);
    if (!e.is_null()) c.fp16_weight_expand_per_s = number(j, "fp16_weight_expand_per_s", file);
  }
  const auto& peak = value(j, "dram.peak_gb_per_s", file);
  if (peak.is_number()) c.dram_peak_bytes_per_s = peak.get<double>() * 1e9;
  // The NPU's own ceiling, not the SoC's peak: its bus to memory is narrower than the DRAM.
  const auto& npu = value(j, "dram.npu_gb_per_s", file);
  if (!npu.is_null()) {
    if (!npu.is_number() || !(npu.get<double>() > 0))
      throw Error("htp: chip file " + file + ": 'dram.npu_gb_per_s' must be a positive number or null");
    c.npu_bytes_per_s = npu.get<double>() * 1e9;
    if (c.dram_peak_bytes_per_s && *c.npu_bytes_per_s > *c.dram_peak_bytes_per_s)
      throw Error("htp: chip file " + file + ": 'dram.npu_gb_per_s' exceeds 'dram.peak_gb_per_s'");
  }
  c.per_graph_s = number(j, "overheads.per_graph_us", file, false) * 1e-6;
  c.per_op_s = number(j, "overheads.per_op_us", file, false) * 1e-6;
  const auto& budget = value(j, "memory.device_budget_bytes", file);
  if (budget.is_number()) c.memory_budget_bytes = budget.get<double>();
  return c;
}

}  // namespace nf::htp
