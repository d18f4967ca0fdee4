#include "cache_constants.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/engine/ops.h>

#include <cmath>
#include <map>

namespace nf::htp {

std::vector<ConstantOnGrid> cache_constants_on_grid(const ModelSet& ms) {
  std::vector<ConstantOnGrid> out;
  for (Graph g : ms.graphs()) {
    std::map<std::string, std::string> transposed;  // Transpose output -> its graph-input cache
    for (const Node& n : g.nodes())
      if (n.op_type() == "Transpose" && decoder::is_past_kv(n.input(0))) transposed[n.output(0)] = n.input(0);
    std::map<std::string, bool> seen;
    for (const Node& n : g.nodes()) {
      if (n.op_type() != "Concat") continue;
      const nf_encoding* cache = nullptr;
      for (const std::string& in : n.inputs()) {
        const std::string& past = decoder::is_past_kv(in) ? in : transposed.count(in) ? transposed[in] : std::string();
        if (!past.empty()) cache = ms.encoding(past);
      }
      if (!cache || cache->is_float || cache->num_scales != 1 || !(cache->scale[0] > 0) || cache->bw < 2 || cache->bw > 24)
        continue;
      const engine::ActivationGrid grid{cache->scale[0], static_cast<float>(cache->offset[0]), std::ldexp(1.f, cache->bw) - 1};
      for (const std::string& in : n.inputs()) {
        if (seen[in]) continue;
        const Tensor t = g.initializer(in);
        if (!t || t.dtype() != NF_DTYPE_FLOAT32 || t.nbytes() == 0) continue;
        seen[in] = true;
        Tensor rounded = Tensor::create(NF_DTYPE_FLOAT32, t.dims());
        grid.apply(t.data_as<float>(), rounded.mutable_as<float>(), t.numel());
        out.push_back({g, in, std::move(rounded)});
      }
    }
  }
  return out;
}

}  // namespace nf::htp
