// One fuzz input, shared by the libFuzzer target and the corpus replay test.
#pragma once

#include "onnx/internal.h"

#include <stdexcept>
#include <string>
#include <string_view>

namespace nf::fuzz {

// Bad input must end in ModelError. Input that loads must also inspect, export and load
// again to the same structure; a break of that throws std::logic_error.
inline void import_one(std::string_view bytes, const std::string& base_dir) {
  std::unique_ptr<ir::Graph> g;
  try {
    g = onnx_io::load_model_from_bytes(bytes, base_dir);
  } catch (const onnx_io::ModelError& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos)
      throw std::logic_error("ModelError message has a newline");
    return;
  }
  (void)onnx_io::format_inspect(onnx_io::inspect(*g));
  onnx::ModelProto m;
  onnx_io::detail::ExportPolicy inline_all;
  inline_all.origin = "<fuzz export>";
  onnx_io::detail::export_model(*g, inline_all, &m);
  std::string again = m.SerializeAsString();
  std::unique_ptr<ir::Graph> h;
  try {
    h = onnx_io::load_model_from_bytes(again, base_dir);
  } catch (const onnx_io::ModelError& e) {
    throw std::logic_error(std::string("exported model does not load again: ") + e.what());
  }
  if (h->nodes.size() != g->nodes.size() || h->initializers.size() != g->initializers.size() ||
      h->inputs != g->inputs || h->outputs != g->outputs)
    throw std::logic_error("exported model loads with a different structure");
}

}  // namespace nf::fuzz
