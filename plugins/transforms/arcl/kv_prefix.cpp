#include "kv_prefix.h"

#include <npuforge/decoder_graph.hpp>
#include <npuforge/graph_roles.hpp>

namespace arcl {

int64_t kv_prefix_rows(const nf::ModelSet& ms) {
  const auto role = nf::roles::kv_prefix_role(ms.metadata(nf::roles::kMetadataKey));
  return role ? role->rows : 0;
}

std::optional<KvPrefix> read_kv_prefix(const nf::ModelSet& ms, const ModelInfo& info) {
  const auto role = nf::roles::kv_prefix_role(ms.metadata(nf::roles::kMetadataKey));
  if (!role) return std::nullopt;
  KvPrefix p;
  p.rows = role->rows;
  p.graph = role->graph;
  nf_graph* handle = nf::host().model_set_find_graph(ms.get(), p.graph.c_str());
  if (!handle) throw nf::Error("arcl: role kv_prefix names graph '" + p.graph + "', which the model set lacks");
  const nf::Graph g(handle);
  const std::vector<int64_t> dims{1, info.kv_heads, p.rows, info.head_dim};
  for (int64_t l = 0; l < info.layers; ++l)
    for (bool key : {true, false}) {
      const std::string out = nf::roles::kv_prefix_output(l, key);
      const std::string init = nf::decoder::initializer_of_output(g, out);
      if (init.empty()) throw nf::Error("arcl: KV prefix graph '" + p.graph + "' has no constant output " + out);
      nf::Tensor t = g.initializer(init);
      if (t.dtype() != NF_DTYPE_FLOAT32 || t.dims() != dims)
        throw nf::Error("arcl: KV prefix " + out + " is not float32 [1, " + std::to_string(info.kv_heads) + ", " +
                        std::to_string(p.rows) + ", " + std::to_string(info.head_dim) + "] (the model's KV geometry)");
      (key ? p.keys : p.values).push_back(std::move(t));
    }
  return p;
}

void insert_kv_prefix(nf::Graph g, const KvConcat& kv, const nf::Tensor& rows, const std::string& name) {
  nf::Node concat(kv.concat);
  std::vector<std::string> inputs = concat.inputs();
  inputs.insert(inputs.begin() + static_cast<std::ptrdiff_t>(kv.past_slot) + 1, name);
  const int64_t axis = concat.attr_int("axis", 0);
  const std::string node_name(concat.name()), output = concat.output(0);
  g.set_initializer(name, rows);
  // One Concat of three operands (a node's inputs are fixed once made): the same op count.
  g.remove_node(concat);
  g.add_node("Concat", inputs, {output}, node_name).set_attr("axis", axis);
}

void drop_kv_prefix_role(nf::ModelSet& ms, const KvPrefix& prefix) {
  nlohmann::json roles = ms.metadata(nf::roles::kMetadataKey);
  roles.erase(nf::roles::kKvPrefix);
  ms.set_metadata(nf::roles::kMetadataKey, roles);
  ms.remove_graph(prefix.graph);
}

}  // namespace arcl
