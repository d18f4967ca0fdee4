// The split tests' helpers: the shared in-process ones, transforms applied in place, and
// runners over in-memory model sets.
#pragma once

#include <memory>
#include <string>

#include "runner/static_runner.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "support/packages.h"

namespace split_test {

using namespace nf::test;

// Applies a transform plugin in place; returns its error message ("" on success).
inline std::string apply(nf::ir::ModelSet& ms, const std::string& plugin, const nlohmann::json& options) {
  return apply_transform(ms, plugin, options).error;
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
  const nf::host::PluginInfo* cpu = plugins().find(NF_KIND_BACKEND, "cpu");
  if (!cpu) throw std::runtime_error("cpu backend not built");
  m.session = nf::host::BackendSession::open_model_set(*cpu, {{"threads", 1}}, *m.ms);
  nlohmann::json meta = {{"io", nlohmann::json::parse(m.ms->metadata.at("io"))}};
  m.runner = nf::host::make_runner(*m.session, nf::host::graph_specs(*m.ms), meta);
  return m;
}

}  // namespace split_test
