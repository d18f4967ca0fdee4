#include "kv_prefix.h"

#include <npuforge/decoder_graph.hpp>
#include <npuforge/graph_roles.hpp>

#include "graph_walk.h"

namespace spinquant {

std::optional<nf::Graph> kv_prefix_graph(const nf::ModelSet& ms) {
  const auto role = nf::roles::kv_prefix_role(ms.metadata(nf::roles::kMetadataKey));
  if (!role) return std::nullopt;
  nf_graph* g = nf::host().model_set_find_graph(ms.get(), role->graph.c_str());
  if (!g) throw nf::Error("spinquant: role kv_prefix names graph '" + role->graph + "', which the model set lacks");
  return nf::Graph(g);
}

void rotate_prefix_values(nf::Graph prefix, const std::deque<Rotation>& rotations, size_t layers) {
  for (size_t l = 0; l < layers; ++l) {
    const std::string out = nf::roles::kv_prefix_output(static_cast<int64_t>(l), false);
    const std::string init = nf::decoder::initializer_of_output(prefix, out);
    const nf::Tensor t = init.empty() ? nf::Tensor() : prefix.initializer(init);
    const std::vector<int64_t> dims = t ? t.dims() : std::vector<int64_t>{};
    const Rotation& R = rotations[rotations.size() == 1 ? 0 : l];
    if (!t || t.dtype() != NF_DTYPE_FLOAT32 || dims.empty() || dims.back() != R.size())
      throw nf::Error("spinquant: r2: the KV prefix has no float32 values " + out + " of head_dim " + std::to_string(R.size()));
    const std::vector<float> values = read_floats(t);
    std::vector<double> rows(values.begin(), values.end());
    R.apply_to_rows(rows.data(), static_cast<int64_t>(rows.size()) / R.size());
    write_initializer(prefix, init, dims, std::vector<float>(rows.begin(), rows.end()));
  }
}

}  // namespace spinquant
