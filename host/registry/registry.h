// Plugin registry: finds plugin libraries, loads them with Boost.DLL, checks their ABI,
// tables and options schemas, and indexes plugins by kind and name. The first plugin of a
// kind+name in search order wins. Libraries stay loaded for the life of the process.
// Tables follow sdk/docs/abi.md: a smaller table than the host knows is accepted down to
// its required entries (the rest are absent), a larger one up to what the host knows.
#pragma once

#include <npuforge/plugin.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nf::host {

const char* kind_name(nf_plugin_kind kind);  // "transform", "quant", "backend", "speculative"
bool parse_kind(const std::string& name, nf_plugin_kind* out);

struct PluginInfo {
  nf_plugin_kind kind{};
  std::string name, version, summary;
  nlohmann::json schema;       // options schema (object), checked at load
  std::string library;         // absolute path of the .so
  uint32_t table_size = 0;     // struct_size of the plugin's function table

  // The plugin's function table (the one of its kind) in this host's layout: entries past
  // the plugin's struct_size are NULL, so a call site tests an optional entry for NULL.
  nf_transform_api transform_api{};
  nf_quant_api quant_api{};
  nf_backend_api backend_api{};
  nf_speculative_api speculative_api{};
  const nf_transform_api* transform() const { return &transform_api; }
  const nf_quant_api* quant() const { return &quant_api; }
  const nf_backend_api* backend() const { return &backend_api; }
  const nf_speculative_api* speculative() const { return &speculative_api; }
};

// Why a library or plugin was not loaded. `plugin` is "" when the refusal came before its
// descriptors could be read (the library as a whole).
struct Refusal {
  std::string library;  // absolute path of the .so
  std::string plugin;
  std::string message;  // the warning line: "<library>: <reason>"
};

class Registry {
 public:
  // Directories in search order: manifest [plugins] paths, then NPUFORGE_PLUGIN_PATH
  // (colon-separated), then the built-in directory next to the executable.
  static std::vector<std::string> search_path(const std::vector<std::string>& manifest_paths = {});
  static std::string builtin_dir();

  // Loads every *.so in each directory (sorted by name), in order. Problems become
  // warnings(): one line naming the file and the reason; nothing throws.
  void load_directories(const std::vector<std::string>& dirs);
  // Loads one library; returns false (and records a warning) when it is refused.
  bool load_library(const std::string& path);

  const PluginInfo* find(nf_plugin_kind kind, const std::string& name) const;
  std::vector<const PluginInfo*> list(nf_plugin_kind kind) const;
  const std::vector<std::unique_ptr<PluginInfo>>& plugins() const { return plugins_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<Refusal>& refusals() const { return refusals_; }
  // Refusals that concern plugin `name`: its own, or its library's when the library's file
  // is lib<name>.so or libnpuforge_<name>.so.
  std::vector<const Refusal*> refusals_of(const std::string& name) const;

 private:
  std::string check_descriptor(const nf_plugin_descriptor* d, PluginInfo* info) const;
  std::vector<std::unique_ptr<PluginInfo>> plugins_;
  std::vector<std::string> warnings_;
  std::vector<Refusal> refusals_;
};

}  // namespace nf::host
