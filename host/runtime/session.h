// A backend session seen from the host: opens a plugin session over compiled artifacts
// or an in-memory model set, runs graphs with named tensors, closes on destruction.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/host_api.h"
#include "registry/registry.h"

namespace nf::host {

using TensorPtr = std::shared_ptr<ir::TensorRef>;

struct NamedTensor {
  std::string name;
  TensorPtr tensor;
};

class BackendSession {
 public:
  static std::unique_ptr<BackendSession> open_artifacts(const PluginInfo& backend, const nlohmann::json& options,
                                                        const std::string& artifacts_dir);
  // `ms` must outlive the session.
  static std::unique_ptr<BackendSession> open_model_set(const PluginInfo& backend, const nlohmann::json& options,
                                                        ir::ModelSet& ms);
  ~BackendSession();
  BackendSession(const BackendSession&) = delete;
  BackendSession& operator=(const BackendSession&) = delete;

  // Runs `graph`; returns the requested outputs in order.
  std::vector<TensorPtr> run(const std::string& graph, const std::vector<NamedTensor>& inputs,
                             const std::vector<std::string>& outputs);
  const PluginInfo& backend() const { return *backend_; }

 private:
  BackendSession(const PluginInfo* b, nf_session* s) : backend_(b), session_(s) {}
  const PluginInfo* backend_;
  nf_session* session_;
};

}  // namespace nf::host
