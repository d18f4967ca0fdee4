// The htp backend: a simulator of the Qualcomm Hexagon NPU. compile packs the model set
// for a chip (compile.cpp), open runs it with the chip's integer semantics (session.cpp),
// estimate times it with the hardware model (estimate.cpp) from the chip's data file.
#include <npuforge/plugin.hpp>

#include <filesystem>

#include "compile.h"
#include "estimate.h"
#include "options.h"
#include "session.h"

namespace nf::htp {
namespace {

nf_status* compile_fn(const char* options_json, const nf_model_set* ms, const char* out_dir, nf_context* ctx) {
  return NF_TRY(compile(options_json, ms, out_dir, Context(ctx)));
}

nf_status* compile_part_count_fn(const char* options_json, size_t wanted, size_t* count) {
  return NF_TRY(*count = compile_part_count(options_json, wanted));
}

nf_status* compile_part_fn(const char* options_json, const nf_model_set* ms, nf_context* ctx, size_t index, size_t count) {
  return NF_TRY(compile_part(options_json, ms, Context(ctx), index, count));
}

nf_status* open_fn(const char* options_json, const char* dir, nf_context*, nf_session** out) {
  return NF_TRY(*out = open_session(options_json, dir));
}

void close_fn(nf_session* s) { close_session(s); }

nf_status* run_fn(nf_session* s, const char* graph, const char* const* input_names, const nf_tensor* const* inputs,
                  size_t n_inputs, const char* const* output_names, nf_tensor** outputs, size_t n_outputs) {
  return NF_TRY(run_session(s, graph, input_names, inputs, n_inputs, output_names, outputs, n_outputs));
}

nf_status* estimate_fn(const char*, const char* dir, const char* workload_json, nf_json_sink sink, void* user) {
  return NF_TRY({
    nlohmann::json meta = read_package_json(std::filesystem::path(dir) / "htp.json");
    nlohmann::json graphs = read_package_json(std::filesystem::path(dir) / "htp" / "graphs.json");
    nlohmann::json workload = nlohmann::json::parse(workload_json ? workload_json : "{}", nullptr, false);
    if (!workload.is_object()) throw Error("htp: estimate: the workload is not a JSON object");
    // The chip and options the package was compiled for; the figures come from today's chip file.
    HtpOptions o = HtpOptions::parse(meta.at("options"));
    std::string out = estimate(o, meta, graphs, workload).dump();
    sink(user, out.c_str());
  });
}

const nf_backend_api kApi = {NF_ABI_VERSION, sizeof(nf_backend_api), compile_fn, open_fn, close_fn, run_fn,
                             estimate_fn, nullptr, compile_part_count_fn, compile_part_fn};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_BACKEND, "htp", kVersion,
    "Qualcomm Hexagon NPU simulator: integer execution per the encodings, roofline hardware model per chip",
    kOptionsSchema, &kApi};

}  // namespace
}  // namespace nf::htp

NF_PLUGIN_LIBRARY(&nf::htp::kDescriptor)
