#include "registry/registry.h"

#include <boost/dll/shared_library.hpp>
#include <cstring>
#include <filesystem>
#include <regex>
#include <spdlog/spdlog.h>

#include "api/host_api.h"
#include "manifest/schema.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// Loaded libraries are never unloaded: unloading C++ plugins is a known crash source.
std::vector<boost::dll::shared_library>& loaded_libraries() {
  static auto* libs = new std::vector<boost::dll::shared_library>();
  return *libs;
}

// A plugin function table as this host knows it: `known` bytes, of which the first
// `required` (through entry `last_required`) must be there.
struct TableLayout {
  size_t known = 0, required = 0;
  const char* last_required = "";
};

TableLayout layout(nf_plugin_kind kind) {
  switch (kind) {
    case NF_KIND_TRANSFORM: return {sizeof(nf_transform_api), NF_SIZE_THROUGH(nf_transform_api, apply), "apply"};
    case NF_KIND_QUANT: return {sizeof(nf_quant_api), NF_SIZE_THROUGH(nf_quant_api, apply), "apply"};
    case NF_KIND_BACKEND: return {sizeof(nf_backend_api), NF_SIZE_THROUGH(nf_backend_api, run), "run"};
    case NF_KIND_SPECULATIVE: return {sizeof(nf_speculative_api), NF_SIZE_THROUGH(nf_speculative_api, step), "step"};
  }
  return {};
}

std::string abi_range() { return std::to_string(NF_ABI_VERSION_MIN) + ".." + std::to_string(NF_ABI_VERSION); }

// "" when this host reads a table with this header (abi_version, struct_size); else why not.
std::string check_header(const std::string& what, uint32_t abi, uint32_t size, size_t required) {
  if (abi > NF_ABI_VERSION)
    return what + " is for ABI " + std::to_string(abi) + ", newer than this host's ABI " +
           std::to_string(NF_ABI_VERSION) + "; update npuforge";
  if (abi < NF_ABI_VERSION_MIN)
    return what + " is for ABI " + std::to_string(abi) + ", older than this host serves (" + abi_range() +
           "); rebuild the plugin";
  if (size < required)
    return what + " of " + std::to_string(size) + " bytes, host needs at least " + std::to_string(required);
  return {};
}

// Copies a plugin's table into the host's layout (`dst`, zeroed, `known` bytes): entries
// past a smaller table stay NULL, entries past what the host knows are not read.
void copy_table(void* dst, size_t known, const void* src, uint32_t size) {
  std::memcpy(dst, src, std::min<size_t>(size, known));
}

