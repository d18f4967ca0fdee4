// `npuforge export-qdq PACKAGE|MODEL_SET --out DIR [--json]`: the package's quantized model
// set as QDQ ONNX (one DIR/<graph>.onnx per graph, large weights in DIR/<graph>.onnx.data)
// that ONNX Runtime runs; what becomes what is in host/onnx/qdq.h.
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "onnx/onnx_io.h"
#include "onnx/qdq.h"

namespace fs = std::filesystem;

namespace nf::cli {

void add_export_qdq(CLI::App& app) {
  auto* cmd = app.add_subcommand("export-qdq", "Write a quantized package as QDQ ONNX (DequantizeLinear weights, Q/DQ activations)");
  static std::string path, out;
  static bool json = false;
  cmd->add_option("package", path, "package directory (cpu backend) or model-set directory")->required();
  cmd->add_option("--out", out, "output directory (created; must be empty if it exists)")->required();
  cmd->add_flag("--json", json, "Machine-readable summary");
  cmd->callback([] {
    fs::path dir = path;
    if (!fs::is_regular_file(dir / "model_set.json")) dir = dir / "artifacts" / "model";
    if (!fs::is_regular_file(dir / "model_set.json"))
      throw UserError(path + ": not a model set, nor a package whose artifacts/model holds one (cpu backend)");
    auto ms = onnx_io::load_model_set(dir.string());
    if (ms->encodings.empty()) throw UserError(path + ": the model set has no encodings; nothing to export as QDQ");
    std::error_code ec;
    if (fs::exists(out, ec) && !fs::is_empty(out, ec)) throw UserError("--out " + out + ": exists and is not empty");
    fs::create_directories(out);
    nlohmann::json summary = nlohmann::json::array();
    for (const auto& g : ms->graphs) {
      onnx_io::QdqStats st;
      auto q = onnx_io::qdq_graph(*ms, *g, &st);
      fs::path file = fs::path(out) / (g->name + ".onnx");
      onnx_io::save_model(*q, file.string());
      nlohmann::json j = st.to_json();
      j["graph"] = g->name;
      j["file"] = file.string();
      summary.push_back(j);
      if (!json)
        std::printf("%s: %zu weights DequantizeLinear, %zu weights float on grid, %zu activations Q/DQ, %zu emulated\n",
                    file.string().c_str(), st.weights_dq, st.weights_on_grid, st.activations_qdq,
                    st.activations_emulated);
    }
    if (json) std::cout << summary.dump() << "\n";
  });
}

}  // namespace nf::cli
