// `npuforge inspect MODEL.onnx [--json]`: parameters, layers, heads, KV IO, ops.
#include <iostream>

#include "cli/commands.h"
#include "onnx/onnx_io.h"

namespace nf::cli {

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Summarize an ONNX decoder model");
  static std::string path;
  static bool json = false;
  cmd->add_option("model", path, "model.onnx")->required();
  cmd->add_flag("--json", json, "Machine-readable output");
  cmd->callback([] {
    auto g = onnx_io::load_model(path);
    auto info = onnx_io::inspect(*g);
    if (json)
      std::cout << info.dump(2) << "\n";
    else
      std::cout << onnx_io::format_inspect(info);
  });
}

}  // namespace nf::cli
