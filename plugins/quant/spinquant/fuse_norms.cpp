// RMSNorm gains into the following linear layers: gain * x̂ @ B = x̂ @ (diag(gain) B).
#include <set>

#include "spinquant/rotate.h"

namespace spinquant {

std::vector<FusedNorm> fuse_norm_gains(GraphView& gv, const std::vector<RmsNorm>& norms, WeightEdits& edits) {
  std::vector<FusedNorm> result;
  std::set<std::string> fused_weights;
  // Every gain is read before any is set to ones: norms may share one initializer.
  std::vector<std::vector<float>> gains;
  for (const RmsNorm& n : norms) gains.push_back(read_floats(gv.float_initializer(n.gain)));
  for (size_t i = 0; i < norms.size(); ++i) {
    const RmsNorm& n = norms[i];
    const std::vector<float>& gain = gains[i];
    FusedNorm f{n, linear_readers(gv, n.output, "RMSNorm output")};
    for (const Linear& l : f.readers) {
      if (!fused_weights.insert(l.weight).second)
        throw nf::Error("spinquant: weight '" + l.weight + "' is read by two layers; cannot fuse a norm gain into it");
      if (static_cast<int64_t>(gain.size()) != l.K)
        throw nf::Error("spinquant: RMSNorm gain '" + n.gain + "' has " + std::to_string(gain.size()) +
                        " entries but weight '" + l.weight + "' has " + std::to_string(l.K) + " input channels");
      edits.scale_input(l, gain);
    }
    result.push_back(std::move(f));
  }
  // The gains become ones; a gain another node reads as well (a post-norm sharing it, or the
  // Identity torch reads a deduplicated parameter through) stays, and the fused norm reads
  // ones of its own.
  std::set<std::string> fused_outputs;
  for (const RmsNorm& n : norms) fused_outputs.insert(n.output);
  for (size_t i = 0; i < norms.size(); ++i) {
    const RmsNorm& n = norms[i];
    const std::vector<float> ones(gains[i].size(), 1.f);
    bool shared = n.gain_input != n.gain;
    for (const Use& u : gv.consumers(n.gain)) shared |= !fused_outputs.count(u.node.output(0));
    if (!shared) {
      write_initializer(gv.graph, n.gain, {static_cast<int64_t>(ones.size())}, ones);
      continue;
    }
    const std::string own = n.gain + ".fused";
    write_initializer(gv.graph, own, {static_cast<int64_t>(ones.size())}, ones);
    for (nf::Node m : gv.graph.nodes())
      if (m.output_count() > 0 && m.output(0) == n.output)
        for (size_t k = 0; k < m.input_count(); ++k)
          if (m.input(k) == n.gain_input) m.set_input(k, own);
  }
  return result;
}

}  // namespace spinquant
