// compile: checks (ops, static shapes, weight encodings, VTCM, memory), packs each split's
// weights once for all its variants, saves the graphs without their packed weights, and
// writes htp.json, graphs.json and the QNN-layout backend extensions.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>

namespace nf::htp {

constexpr const char* kVersion = "0.1.0";

void compile(const char* options_json, const nf_model_set* ms, const std::string& out_dir, Context ctx);

}  // namespace nf::htp
