// `npuforge inspect MODEL.onnx|PACKAGE [--json]`: a model's parameters, layers, heads, KV IO
// and ops; a package's target, stages and graphs (split parts with their layers and chain).
#include <npuforge/decoder_io.hpp>

#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "common/util.h"
#include "onnx/onnx_io.h"
#include "runtime/package.h"

namespace nf::cli {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// Runner inputs of a part, with the KV caches counted rather than listed.
std::string runner_inputs(const nlohmann::json& names) {
  std::vector<std::string> shown;
  size_t kv = 0;
  for (const auto& n : names) {
    std::string s = n.get<std::string>();
    if (decoder::is_past_kv(s)) ++kv;
    else shown.push_back(s);
  }
  if (kv) shown.push_back(std::to_string(kv) + " KV caches");
  return shown.empty() ? "-" : join(shown);
}

std::string format_package(const std::filesystem::path& dir, const nlohmann::json& meta) {
  std::ostringstream o;
  auto row = [&](const std::string& k, const std::string& v) {
    o << "  " << k << std::string(k.size() < 16 ? 16 - k.size() : 1, ' ') << v << "\n";
  };
  o << "Package " << dir.string() << "\n";
  row("target", meta.value("target", "?"));
  const auto& backend = meta.value("backend", nlohmann::json::object());
  row("backend", backend.value("name", "?") + " " + backend.value("version", ""));
  std::vector<std::string> stages;
  for (const auto& s : meta.value("stages", nlohmann::json::array()))
    stages.push_back(s.value("name", "?") + " " + s.value("version", ""));
  row("stages", stages.empty() ? "-" : join(stages));
  row("graphs", std::to_string(meta.value("graphs", nlohmann::json::array()).size()));

  const auto& io = meta.value("metadata", nlohmann::json::object()).value("io", nlohmann::json::object());
  if (io.value("layout", "") != "static") {
    for (const auto& g : meta.value("graphs", nlohmann::json::array())) row("graph", g.value("name", "?"));
    return o.str();
  }
  o << "Static variants (kv_layout " << io.value("kv_layout", "hf") << ", " << io.value("layers", 0) << " layers";
  if (io.contains("split")) o << ", " << io["split"].value("num_splits", 1) << " parts each";
  o << ")\n";
  for (const auto& v : io.value("variants", nlohmann::json::array())) {
    std::string head = v.value("graph", "?") + "  AR " + std::to_string(v.value("ar", 0)) + ", CL " +
                       std::to_string(v.value("cl", 0));
    if (v.contains("scl") && v["scl"].is_number_integer()) head += ", SCL " + std::to_string(v["scl"].get<int64_t>());
    o << "  " << head << "\n";
    for (const auto& p : v.value("parts", nlohmann::json::array())) {
      std::vector<std::string> layers, from, to;
      for (const auto& l : p.value("layers", nlohmann::json::array())) layers.push_back(l.dump());
      for (const auto& f : p.value("inputs_from_parts", nlohmann::json::array()))
        from.push_back("part " + f.value("part", nlohmann::json(0)).dump() + " " + f.value("name", ""));
      bool logits = false;
      for (const auto& out : p.value("outputs", nlohmann::json::array())) logits |= out == "logits";
      o << "    " << p.value("graph", "?") << "\n";
      o << "      layers   " << (layers.empty() ? "-" : join(layers)) << (logits ? "  (+ logits)" : "") << "\n";
      o << "      runner   " << runner_inputs(p.value("inputs_from_runner", nlohmann::json::array())) << "\n";
      if (!from.empty()) o << "      from     " << join(from) << "\n";
      for (const auto& t : p.value("outputs_to_parts", nlohmann::json::array())) to.push_back(t.get<std::string>());
      if (!to.empty()) o << "      hands on " << join(to) << "\n";
    }
  }
  return o.str();
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Summarize an ONNX decoder model or a package");
  static std::string path;
  static bool json = false;
  cmd->add_option("model", path, "model.onnx or a package directory")->required();
  cmd->add_flag("--json", json, "Machine-readable output");
  cmd->callback([] {
    std::filesystem::path dir(path);
    if (std::filesystem::is_directory(dir)) {
      // Verified like every package npuforge reads: what inspect shows is what run would run.
      nlohmann::json meta;
      try {
        meta = host::open_package(dir).meta;
      } catch (const host::PackageError& e) {  // not a package, or a corrupt one: bad input
        throw UserError(e.what());
      }
      if (json) {
        meta.erase("files");
        std::cout << meta.dump(2) << "\n";
      } else {
        std::cout << format_package(dir, meta);
      }
      return;
    }
    auto g = onnx_io::load_model(path);
    auto info = onnx_io::inspect(*g);
    if (json)
      std::cout << info.dump(2) << "\n";
    else
      std::cout << onnx_io::format_inspect(info);
  });
}

}  // namespace nf::cli
