// What a build will need, from the source model's shapes, checked against what the machine
// has before the first stage runs: a build that cannot fit is refused with "needs ~X GB,
// this machine has Y" instead of being killed by the kernel hours in.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "manifest/manifest.h"

namespace nf::host {

struct BuildNeeds {
  uint64_t weight_bytes = 0;   // every float initializer at fp32 (what the stages work in)
  uint64_t largest_bytes = 0;  // the largest float initializer at fp32 (the embedding)
  uint64_t peak_memory = 0;    // resident bytes at the build's most demanding stage
  std::string peak_stage;      // which stage that is ("lpbq", "compile", ...)
  std::vector<uint64_t> quant_memory;  // each quant stage's peak, in manifest order
  uint64_t transform_memory = 0;       // a transform stage's or a compile's peak
  uint64_t package_bytes = 0;  // all selected targets' packages
  uint64_t scratch_bytes = 0;  // weights stages make, in the scratch file beside the packages
  uint64_t cache_bytes = 0;    // stage cache entries (the weights they changed, graphs, encodings) and compiles
};

// Estimates a build of manifest `m` for `targets` (the targets' backend uses) on `source`;
// `decoder_hook`: the speculative decoder has a build hook (one more cached stage).
BuildNeeds estimate_build(const manifest::Manifest& m, const std::vector<manifest::PluginUse>& targets,
                          const ir::ModelSet& source, bool use_cache, bool decoder_hook = false);

// Why a build with `need` cannot run with `memory` bytes available and `out_free` bytes free
// where the packages go: its peak memory, its packages, or the weights it makes (which go to
// a scratch file beside the packages, or stay in memory when the disk has no room for them).
// Empty when it fits.
std::string why_build_does_not_fit(const BuildNeeds& need, uint64_t memory, uint64_t out_free,
                                   const std::string& out_dir);

// Bytes of memory this process can still take: MemAvailable + SwapFree, capped by the
// cgroup's memory.max when it has one. NPUFORGE_MEMORY_AVAILABLE (bytes) overrides.
uint64_t memory_available();

// Bytes free to this user on the file system holding `path` (or its nearest existing parent).
// NPUFORGE_DISK_FREE (bytes) overrides, for every path.
uint64_t disk_free(const std::filesystem::path& path);

// "12.9 GB", "350 MB"
std::string human_bytes(uint64_t bytes);

}  // namespace nf::host
