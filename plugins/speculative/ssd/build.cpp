// ssd's build hook: the forecast embeddings become rows of the model's token embedding
// table, so the package holds them (quantized with the table by the manifest's recipes) and
// the device embeds forecast tokens like any other token; the KV prefix becomes graph state
// (role kv_prefix, graph_roles.hpp), which arcl builds into every static graph.
#include <npuforge/decoder_graph.hpp>
#include <npuforge/graph_roles.hpp>

#include <cstring>
#include <fstream>
#include <map>

#include "assets.h"

namespace ssd {

void append_forecast_embeddings(const std::string& dir, nf::ModelSet ms) {
  const std::string file = dir + "/assets.json";
  const nlohmann::json e = read_assets_json(dir)["extra_embeddings"];
  if (!e.contains("file") || !e["file"].is_string() || !e.contains("rows") || !e["rows"].is_number_unsigned() ||
      !e.contains("hidden") || !e["hidden"].is_number_unsigned() || e.value("dtype", "float32") != "float32")
    fail(file, "extra_embeddings needs file (string), rows and hidden (unsigned integers), dtype float32");
  const int64_t rows = e["rows"], hidden = e["hidden"];
  if (rows <= 0 || hidden <= 0 || rows > (1 << 20) || hidden > (1 << 20))
    fail(file, "extra_embeddings rows and hidden must be between 1 and 2^20");
  const std::string data = dir + "/" + e["file"].get<std::string>();
  std::ifstream in(data, std::ios::binary);
  std::vector<float> extra(static_cast<size_t>(rows * hidden));
  if (!in || !in.read(reinterpret_cast<char*>(extra.data()), static_cast<std::streamsize>(extra.size() * sizeof(float))) ||
      in.peek() != std::char_traits<char>::eof())
    fail(data, "needs exactly " + std::to_string(rows) + " x " + std::to_string(hidden) + " float32 values");

  // Every graph's table is found and checked before any is changed: a refusal leaves the
  // model set as it was.
  struct Site {
    nf::Graph graph;
    nf::Node gather;
    std::string table;
  };
  std::vector<Site> sites;
  int64_t first_id = -1;
  for (nf::Graph g : ms.graphs()) {
    std::optional<nf::Node> gather = nf::decoder::embedding_gather(g);
    if (!gather)
      throw nf::Error("ssd: graph '" + g.name() +
                      "': no token embedding (Gather of an initializer by input_ids) to append the forecast embeddings to");
    const std::string name = gather->input(0);
    const nf::Tensor table = g.initializer(name);
    const std::vector<int64_t> dims = table.dims();
    if (table.dtype() != NF_DTYPE_FLOAT32 || dims.size() != 2 || dims[1] != hidden)
      throw nf::Error("ssd: graph '" + g.name() + "': embedding '" + name + "' is not float32 [vocab, " +
                      std::to_string(hidden) + "] (the assets' hidden size)");
    if (first_id >= 0 && first_id != dims[0]) throw nf::Error("ssd: embedding rows differ between graphs");
    first_id = dims[0];
    if (e.contains("first_id") && e["first_id"] != first_id)
      fail(file, "extra_embeddings.first_id " + e["first_id"].dump() + " but the model's embedding has " +
                     std::to_string(first_id) + " rows (assets of another model?)");
    sites.push_back({g, *gather, name});
  }
  const std::vector<int64_t> grown_dims{first_id + rows, hidden};
  for (Site& site : sites) {
    nf::Graph& g = site.graph;
    const nf::Tensor table = g.initializer(site.table);
    nf::Tensor grown = nf::Tensor::create(NF_DTYPE_FLOAT32, grown_dims);
    auto* out = static_cast<float*>(grown.mutable_data());
    std::memcpy(out, table.data(), table.nbytes());
    std::memcpy(out + first_id * hidden, extra.data(), extra.size() * sizeof(float));
    // A table shared with other nodes (a tied LM head) keeps its rows there: only the
    // Gather reads the grown copy.
    bool shared = false;
    for (nf::Node n : g.nodes())
      if (n.get() != site.gather.get())
        for (const std::string& in_name : n.inputs()) shared |= in_name == site.table;
    const std::string grown_name = shared ? site.table + ".with_extra_rows" : site.table;
    g.set_initializer(grown_name, grown);
    site.gather.set_input(0, grown_name);
    if (nf::ValueType t; !shared && g.value_type(site.table, &t)) g.set_value_type(site.table, NF_DTYPE_FLOAT32, grown_dims);
  }
  ms.set_metadata("extra_embeddings", {{"rows", rows}, {"first_id", first_id}, {"decoder", "ssd"}});
}

void check_kv_prefix(const Assets& a, const std::string& dir, const nf::ModelSet& ms) {
  const nlohmann::json config = ms.metadata("config");
  // The model's KV geometry, as arcl and the runners read it from config.json.
  if (config.is_object() && config.contains("num_hidden_layers") && config["num_hidden_layers"].is_number_integer()) {
    const int64_t heads = config.value("num_attention_heads", int64_t{0});
    const int64_t kv_heads = config.value("num_key_value_heads", heads);
    const int64_t head_dim = config.contains("head_dim") && config["head_dim"].is_number_integer()
                                 ? config["head_dim"].get<int64_t>()
                                 : (heads > 0 ? config.value("hidden_size", int64_t{0}) / heads : 0);
    const int64_t layers = config["num_hidden_layers"].get<int64_t>();
    if (layers != static_cast<int64_t>(a.layers) || kv_heads != static_cast<int64_t>(a.kv_heads) ||
        head_dim != static_cast<int64_t>(a.head_dim))
      fail(dir + "/assets.json", "the KV prefix is [" + std::to_string(a.layers) + " layers, " +
                                     std::to_string(a.kv_heads) + " kv heads, head_dim " + std::to_string(a.head_dim) +
                                     "], the model's cache is [" + std::to_string(layers) + ", " +
                                     std::to_string(kv_heads) + ", " + std::to_string(head_dim) + "] (assets of another model?)");
  }
  const nlohmann::json roles = ms.metadata(nf::roles::kMetadataKey);
  if (roles.is_object() && roles.contains(nf::roles::kKvPrefix))
    throw nf::Error("ssd: the model set already has a KV prefix (role kv_prefix)");
}

void add_kv_prefix_graph(const Assets& a, nf::ModelSet ms) {
  const std::string name = "ssd_kv_prefix";
  nf::Graph g = ms.add_graph(name);
  const int64_t P = a.prefix, kvh = static_cast<int64_t>(a.kv_heads), hd = static_cast<int64_t>(a.head_dim);
  const std::vector<int64_t> dims{1, kvh, P, hd};
  const size_t per_layer = a.kv_heads * static_cast<size_t>(P) * a.head_dim;
  std::vector<std::string> outputs;
  for (size_t l = 0; l < a.layers; ++l)
    for (bool key : {true, false}) {
      nf::Tensor t = nf::Tensor::create(NF_DTYPE_FLOAT32, dims);
      std::memcpy(t.mutable_data(), (key ? a.keys : a.values).data() + l * per_layer, per_layer * sizeof(float));
      const std::string out = nf::roles::kv_prefix_output(static_cast<int64_t>(l), key);
      const std::string init = "ssd." + out;
      g.set_initializer(init, t);
      g.add_node("Identity", {init}, {out}, "/ssd/" + out);
      g.set_value_type(out, NF_DTYPE_FLOAT32, dims);
      outputs.push_back(out);
    }
  g.set_outputs(outputs);
  nlohmann::json roles = ms.metadata(nf::roles::kMetadataKey);
  if (!roles.is_object()) roles = nlohmann::json::object();
  roles[nf::roles::kKvPrefix] = {{"graphs", {name}}, {"decoder", "ssd"}, {"rows", P}};
  ms.set_metadata(nf::roles::kMetadataKey, roles);
}

}  // namespace ssd
