// Helpers for in-process tests: the built plugins, the test models, a transform applied to
// a model set in place.
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/host_api.h"
#include "cli/cli_support.h"
#include "pipeline/pipeline.h"
#include "registry/registry.h"
#include "tokenizer/tokenizer.h"

namespace nf::test {

inline std::filesystem::path plugin_dir() {
  return std::filesystem::path(NPUFORGE_BINARY_DIR) / "lib" / "npuforge" / "plugins";
}
inline bool plugin_built(const std::string& name) {
  return std::filesystem::exists(plugin_dir() / ("libnpuforge_" + name + ".so"));
}
inline bool model_exists(const std::string& model) { return std::filesystem::exists(model_dir(model) + "/model.onnx"); }

// Every plugin of this build, loaded once per test process.
inline host::Registry& plugins() {
  static host::Registry* r = [] {
    auto* reg = new host::Registry();
    reg->load_directories({plugin_dir().string()});
    return reg;
  }();
  return *r;
}

// A plugin of this build by kind and name; throws when it is not built.
inline const host::PluginInfo& plugin(nf_plugin_kind kind, const std::string& name) {
  const host::PluginInfo* p = plugins().find(kind, name);
  if (!p) throw std::runtime_error("plugin not built: " + name);
  return *p;
}

// tests/models/<model> as the pipeline imports it.
inline std::unique_ptr<ir::ModelSet> load_model(const std::string& model) {
  return host::load_source_model(model_dir(model) + "/model.onnx", model_dir(model) + "/config.json");
}

// Prompts from tiny_llama's held-out text: the lines of at least 80 characters after the
// first `skip` of them, tokenized and cut to `max_tokens`.
inline std::vector<std::vector<int32_t>> heldout_prompts(size_t count, size_t max_tokens, size_t skip = 0) {
  auto tok = Tokenizer::load(model_dir("tiny_llama") + "/tokenizer.json");
  std::ifstream in(model_dir("tiny_llama") + "/heldout.txt");
  std::vector<std::vector<int32_t>> out;
  for (std::string line; out.size() < count && std::getline(in, line);) {
    if (line.size() < 80) continue;
    if (skip > 0) {
      --skip;
      continue;
    }
    auto ids = tok.encode(line);
    if (ids.size() > max_tokens) ids.resize(max_tokens);
    out.push_back(ids);
  }
  return out;
}

struct TransformResult {
  std::string error;                  // "" on success
  std::vector<std::string> warnings;  // what the plugin logged at warn level
};

// Applies transform `plugin` to `ms` in place, capturing its warnings and its error message.
inline TransformResult apply_transform(ir::ModelSet& ms, const std::string& plugin, const nlohmann::json& options) {
  const host::PluginInfo* p = plugins().find(NF_KIND_TRANSFORM, plugin);
  if (!p) throw std::runtime_error(plugin + " plugin not built");
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  sink->set_level(spdlog::level::warn);
  sink->set_pattern("%v");
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("transform_test", sink));
  nf_context ctx{"transform " + plugin, [](uint64_t, uint64_t, const std::string&) { return false; }};
  nf_status* st = p->transform()->apply(options.dump().c_str(), host::handle(&ms), &ctx);
  spdlog::set_default_logger(previous);
  TransformResult r;
  r.warnings = sink->last_formatted();
  if (st) {
    r.error = host::host_api()->status_message(st);
    host::host_api()->status_release(st);
  }
  return r;
}

}  // namespace nf::test
