#include "pipeline/resources.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "pipeline/nbits_weights.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// Peak resident bytes of a stage ~= a * fp32 weights + b * largest tensor + base. Weights
// stay file mappings that leave memory once read, the tied head's table is read by row
// blocks, calibration multiplies weights where they are stored, and weights a stage makes
// move to a scratch file (weight_spill.h), so what remains is one layer's work and the
// backend's per-weight tables. Fitted on /usr/bin/time -v of bench/scale_bench.sh builds
// (bench/RESULTS.md, "Streaming to the 8B"): compile on transforms-only builds at 100M, 1B
// and 8B (0.15, 0.45, 3.32 GB measured; 0.19, 0.64, 3.36 estimated), calibrated recipes on
// lpbq (0.19, 0.67, 4.15 measured; 0.21, 0.85, 4.21 estimated), seqmse on its 100M and 1B
// builds (0.24, 0.87 measured; 0.22, 0.95 estimated). spinquant holds the largest table three times while it rotates it (the mapped
// source, a float copy, the rotated tensor): fitted on its 100M build (0.44 GB).
struct StageCost {
  const char* stage;
  double per_weight_byte, per_largest_byte;
};
constexpr double kBaseBytes = 0.15e9;  // the process, plugins and calibration activations
constexpr StageCost kTransformsAndCompile{"compile", 0.10, 0.0};
constexpr StageCost kCalibratedRecipe{"calibrated quantization", 0.12, 0.10};
constexpr StageCost kSeqMse{"seqmse", 0.14, 0.10};
constexpr StageCost kSpinQuant{"spinquant", 0.05, 3.0};
// Share of the weights mha2sha writes anew: its per-head slices of the q/k/v projections.
constexpr double kMha2shaNewShare = 0.12;

StageCost cost_of_recipe(const std::string& name) {
  if (name == "seqmse") return kSeqMse;
  if (name == "spinquant") return kSpinQuant;
  return kCalibratedRecipe;  // lpbq, minmax and recipes of other authors
}

bool is_float(ir::DType t) { return t == NF_DTYPE_FLOAT32 || t == NF_DTYPE_FLOAT16 || t == NF_DTYPE_BFLOAT16; }

// The number in a /proc or cgroup file's "Key: N kB" line, or its whole content; 0 if absent.
uint64_t read_kb(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
  return 0;
}