// The first required entry that is NULL, or nullptr.
const char* missing_entry(const PluginInfo& p) {
  switch (p.kind) {
    case NF_KIND_TRANSFORM: return p.transform_api.apply ? nullptr : "apply";
    case NF_KIND_QUANT: return p.quant_api.apply ? nullptr : "apply";
    case NF_KIND_BACKEND: {
      const nf_backend_api& b = p.backend_api;
      return !b.compile ? "compile" : !b.open ? "open" : !b.close ? "close" : !b.run ? "run" : nullptr;
    }
    case NF_KIND_SPECULATIVE: {
      const nf_speculative_api& s = p.speculative_api;
      return !s.create ? "create" : !s.release ? "release" : !s.step ? "step" : nullptr;
    }
  }
  return "kind";
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

// Fills `info` from descriptor `d`; returns why the plugin is refused ("" when it is not).
std::string Registry::check_descriptor(const nf_plugin_descriptor* d, PluginInfo* info) const {
  static const std::regex name_re("[a-z][a-z0-9_]*");
  if (!d) return "null plugin descriptor";
  if (std::string why = check_header("plugin descriptor", d->abi_version, d->struct_size,
                                     NF_SIZE_THROUGH(nf_plugin_descriptor, api));
      !why.empty())
    return why;
  if (!d->name || !std::regex_match(d->name, name_re))
    return std::string("invalid plugin name '") + (d->name ? d->name : "") + "' (want [a-z][a-z0-9_]*)";
  info->name = d->name;
  const TableLayout table = layout(d->kind);
  if (table.known == 0)
    return "plugin '" + info->name + "' has an unknown kind " + std::to_string(static_cast<int>(d->kind));
  info->kind = d->kind;
  const std::string who = std::string(kind_name(d->kind)) + " '" + info->name + "'";
  if (!d->api) return who + " has no function table";
  const auto* header = static_cast<const uint32_t*>(d->api);  // every table: abi_version, struct_size
  if (std::string why = check_header("function table", header[0], header[1], table.required); !why.empty())
    return who + ": " + why + (header[1] < table.required ? std::string(" (through '") + table.last_required + "')" : "");
  info->table_size = header[1];
  void* dst = d->kind == NF_KIND_TRANSFORM ? static_cast<void*>(&info->transform_api)
              : d->kind == NF_KIND_QUANT   ? static_cast<void*>(&info->quant_api)
              : d->kind == NF_KIND_BACKEND ? static_cast<void*>(&info->backend_api)
                                           : static_cast<void*>(&info->speculative_api);
  copy_table(dst, table.known, d->api, header[1]);
  if (const char* entry = missing_entry(*info)) return who + ": required entry '" + entry + "' is NULL";
  if (!d->version || !d->summary) return who + " lacks a version or summary";
  info->version = d->version;
  info->summary = d->summary;
  try {
    info->schema = nlohmann::json::parse(d->options_schema ? d->options_schema : "{}");
  } catch (const std::exception& e) {
    return who + ": options schema is not valid JSON: " + e.what();
  }
  if (std::string why = manifest::check_schema(info->schema); !why.empty()) return who + ": options schema: " + why;
  return {};
}

bool Registry::load_library(const std::string& path_in) {
  std::string path = fs::absolute(path_in).lexically_normal().string();
  auto refuse = [&](const std::string& why, const std::string& plugin = "") {
    warnings_.push_back(path + ": " + why);
    refusals_.push_back({path, plugin, warnings_.back()});
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
  // Nothing a plugin throws may escape: the entry points are C functions.
  uint32_t abi = 0;
  try {
    abi = lib.get<uint32_t()>(NF_ABI_SYMBOL)();
  } catch (...) {
    return refuse(NF_ABI_SYMBOL " threw an exception");
  }
  if (abi < NF_ABI_VERSION_MIN)
    return refuse("plugin ABI " + std::to_string(abi) + " is too old (this host supports " + abi_range() +
                  "); rebuild it");
  if (abi > NF_ABI_VERSION)
    return refuse("plugin ABI " + std::to_string(abi) + " is too new (this host supports " + abi_range() +
                  "); update npuforge");
  const nf_plugin_library* table = nullptr;
  auto entry = lib.get<nf_status*(uint32_t, const nf_host_api*, const nf_plugin_library**)>(NF_ENTRY_SYMBOL);
  nf_status* st = call_plugin_entry([&] { return entry(NF_ABI_VERSION, host_api(), &table); });
  if (st) return refuse("entry point failed: " + take_status_message(st));
  if (!table) return refuse("entry point returned no plugin table");
  if (std::string why = check_header("plugin library table", table->abi_version, table->struct_size,
                                     NF_SIZE_THROUGH(nf_plugin_library, plugins));
      !why.empty())
    return refuse(why);
  if (table->plugin_count == 0 || !table->plugins) return refuse("library declares no plugins");

  bool any = false;
  for (size_t i = 0; i < table->plugin_count; ++i) {
    const nf_plugin_descriptor* d = table->plugins[i];
    auto info = std::make_unique<PluginInfo>();
    if (std::string why = check_descriptor(d, info.get()); !why.empty()) {
      refuse(why, info->name);
      continue;
    }
    if (const PluginInfo* prev = find(info->kind, info->name)) {
      warnings_.push_back(path + ": " + kind_name(info->kind) + " plugin '" + info->name + "' ignored: " +
                          prev->library + " provides it and comes first in the search path");
      continue;
    }
    info->library = path;
    plugins_.push_back(std::move(info));
    any = true;
  }
  loaded_libraries().push_back(std::move(lib));
  return any;
}

std::vector<const Refusal*> Registry::refusals_of(const std::string& name) const {
  std::vector<const Refusal*> r;
  for (const auto& x : refusals_) {
    std::string file = fs::path(x.library).filename().string();
    if (x.plugin == name ||
        (x.plugin.empty() && (file == "lib" + name + ".so" || file == "libnpuforge_" + name + ".so")))
      r.push_back(&x);
  }
  return r;
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
