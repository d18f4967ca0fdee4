// Shared helpers of the split tests: the built plugins, the test models, applying
// transforms in process, and runners over in-memory model sets.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "api/host_api.h"
#include "pipeline/pipeline.h"
#include "pipeline/session.h"
#include "registry/registry.h"
#include "runner/static_runner.h"

namespace split_test {

inline std::string model_dir(const std::string& model) {
  return std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/" + model;
}
inline bool model_exists(const std::string& model) {
  return std::filesystem::exists(model_dir(model) + "/model.onnx");
}
inline nlohmann::json golden(const std::string& model) {
  std::ifstream f(model_dir(model) + "/golden.json");
  return nlohmann::json::parse(f);
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

// Applies a transform plugin in place; returns its error message ("" on success).
inline std::string apply(nf::ir::ModelSet& ms, const std::string& plugin, const nlohmann::json& options) {
  const nf::host::PluginInfo* p = registry().find(NF_KIND_TRANSFORM, plugin);
  if (!p) throw std::runtime_error(plugin + " plugin not built");
  nf_context ctx{"transform " + plugin, [](uint64_t, uint64_t, const std::string&) { return false; }};
  nf_status* st = p->transform()->apply(options.dump().c_str(), nf::host::handle(&ms), &ctx);
  if (!st) return "";
  std::string msg = nf::host::host_api()->status_message(st);
  nf::host::host_api()->status_release(st);
  return msg;
}

// A runner over an in-memory model set on the cpu backend (one kernel thread).
struct Model {
  std::unique_ptr<nf::ir::ModelSet> ms;
  std::unique_ptr<nf::host::BackendSession> session;
  std::unique_ptr<nf::host::Runner> runner;
};

inline Model open_runner(std::unique_ptr<nf::ir::ModelSet> ms) {
  Model m;
  m.ms = std::move(ms);
  const nf::host::PluginInfo* cpu = registry().find(NF_KIND_BACKEND, "cpu");
  if (!cpu) throw std::runtime_error("cpu backend not built");
  m.session = nf::host::BackendSession::open_model_set(*cpu, {{"threads", 1}}, *m.ms);
  nlohmann::json meta = {{"io", nlohmann::json::parse(m.ms->metadata.at("io"))}};
  m.runner = nf::host::make_runner(*m.session, nf::host::graph_specs(*m.ms), meta);
  return m;
}

inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return got.size() == want.size() ? max_err / max_abs : 1e30;
}

}  // namespace split_test