uint64_t read_number(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return 0;
  return std::strtoull(s.c_str(), nullptr, 10);
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

BuildNeeds estimate_build(const manifest::Manifest& m, const std::vector<manifest::PluginUse>& targets,
                          const ir::ModelSet& source, bool use_cache, bool decoder_hook) {
  BuildNeeds n;
  std::set<const ir::TensorRef*> seen;  // a tied table counts once
  uint64_t widened_bytes = 0;
  // Loading makes each widened or dequantized weight whole in memory before it goes to the
  // scratch file, the largest (an int4 or 16-bit model's head or table) on top of the process:
  // a widened one alone (its source's pages are dropped as it is read), a dequantized one
  // beside the codes it reads (up to 8 bits: a quarter of its float32 bytes). Measured at
  // Llama-3.2-1B: float16 lpbq 1.13 GB (estimate 1.20), int4 GenAI transforms 1.23 GB (1.46).
  uint64_t largest_made = 0;
  for (const auto& g : source.graphs)
    for (const auto& [name, ref] : g->initializers) {
      if (!ref || !is_float(ref->tensor.dtype) || !seen.insert(ref.get()).second) continue;
      const uint64_t fp32 = static_cast<uint64_t>(ref->tensor.numel()) * 4;
      n.weight_bytes += fp32;
      if (ref->tensor.dtype != NF_DTYPE_FLOAT32) widened_bytes += fp32, largest_made = std::max(largest_made, fp32);
      n.largest_bytes = std::max(n.largest_bytes, fp32);
    }
  for (const auto& g : source.graphs)  // MatMulNBits weights, GatherBlockQuantized tables: dequantized on load
    for (const auto& node : g->nodes) {
      const uint64_t fp32 = nbits_weight_elements(*g, *node) * 4;
      if (fp32 == 0) continue;
      n.weight_bytes += fp32;
      widened_bytes += fp32;
      n.largest_bytes = std::max(n.largest_bytes, fp32);
      largest_made = std::max(largest_made, fp32 + fp32 / 4);
    }
  auto peak_of = [&](const StageCost& c) {
    return static_cast<uint64_t>(c.per_weight_byte * n.weight_bytes + c.per_largest_byte * n.largest_bytes + kBaseBytes);
  };
  n.transform_memory = n.peak_memory = peak_of(kTransformsAndCompile);
  n.peak_stage = kTransformsAndCompile.stage;
  if (largest_made && kBaseBytes + largest_made > n.peak_memory) {
    n.peak_memory = static_cast<uint64_t>(kBaseBytes) + largest_made;
    n.peak_stage = "load";
  }
  for (const auto& q : m.quant) {
    n.quant_memory.push_back(peak_of(cost_of_recipe(q.name)));
    if (n.quant_memory.back() > n.peak_memory) {
      n.peak_memory = n.quant_memory.back();
      n.peak_stage = q.name;
    }
  }
  // Package: weights as the target stores them. A quantized build keeps ~4-bit blocks plus
  // int8 heads and scales (measured 0.27-0.30 of fp32 at 100M and 1B); an unquantized one
  // fp16 on the NPUs (0.61 at 1B with the graphs and the head) and fp32 on the cpu backend.
  // An estimate-only target (htp's pack_weights = false, aries' estimate_only = true) stores
  // its graphs only (7 MB for an 8B model).
  for (const auto& target : targets) {
    const bool graphs_only = target.options.value("pack_weights", nlohmann::json(true)) == false ||
                             target.options.value("estimate_only", nlohmann::json(false)) == true;
    const double share = graphs_only ? 0.002 : !m.quant.empty() ? 0.3 : target.name == "cpu" ? 1.05 : 0.65;
    n.package_bytes += static_cast<uint64_t>(share * n.weight_bytes);
  }
  // New weights go to the scratch file: spinquant's rotated copies of every weight, and
  // mha2sha's per-head slices of the q/k/v projections (0.08 of the weights at 1B, 0.10 at 8B).
  for (const auto& q : m.quant)
    if (q.name == "spinquant") n.scratch_bytes += n.weight_bytes;
  // A 16-bit model's weights are widened to float32 there first (widen_floats.h).
  n.scratch_bytes += widened_bytes;
  for (const auto& t : m.transforms)
    if (t.name == "mha2sha") n.scratch_bytes += static_cast<uint64_t>(kMha2shaNewShare * n.weight_bytes);
  // The stage cache: the first stage's entry holds the weights at fp32; a later entry stores
  // only the weight bytes it changed (a weight several entries hold is one blob): none for
  // the stages known to add encodings or rewire graphs, mha2sha's per-head slices, a whole
  // copy for any other stage (spinquant's rotations, a decoder's build hook, plugins we do
  // not know). Each entry also holds its graphs and encodings (~4% of the weights at 1B),
  // and each compile a copy of its package.
  if (use_cache) {
    static const std::set<std::string> keeps = {"minmax", "lpbq", "seqmse", "arcl", "split", "hidden_states"};
    auto changed = [](const std::string& stage) {
      return keeps.count(stage) ? 0.0 : stage == "mha2sha" ? kMha2shaNewShare : 1.0;
    };
    double copies = 0;  // of the weights, over all entries
    size_t entries = 0;
    auto entry = [&](const std::string& stage) { copies += entries++ == 0 ? 1.0 : changed(stage); };
    if (decoder_hook) entry("build hook");
    for (const auto& q : m.quant) entry(q.name);
    for (const auto& t : m.transforms) entry(t.name);
    n.cache_bytes = static_cast<uint64_t>((copies + 0.05 * static_cast<double>(entries)) * static_cast<double>(n.weight_bytes)) +
                    n.package_bytes;
  }
  return n;
}

std::string why_build_does_not_fit(const BuildNeeds& need, uint64_t memory, uint64_t out_free,
                                   const std::string& out_dir) {
  if (need.peak_memory > memory)
    return "this build needs ~" + human_bytes(need.peak_memory) + " of memory at its peak (" + need.peak_stage + " on " +
           human_bytes(need.weight_bytes) + " of fp32 weights) and this machine has " + human_bytes(memory) +
           " available (MemAvailable + swap, within the cgroup's limit)";
  if (need.package_bytes > out_free)
    return "the packages need ~" + human_bytes(need.package_bytes) + " of disk and " + out_dir + " has " +
           human_bytes(out_free) + " free";
  // What the scratch file cannot take stays in memory. The estimates are on the safe side, so
  // only a build whose overflow alone exceeds the memory is refused; one that might fit is tried.
  const uint64_t on_disk = std::min(need.scratch_bytes, out_free - need.package_bytes);
  if (need.scratch_bytes - on_disk > memory)
    return "the weights this build makes (~" + human_bytes(need.scratch_bytes) + ") fit neither in the scratch file " +
           "beside the packages (" + out_dir + " has " + human_bytes(out_free) + " free, the packages take ~" +
           human_bytes(need.package_bytes) + ") nor in memory (" + human_bytes(memory) + " available)";
  return "";
}

uint64_t memory_available() {
  if (const char* s = std::getenv("NPUFORGE_MEMORY_AVAILABLE"); s && *s) return std::strtoull(s, nullptr, 10);
  uint64_t avail = read_kb("/proc/meminfo", "MemAvailable:") + read_kb("/proc/meminfo", "SwapFree:");
  // A container's limit is its cgroup's, which /proc/meminfo does not show.
  const uint64_t limit = read_number("/sys/fs/cgroup/memory.max");
  if (limit > 0) {
    const uint64_t used = read_number("/sys/fs/cgroup/memory.current");
    avail = std::min(avail, limit > used ? limit - used : 0);
  }
  return avail;
}

uint64_t disk_free(const fs::path& path) {
  if (const char* s = std::getenv("NPUFORGE_DISK_FREE"); s && *s) return std::strtoull(s, nullptr, 10);
  fs::path p = fs::absolute(path);
  while (!p.empty() && !fs::exists(p) && p != p.parent_path()) p = p.parent_path();
  struct statvfs st{};
  if (::statvfs(p.c_str(), &st) != 0) return UINT64_MAX;  // unknown: do not refuse on it
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace nf::host
