// compile: the model set -> an aries package (artifacts/aries.json, part_I_of_N.mxq
// containers, graph/ with the model's structure and its float non-linear weights).
#pragma once

#include <npuforge/plugin.hpp>

#include <functional>

#include "device.h"
#include "mxq.h"
#include "options.h"
#include "simulator.h"

namespace nf::aries {

void compile_package(const char* options_json, const nf_model_set* ms, const std::string& out_dir, Context ctx);

// The compile in parts (nf_backend_api compile_part): each part quantizes a contiguous share
// of the linear weights and saves each as a checkpoint, which compile takes instead of
// quantizing it again.
size_t compile_part_count(const char* options_json, size_t wanted);
void compile_part(const char* options_json, const nf_model_set* ms, Context ctx, size_t index, size_t count);

// The package's description (aries.json) and what the simulator needs from it.
struct PackageInfo {
  nlohmann::json meta;
  AriesOptions options;
  Device device;
  SimModel model;
  static PackageInfo read(const std::string& artifacts_dir);
};

// The simulator's view of a compiled model: its shape and linears as aries.json records them
// (the target's at the top level, a role's under "roles").
SimModel sim_model(const nlohmann::json& meta, const nlohmann::json& shape, const nlohmann::json& linears);

// Symmetric per-channel quantization of w (row-major, [K, N] or [N, K] when nk) at `bits`;
// with `search`, each channel's clip is the candidate (absmax * i / 20, i = 10..20) with
// the least squared error. With `release`, an [N, K] weight's rows are handed back (byte
// offset, bytes) in ~32 MiB blocks as they are quantized, so a mapped weight need not be
// resident as a whole.
void quantize_weight(const float* w, bool nk, int bits, bool search, QuantWeight& out,
                     const std::function<void(size_t, size_t)>& release = {});

}  // namespace nf::aries
