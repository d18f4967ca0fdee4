// `npuforge export-qdq PACKAGE|MODEL_SET --out DIR [--json]`: the package's quantized model
// set as QDQ ONNX (one DIR/<graph>.onnx per graph, large weights in DIR/<graph>.onnx.data)
// that ONNX Runtime runs; what becomes what is in host/onnx/qdq.h.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/util.h"
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
    host::install_cancel_handler();  // stops before the next graph
    fs::path dir = path;
    // Only the cpu backend keeps the quantized model set in ONNX layout; htp and aries
    // store their own containers (weights packed for the chip).
    if (fs::is_regular_file(dir / "package.json")) {
      auto meta = nlohmann::json::parse(
          host::read_regular_file(dir / "package.json", host::kJsonMax, "package.json"), nullptr, false);
      std::string backend = meta.is_object() && meta.contains("backend") && meta["backend"].is_object()
                                ? meta["backend"].value("name", "")
                                : "";
      if (backend != "cpu")
        throw UserError(path + " is a package for backend '" + backend +
                        "'; export-qdq reads cpu packages only (build a [targets.NAME] with backend = \"cpu\" "
                        "from the same manifest)");
    }
    if (!fs::is_regular_file(dir / "model_set.json")) dir = dir / "artifacts" / "model";
    if (!fs::is_regular_file(dir / "model_set.json"))
      throw UserError(path + ": not a model set, nor a package whose artifacts/model holds one (cpu backend)");
    auto ms = onnx_io::load_model_set(dir.string());
    if (ms->encodings.empty()) throw UserError(path + ": the model set has no encodings; nothing to export as QDQ");
    std::error_code ec;
    const bool out_existed = fs::exists(out, ec);
    if (out_existed && (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
      throw UserError("--out " + out + ": exists and is not an empty folder");
    // Written aside, then renamed into place: a failed or interrupted export leaves no
    // --out folder (or the empty one that was there).
    fs::path target = fs::absolute(out).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();  // "qdq/"
    host::TempDir staging(target.parent_path(), "." + target.filename().string() + ".partial-");
    nlohmann::json summary = nlohmann::json::array();
    std::vector<std::string> lines;
    for (const auto& g : ms->graphs) {
      if (host::cancel_flag()) throw Interrupted("before " + g->name + "; nothing was written");
      onnx_io::QdqStats st;
      auto q = onnx_io::qdq_graph(*ms, *g, &st);
      onnx_io::save_model(*q, (staging.path() / (g->name + ".onnx")).string());
      const std::string file = (fs::path(out) / (g->name + ".onnx")).string();
      nlohmann::json j = st.to_json();
      j["graph"] = g->name;
      j["file"] = file;
      summary.push_back(j);
      char line[512];
      std::snprintf(line, sizeof line,
                    "%s: %zu weights DequantizeLinear, %zu weights float on grid, %zu activations Q/DQ, %zu emulated",
                    file.c_str(), st.weights_dq, st.weights_on_grid, st.activations_qdq, st.activations_emulated);
      lines.push_back(line);
    }
    fs::rename(staging.path(), target);  // replaces the empty folder checked above, if any
    staging.release();
    if (json)
      std::cout << summary.dump() << std::endl;
    else
      for (const auto& l : lines) std::printf("%s\n", l.c_str());
  });
}

}  // namespace nf::cli
