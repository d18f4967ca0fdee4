#include "device.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace nf::aries {

bool Device::supports(const std::string& mode) const {
  return std::find(core_modes.begin(), core_modes.end(), mode) != core_modes.end();
}

Device Device::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("params") || !j["params"].is_object())
    throw Error("aries backend: device file " + where + ": expected an object with \"params\"");
  const auto& p = j["params"];
  auto value = [&](const char* key) -> const nlohmann::json& {
    if (!p.contains(key) || !p[key].is_object() || !p[key].contains("value"))
      throw Error("aries backend: device file " + where + ": missing params." + key + ".value");
    if (!p[key].contains("source") || !p[key]["source"].is_string())
      throw Error("aries backend: device file " + where + ": params." + key + " has no \"source\"");
    return p[key]["value"];
  };
  auto num = [&](const char* key, double min) {
    const auto& v = value(key);
    if (!v.is_number()) throw Error("aries backend: device file " + where + ": params." + key + " is not a number");
    double d = v.get<double>();
    if (!(d >= min)) throw Error("aries backend: device file " + where + ": params." + key + " must be >= " + std::to_string(min));
    return d;
  };
  Device d;
  d.raw = j;
  d.id = j.value("device", "");
  d.name = j.value("name", d.id);
  d.peak_tops_int8 = num("peak_tops_int8", 1e-9);
  d.clusters = static_cast<int>(num("clusters", 1));
  d.local_cores_per_cluster = static_cast<int>(num("local_cores_per_cluster", 1));
  d.global_cores_per_cluster = static_cast<int>(num("global_cores_per_cluster", 0));
  const auto& modes = value("core_modes");
  if (!modes.is_array()) throw Error("aries backend: device file " + where + ": params.core_modes is not a list");
  d.core_modes = modes.get<std::vector<std::string>>();
  d.mac_rows = static_cast<int>(num("mac_rows", 1));
  d.mac_cols = static_cast<int>(num("mac_cols", 1));
  d.clock_hz = num("clock_hz", 1);
  d.weight_tile_load_cycles = num("weight_tile_load_cycles", 0);
  d.int16_activation_passes = num("int16_activation_passes", 1);
  d.mac_efficiency = num("mac_efficiency", 1e-6);
  if (d.mac_efficiency > 1) throw Error("aries backend: device file " + where + ": params.mac_efficiency must be <= 1");
  d.vector_elems_per_cycle = num("vector_elems_per_cycle", 1e-6);
  d.onchip_buffer_bytes = num("onchip_buffer_bytes", 0);
  d.dram_bytes = num("dram_bytes", 1);
  d.dram_reserved_bytes = num("dram_reserved_bytes", 0);
  d.dram_bandwidth_bytes_per_s = num("dram_bandwidth_bytes_per_s", 1);
  d.sync_cycles_cluster = num("sync_cycles_cluster", 0);
  d.sync_cycles_chip = num("sync_cycles_chip", 0);
  d.invoke_overhead_s = num("invoke_overhead_s", 0);
  return d;
}

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("aries backend: cannot read device file " + path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) throw Error("aries backend: device file " + path + " is not valid JSON");
  return j;
}

// A parameter may take another device's value ("same_as": "aries-rb", the same core) from
// that device's file beside this one: a refit of one cannot leave the other stale. The value
// is written in (and the source says whose it is), so the package's copy stands alone.
void resolve_same_as(nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || !j.contains("params") || !j["params"].is_object()) return;
  for (auto& [key, param] : j["params"].items()) {
    if (!param.is_object() || !param.contains("same_as")) continue;
    const std::string where = "aries backend: device file " + path + ": params." + key;
    if (!param["same_as"].is_string()) throw Error(where + ".same_as is not a device name");
    const std::string other = param["same_as"].get<std::string>();
    const std::string other_path = (std::filesystem::path(path).parent_path() / (other + ".json")).string();
    const nlohmann::json o = read_json(other_path);
    const nlohmann::json* v = o.contains("params") && o["params"].contains(key) ? &o["params"][key] : nullptr;
    if (!v || !v->is_object() || !v->contains("value") || v->contains("same_as"))
      throw Error(where + " is the same as '" + other + "', whose file " + other_path + " gives no value of its own");
    param["value"] = (*v)["value"];
    param.erase("same_as");
    if (param.contains("source") && param["source"].is_string())
      param["source"] = param["source"].get<std::string>() + " (" + other + ".json: " + (*v)["value"].dump() + ")";
  }
}

}  // namespace

Device Device::load_file(const std::string& path) {
  nlohmann::json j = read_json(path);
  resolve_same_as(j, path);
  return from_json(j, path);
}

std::string builtin_devices_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&builtin_devices_dir), &info) == 0 || !info.dli_fname)
    throw Error("aries backend: cannot locate the plugin library to find its devices/ folder");
  return (std::filesystem::path(info.dli_fname).parent_path() / "aries" / "devices").string();
}

Device load_device(const std::string& device, const std::string& device_file) {
  std::string path = device_file.empty() ? builtin_devices_dir() + "/" + device + ".json" : device_file;
  Device d = Device::load_file(path);
  if (device_file.empty() && d.id != device)
    throw Error("aries backend: device file " + path + " describes '" + d.id + "', not '" + device + "'");
  return d;
}

}  // namespace nf::aries
