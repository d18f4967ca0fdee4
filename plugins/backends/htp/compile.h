// compile: checks (ops, static shapes, weight encodings, VTCM, memory), packs each split's
// weights once for all its variants, saves the graphs without their packed weights, and
// writes htp.json, graphs.json and the QNN-layout backend extensions.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>

namespace nf::htp {

constexpr const char* kVersion = "0.1.0";

void compile(const char* options_json, const nf_model_set* ms, const std::string& out_dir, Context ctx);

// The compile in parts (nf_backend_api compile_part): each part packs a contiguous share of
// the containers' weights and saves each payload as a checkpoint, which compile writes
// instead of packing it again.
size_t compile_part_count(const char* options_json, size_t wanted);
void compile_part(const char* options_json, const nf_model_set* ms, Context ctx, size_t index, size_t count);

}  // namespace nf::htp
