// RMSNorm gains into the following linear layers: gain * x̂ @ B = x̂ @ (diag(gain) B).
#include <set>

#include "spinquant/rotate.h"

namespace spinquant {

std::vector<FusedNorm> fuse_norm_gains(GraphView& gv, const std::vector<RmsNorm>& norms, WeightEdits& edits) {
  std::vector<FusedNorm> result;
  std::set<std::string> fused_weights;
  for (const RmsNorm& n : norms) {
    FusedNorm f{n, linear_readers(gv, n.output, "RMSNorm output")};
    std::vector<float> gain = read_floats(gv.float_initializer(n.gain));
    for (const Linear& l : f.readers) {
      if (!fused_weights.insert(l.weight).second)
        throw nf::Error("spinquant: weight '" + l.weight + "' is read by two layers; cannot fuse a norm gain into it");
      if (static_cast<int64_t>(gain.size()) != l.K)
        throw nf::Error("spinquant: RMSNorm gain '" + n.gain + "' has " + std::to_string(gain.size()) +
                        " entries but weight '" + l.weight + "' has " + std::to_string(l.K) + " input channels");
      edits.scale_input(l, gain);
    }
    write_initializer(gv.graph, n.gain, {static_cast<int64_t>(gain.size())}, std::vector<float>(gain.size(), 1.f));
    result.push_back(std::move(f));
  }
  return result;
}

}  // namespace spinquant
