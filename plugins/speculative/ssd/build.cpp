// ssd's build hook: the forecast embeddings become rows of the model's token embedding
// table, so the package holds them (quantized with the table by the manifest's recipes) and
// the device embeds forecast tokens like any other token.
#include <npuforge/decoder_graph.hpp>

#include <cstring>
#include <fstream>
#include <map>

#include "assets.h"

namespace ssd {
namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) { throw nf::Error("ssd: " + file + ": " + what); }

}  // namespace

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

}  // namespace ssd
