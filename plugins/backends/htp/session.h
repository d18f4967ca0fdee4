// The htp session: the package's graphs with their weights restored from the containers
// exactly on their integer grids, run by the cpu engine with encodings on (integer weight
// kernels at the encoding's scales, activations rounded onto their PER_TENSOR grids where
// they are produced and at graph inputs): the chip's integer semantics, simulated.
#pragma once

#include <npuforge/plugin.hpp>

#include <filesystem>
#include <string>

namespace nf::htp {

// A package JSON file (htp.json, graphs.json) as an object; a missing or damaged one throws one
// line naming it.
nlohmann::json read_package_json(const std::filesystem::path& p);

nf_session* open_session(const char* options_json, const std::string& dir);
void close_session(nf_session* s);
void run_session(nf_session* s, const char* graph, const char* const* input_names, const nf_tensor* const* inputs,
                 size_t n_inputs, const char* const* output_names, nf_tensor** outputs, size_t n_outputs);

}  // namespace nf::htp
