#include "registry/registry.h"

#include <boost/dll/shared_library.hpp>
#include <filesystem>
#include <regex>
#include <spdlog/spdlog.h>

#include "api/host_api.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// Loaded libraries are never unloaded: unloading C++ plugins is a known crash source.
std::vector<boost::dll::shared_library>& loaded_libraries() {
  static auto* libs = new std::vector<boost::dll::shared_library>();
  return *libs;
}

size_t api_size(nf_plugin_kind kind) {
  switch (kind) {
    case NF_KIND_TRANSFORM: return sizeof(nf_transform_api);
    case NF_KIND_QUANT: return sizeof(nf_quant_api);
    case NF_KIND_BACKEND: return sizeof(nf_backend_api);
    case NF_KIND_SPECULATIVE: return sizeof(nf_speculative_api);
  }
  return 0;
}

}  // namespace

const char* kind_name(nf_plugin_kind kind) {
  switch (kind) {
    case NF_KIND_TRANSFORM: return "transform";
    case NF_KIND_QUANT: return "quant";
    case NF_KIND_BACKEND: return "backend";
    case NF_KIND_SPECULATIVE: return "speculative";
  }
  return "unknown";
}

bool parse_kind(const std::string& name, nf_plugin_kind* out) {
  for (nf_plugin_kind k : {NF_KIND_TRANSFORM, NF_KIND_QUANT, NF_KIND_BACKEND, NF_KIND_SPECULATIVE})
    if (name == kind_name(k)) {
      *out = k;
      return true;
    }
  return false;
}

std::string Registry::builtin_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return (exe.parent_path().parent_path() / "lib" / "npuforge" / "plugins").string();
}

std::vector<std::string> Registry::search_path(const std::vector<std::string>& manifest_paths) {
  std::vector<std::string> dirs = manifest_paths;
  if (const char* env = std::getenv("NPUFORGE_PLUGIN_PATH")) {
    std::string s = env;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  dirs.push_back(builtin_dir());
  return dirs;
}

void Registry::load_directories(const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      spdlog::debug("plugin directory {} does not exist", dir);
      continue;
    }
    std::vector<fs::path> libs;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".so" && !e.is_directory()) libs.push_back(e.path());
    std::sort(libs.begin(), libs.end());
    for (const auto& p : libs) load_library(p.string());
  }
}

std::string Registry::check_descriptor(const nf_plugin_descriptor* d) const {
  static const std::regex name_re("[a-z][a-z0-9_]*");
  if (!d) return "null plugin descriptor";
  if (d->struct_size < sizeof(nf_plugin_descriptor)) return "plugin descriptor struct_size too small";
  if (!d->name || !std::regex_match(d->name, name_re))
    return std::string("invalid plugin name '") + (d->name ? d->name : "") + "' (want [a-z][a-z0-9_]*)";
  if (api_size(d->kind) == 0) return std::string("plugin '") + d->name + "' has an unknown kind";
  if (!d->api) return std::string("plugin '") + d->name + "' has no function table";
  auto table_size = static_cast<const uint32_t*>(d->api)[1];  // every table: abi_version, struct_size
  if (table_size < api_size(d->kind)) return std::string("plugin '") + d->name + "' function table is too small";
  if (!d->version || !d->summary) return std::string("plugin '") + d->name + "' lacks a version or summary";
  try {
    auto schema = nlohmann::json::parse(d->options_schema ? d->options_schema : "{}");
    if (!schema.is_object()) return std::string("plugin '") + d->name + "' options schema is not a JSON object";
  } catch (const std::exception& e) {
    return std::string("plugin '") + d->name + "' options schema is not valid JSON: " + e.what();
  }
  return {};
}

bool Registry::load_library(const std::string& path_in) {
  std::string path = fs::absolute(path_in).lexically_normal().string();
  auto refuse = [&](const std::string& why) {
    warnings_.push_back(path + ": " + why);
    return false;
  };
  boost::dll::shared_library lib;
  try {
    lib.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return refuse(std::string("not a loadable shared library (") + e.what() + ")");
  }
  if (!lib.has(NF_ABI_SYMBOL) || !lib.has(NF_ENTRY_SYMBOL))
    return refuse("no npuforge entry point (" NF_ABI_SYMBOL " / " NF_ENTRY_SYMBOL ")");
  uint32_t abi = lib.get<uint32_t()>(NF_ABI_SYMBOL)();
  if (abi < NF_ABI_VERSION_MIN)
    return refuse("plugin ABI " + std::to_string(abi) + " is too old (this host supports " +
                  std::to_string(NF_ABI_VERSION_MIN) + ".." + std::to_string(NF_ABI_VERSION) + "); rebuild it");
  if (abi > NF_ABI_VERSION)
    return refuse("plugin ABI " + std::to_string(abi) + " is too new (this host supports " +
                  std::to_string(NF_ABI_VERSION_MIN) + ".." + std::to_string(NF_ABI_VERSION) + "); update npuforge");
  const nf_plugin_library* table = nullptr;
  nf_status* st = lib.get<nf_status*(uint32_t, const nf_host_api*, const nf_plugin_library**)>(NF_ENTRY_SYMBOL)(
      NF_ABI_VERSION, host_api(), &table);
  if (st) {
    std::string msg = st->message;
    delete st;
    return refuse("entry point failed: " + msg);
  }
  if (!table) return refuse("entry point returned no plugin table");
  if (table->struct_size < sizeof(nf_plugin_library)) return refuse("plugin table struct_size too small");
  if (table->plugin_count == 0) return refuse("library declares no plugins");

  bool any = false;
  for (size_t i = 0; i < table->plugin_count; ++i) {
    const nf_plugin_descriptor* d = table->plugins[i];
    if (std::string why = check_descriptor(d); !why.empty()) {
      refuse(why);
      continue;
    }
    if (const PluginInfo* prev = find(d->kind, d->name)) {
      warnings_.push_back(path + ": " + kind_name(d->kind) + " plugin '" + d->name + "' ignored: " + prev->library +
                          " provides it and comes first in the search path");
      continue;
    }
    auto info = std::make_unique<PluginInfo>();
    info->kind = d->kind;
    info->name = d->name;
    info->version = d->version;
    info->summary = d->summary;
    info->schema = nlohmann::json::parse(d->options_schema ? d->options_schema : "{}");
    info->library = path;
    info->descriptor = d;
    plugins_.push_back(std::move(info));
    any = true;
  }
  loaded_libraries().push_back(std::move(lib));
  return any;
}

const PluginInfo* Registry::find(nf_plugin_kind kind, const std::string& name) const {
  for (const auto& p : plugins_)
    if (p->kind == kind && p->name == name) return p.get();
  return nullptr;
}

std::vector<const PluginInfo*> Registry::list(nf_plugin_kind kind) const {
  std::vector<const PluginInfo*> r;
  for (const auto& p : plugins_)
    if (p->kind == kind) r.push_back(p.get());
  std::sort(r.begin(), r.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return r;
}

}  // namespace nf::host
