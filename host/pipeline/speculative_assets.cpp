#include "pipeline/speculative_assets.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "pipeline/util.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

// The token embedding table: Gather(initializer [rows, hidden], input_ids or Cast(input_ids)).
ir::Node* embedding_gather(const ir::Graph& g) {
  for (const auto& n : g.nodes) {
    if (n->op_type != "Gather" || n->inputs.size() < 2 || !g.initializers.count(n->inputs[0])) continue;
    std::string idx = n->inputs[1];
    if (const ir::Node* p = g.producer(idx); p && p->op_type == "Cast" && !p->inputs.empty()) idx = p->inputs[0];
    if (idx == "input_ids") return n.get();
  }
  return nullptr;
}

}  // namespace

SpeculativeAssets load_speculative_assets(const fs::path& dir) {
  SpeculativeAssets a;
  a.dir = fs::absolute(dir).lexically_normal();
  fs::path file = a.dir / "assets.json";
  if (!fs::is_regular_file(file))
    fail(file, "missing: speculative decoder assets are a folder with assets.json (e.g. made by tools/speculative/train_ssd.py)");
  try {
    a.meta = nlohmann::json::parse(read_regular_file(file, kJsonMax, "assets.json"));
  } catch (const nlohmann::json::exception&) {
    fail(file, "not valid JSON");
  }
  if (!a.meta.is_object() || a.meta.value("format", "") != "npuforge-speculative-assets")
    fail(file, "not npuforge speculative assets (\"format\": \"npuforge-speculative-assets\")");
  if (a.meta.value("version", 0) != 1) fail(file, "version " + a.meta.value("version", nlohmann::json()).dump() + " is not supported (want 1)");
  if (!a.meta.contains("decoder") || !a.meta["decoder"].is_string()) fail(file, "needs a string \"decoder\"");
  return a;
}

std::string add_extra_embeddings(ir::ModelSet& ms, const SpeculativeAssets& a) {
  if (!a.meta.contains("extra_embeddings")) return "";
  const fs::path file = a.dir / "assets.json";
  const auto& e = a.meta["extra_embeddings"];
  if (!e.is_object() || !e.contains("file") || !e["file"].is_string() || !e.contains("rows") ||
      !e["rows"].is_number_unsigned() || !e.contains("hidden") || !e["hidden"].is_number_unsigned() ||
      e.value("dtype", "float32") != "float32")
    fail(file, "extra_embeddings needs file (string), rows and hidden (unsigned integers), dtype float32");
  const int64_t rows = e["rows"], hidden = e["hidden"];
  fs::path data = a.dir / e["file"].get<std::string>();
  std::ifstream in(data, std::ios::binary);
  std::vector<float> extra(static_cast<size_t>(rows * hidden));
  if (!in || !in.read(reinterpret_cast<char*>(extra.data()), static_cast<std::streamsize>(extra.size() * sizeof(float))) ||
      in.peek() != std::char_traits<char>::eof())
    fail(data, "needs exactly " + std::to_string(rows) + " x " + std::to_string(hidden) + " float32 values");

  int64_t first_id = -1;
  for (auto& g : ms.graphs) {
    ir::Node* gather = embedding_gather(*g);
    if (!gather)
      throw std::runtime_error("graph '" + g->name + "': no token embedding (Gather of an initializer by input_ids) to append " +
                               a.meta["decoder"].get<std::string>() + "'s extra embeddings to");
    const std::string name = gather->inputs[0];
    const ir::Tensor& table = g->initializers.at(name)->tensor;
    if (table.dtype != NF_DTYPE_FLOAT32 || table.dims.size() != 2 || table.dims[1] != hidden)
      throw std::runtime_error("graph '" + g->name + "': embedding '" + name + "' is not float32 [vocab, " +
                               std::to_string(hidden) + "] (the assets' hidden size)");
    if (first_id >= 0 && first_id != table.dims[0])
      throw std::runtime_error("graph '" + g->name + "': embedding rows differ between graphs");
    first_id = table.dims[0];
    if (e.contains("first_id") && e["first_id"] != first_id)
      fail(file, "extra_embeddings.first_id " + e["first_id"].dump() + " but the model's embedding has " +
                     std::to_string(first_id) + " rows (assets of another model?)");
    ir::Tensor grown = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {first_id + rows, hidden});
    std::memcpy(grown.mutable_data(), table.data(), table.nbytes());
    std::memcpy(grown.mutable_as<float>() + first_id * hidden, extra.data(), extra.size() * sizeof(float));
    // A table shared with other nodes (a tied lm_head) keeps its rows there: only the
    // Gather reads the grown copy.
    bool shared = false;
    for (const auto& n : g->nodes)
      if (n.get() != gather)
        for (const auto& in_name : n->inputs) shared |= in_name == name;
    std::string grown_name = shared ? name + ".with_extra_rows" : name;
    g->initializers[grown_name] = ir::make_tensor_ref(std::move(grown));
    gather->inputs[0] = grown_name;
    if (auto it = g->types.find(name); it != g->types.end() && !shared) {
      it->second.dtype = NF_DTYPE_FLOAT32;
      it->second.shape = std::vector<ir::Dim>{{first_id + rows, {}}, {hidden, {}}};
    }
  }
  ms.metadata["extra_embeddings"] =
      nlohmann::json{{"rows", rows}, {"first_id", first_id}, {"decoder", a.meta["decoder"]}}.dump();
  return hash_bytes(extra.data(), extra.size() * sizeof(float));
}

std::optional<SpeculativeAssets> find_speculative_assets(const std::vector<manifest::AssetPath>& assets) {
  for (const auto& a : assets)
    if (fs::is_regular_file(fs::path(a.path) / "assets.json")) return load_speculative_assets(a.path);
  return std::nullopt;
}

}  // namespace nf::host
