// Shared helpers of the arcl tests: the built plugins, the test models, applying arcl.
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "api/host_api.h"
#include "pipeline/pipeline.h"
#include "registry/registry.h"

namespace arcl_test {

inline std::string model_dir(const std::string& model) {
  return std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/" + model;
}
inline bool model_exists(const std::string& model) {
  return std::filesystem::exists(model_dir(model) + "/model.onnx");
}

inline nf::host::Registry& registry() {
  static nf::host::Registry* r = [] {
    auto* reg = new nf::host::Registry();
    reg->load_directories({std::string(NPUFORGE_BINARY_DIR) + "/lib/npuforge/plugins"});
    return reg;
  }();
  return *r;
}

inline std::unique_ptr<nf::ir::ModelSet> load_model(const std::string& model) {
  return nf::host::load_source_model(model_dir(model) + "/model.onnx", model_dir(model) + "/config.json");
}

inline nlohmann::json golden(const std::string& model) {
  std::ifstream f(model_dir(model) + "/golden.json");
  return nlohmann::json::parse(f);
}

struct ArclResult {
  std::string error;                  // "" on success
  std::vector<std::string> warnings;  // log lines at warn level
};

// Applies the arcl plugin; captures its warnings and its error message.
inline ArclResult apply_arcl(nf::ir::ModelSet& ms, const nlohmann::json& options) {
  const nf::host::PluginInfo* arcl = registry().find(NF_KIND_TRANSFORM, "arcl");
  if (!arcl) throw std::runtime_error("arcl plugin not built");
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  sink->set_level(spdlog::level::warn);
  sink->set_pattern("%v");
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("arcl_test", sink));
  nf_context ctx{"transform arcl", [](uint64_t, uint64_t, const std::string&) { return false; }};
  nf_status* st = arcl->transform()->apply(options.dump().c_str(), nf::host::handle(&ms), &ctx);
  spdlog::set_default_logger(previous);
  ArclResult r;
  r.warnings = sink->last_formatted();
  if (st) {
    r.error = nf::host::host_api()->status_message(st);
    nf::host::host_api()->status_release(st);
  }
  return r;
}

}  // namespace arcl_test
