#include "runtime/session.h"

namespace nf::host {

std::unique_ptr<BackendSession> BackendSession::open_artifacts(const PluginInfo& backend, const nlohmann::json& options,
                                                               const std::string& artifacts_dir) {
  nf_context ctx{"backend " + backend.name, {}};
  nf_session* s = nullptr;
  const std::string opts = options.dump();
  throw_if_error(call_plugin_entry([&] { return backend.backend()->open(opts.c_str(), artifacts_dir.c_str(), &ctx, &s); }),
                 "backend '" + backend.name + "'");
  return std::unique_ptr<BackendSession>(new BackendSession(&backend, s));
}

std::unique_ptr<BackendSession> BackendSession::open_model_set(const PluginInfo& backend, const nlohmann::json& options,
                                                               ir::ModelSet& ms) {
  if (!backend.backend()->open_model_set)
    throw PluginError("backend '" + backend.name + "' cannot run a model without compiling it first");
  for (const auto& g : ms.graphs)
    if (std::string why = ir::graph_problem(*g); !why.empty())
      throw std::runtime_error("graph '" + g->name + "': " + why);
  nf_context ctx{"backend " + backend.name, {}};
  nf_session* s = nullptr;
  const std::string opts = options.dump();
  throw_if_error(
      call_plugin_entry([&] { return backend.backend()->open_model_set(opts.c_str(), handle(&ms), &ctx, &s); }),
      "backend '" + backend.name + "'");
  return std::unique_ptr<BackendSession>(new BackendSession(&backend, s));
}

BackendSession::~BackendSession() {
  if (session_) call_plugin_void("backend '" + backend_->name + "' close", [&] { backend_->backend()->close(session_); });
}

std::vector<TensorPtr> BackendSession::run(const std::string& graph, const std::vector<NamedTensor>& inputs,
                                           const std::vector<std::string>& outputs) {
  std::vector<const char*> in_names, out_names;
  std::vector<const nf_tensor*> in_tensors;
  for (const auto& in : inputs) {
    in_names.push_back(in.name.c_str());
    in_tensors.push_back(handle(in.tensor.get()));
  }
  for (const auto& o : outputs) out_names.push_back(o.c_str());
  std::vector<nf_tensor*> out(outputs.size(), nullptr);
  nf_status* st = call_plugin_entry([&] {
    return backend_->backend()->run(session_, graph.c_str(), in_names.data(), in_tensors.data(), inputs.size(),
                                    out_names.data(), out.data(), out.size());
  });
  try {
    ir::check_mapped_files();  // weights that changed under the backend: its outputs are not to be trusted
  } catch (...) {
    for (nf_tensor* t : out)
      if (t) host_api()->tensor_release(t);
    if (st) host_api()->status_release(st);
    throw;
  }
  if (st) {
    for (nf_tensor* t : out)
      if (t) host_api()->tensor_release(t);
    throw_if_error(st, "backend '" + backend_->name + "'");
  }
  std::vector<TensorPtr> result;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i]) throw PluginError("backend '" + backend_->name + "' returned no tensor for output '" + outputs[i] + "'");
    result.push_back(adopt_tensor_handle(out[i]));
  }
  return result;
}

}  // namespace nf::host
