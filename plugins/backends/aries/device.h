// A device data file (devices/<device>.json): every hardware number the simulator and the
// memory check use, each with its source. No device constant lives in code.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

namespace nf::aries {

struct Device {
  std::string id, name;
  double peak_tops_int8 = 0;
  int clusters = 0, local_cores_per_cluster = 0, global_cores_per_cluster = 0;
  std::vector<std::string> core_modes;
  int mac_rows = 0, mac_cols = 0;
  double clock_hz = 0;
  double weight_tile_load_cycles = 0;
  double int16_activation_passes = 0;
  double mac_efficiency = 0;
  double vector_elems_per_cycle = 0;
  double onchip_buffer_bytes = 0;
  double dram_bytes = 0, dram_reserved_bytes = 0;
  double dram_bandwidth_bytes_per_s = 0;
  double sync_cycles_cluster = 0, sync_cycles_chip = 0;
  double invoke_overhead_s = 0;
  nlohmann::json raw;  // the file as read (copied into packages)

  int local_cores() const { return clusters * local_cores_per_cluster; }
  bool supports(const std::string& mode) const;
  // Parses and checks a device document; `where` names it in errors.
  static Device from_json(const nlohmann::json& j, const std::string& where);
  static Device load_file(const std::string& path);
};

// devices/ next to the plugin library (the build copies them there).
std::string builtin_devices_dir();
// The device named by the options: device_file if given, else devices/<device>.json.
Device load_device(const std::string& device, const std::string& device_file);

}  // namespace nf::aries
