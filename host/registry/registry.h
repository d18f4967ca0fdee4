// Plugin registry: finds plugin libraries, loads them with Boost.DLL, checks their ABI and
// descriptors, and indexes plugins by kind and name. The first plugin of a kind+name in
// search order wins. Libraries stay loaded for the life of the process.
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
  nlohmann::json schema;       // options schema (object)
  std::string library;         // absolute path of the .so
  const nf_plugin_descriptor* descriptor = nullptr;

  const nf_transform_api* transform() const { return static_cast<const nf_transform_api*>(descriptor->api); }
  const nf_quant_api* quant() const { return static_cast<const nf_quant_api*>(descriptor->api); }
  const nf_backend_api* backend() const { return static_cast<const nf_backend_api*>(descriptor->api); }
  const nf_speculative_api* speculative() const { return static_cast<const nf_speculative_api*>(descriptor->api); }
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

 private:
  std::string check_descriptor(const nf_plugin_descriptor* d) const;
  std::vector<std::unique_ptr<PluginInfo>> plugins_;
  std::vector<std::string> warnings_;
};

}  // namespace nf::host
