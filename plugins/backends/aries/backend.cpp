// The aries backend: a simulator of Mobilint's ARIES / REGULUS NPUs. compile writes an
// MXQ-like package at qb Compiler's bit config, open runs it with integer semantics on the
// host, estimate times it with the hardware model of simulator.h.
#include <npuforge/kernels/parallel.h>
#include <npuforge/plugin.hpp>

#include "compile.h"
#include "session.h"

namespace nf::aries {
namespace {

nf_status* compile(const char* options_json, const nf_model_set* ms, const char* out_dir, nf_context* ctx) {
  return NF_TRY(compile_package(options_json, ms, out_dir, Context(ctx)));
}

nf_status* part_count(const char* options_json, size_t wanted, size_t* count) {
  return NF_TRY(*count = compile_part_count(options_json, wanted));
}

nf_status* part(const char* options_json, const nf_model_set* ms, nf_context* ctx, size_t index, size_t count) {
  return NF_TRY(compile_part(options_json, ms, Context(ctx), index, count));
}

nf_status* open(const char*, const char* dir, nf_context*, nf_session** out) {
  return NF_TRY({
    auto s = std::make_unique<Session>(dir);
    *out = reinterpret_cast<nf_session*>(s.release());
  });
}

void close(nf_session* s) { delete reinterpret_cast<Session*>(s); }

nf_status* run(nf_session* s, const char* graph, const char* const* input_names, const nf_tensor* const* inputs,
               size_t n_inputs, const char* const* output_names, nf_tensor** outputs, size_t n_outputs) {
  return NF_TRY(reinterpret_cast<Session*>(s)->plan(graph).run(input_names, inputs, n_inputs, output_names, outputs,
                                                               n_outputs));
}

// The options recorded in the package are the ones simulated (the host passes the
// manifest's; they resolve to the same unless the package was edited, which its hashes refuse).
nf_status* estimate(const char*, const char* dir, const char* workload_json, nf_json_sink sink, void* user) {
  return NF_TRY({
    PackageInfo p = PackageInfo::read(dir);
    nlohmann::json wl = Options(workload_json).json();
    if (wl.contains("graph_pass")) {
      std::string out = graph_pass(GraphPass::from_json(wl["graph_pass"], "aries"), p.options, p.device).dump();
      sink(user, out.c_str());
      return nullptr;
    }
    // The graphs of one role: the target's unless the workload names another (a draft).
    if (wl.contains("role") && !wl["role"].is_string()) throw Error("aries backend: estimate: role must be a string");
    SimModel model = p.model;
    if (const std::string role = wl.value("role", ""); !role.empty()) {
      const nlohmann::json roles = p.meta.value("roles", nlohmann::json::object());
      if (!roles.contains(role))
        throw Error("aries backend: estimate: the package has no graphs of role '" + role + "'", NF_STATUS_NOT_FOUND);
      model = sim_model(p.meta, roles[role].at("model"), roles[role].at("linears"));
      if (roles[role].contains("tree")) {
        model.tree_depth = roles[role]["tree"].at("depth");
        model.tree_branches = roles[role]["tree"].at("branches");
      }
    }
    Workload w;
    w.prompt_len = wl.value("prompt_len", int64_t{0});
    w.context_len = wl.value("context_len", int64_t{0});
    w.pass_rows = wl.value("pass_rows", int64_t{0});
    if (w.prompt_len < 0 || w.context_len < 0 || w.pass_rows < 0)
      throw Error("aries backend: estimate: prompt_len, context_len and pass_rows must not be negative");
    std::string out = simulate(model, p.options, p.device, w).dump();
    sink(user, out.c_str());
  });
}

const nf_backend_api kApi = {NF_ABI_VERSION, sizeof(nf_backend_api), compile, open, close, run, estimate, nullptr, part_count, part};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_BACKEND, "aries", "0.1.0",
    "Mobilint ARIES/REGULUS NPU simulator: qb-Compiler-style MXQ packages (int8/int4 weights per projection), "
    "integer execution on the host, cycle-approximate timing",
    kSchema, &kApi};

}  // namespace
}  // namespace nf::aries

NF_PLUGIN_LIBRARY(&nf::aries::kDescriptor)
