// `npuforge inspect MODEL.onnx|PACKAGE [--json]`: a model's parameters, layers, heads, KV IO
// and ops; a package's target, stages and graphs (split parts with their layers and chain).
#include <npuforge/decoder_io.hpp>
#include <npuforge/graph_roles.hpp>

#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "common/util.h"
#include "onnx/onnx_io.h"
#include "pipeline/cache_branch.h"
#include "pipeline/constant_weights.h"
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
  const auto& metadata = meta.value("metadata", nlohmann::json::object());
  const auto& roles = metadata.value(roles::kMetadataKey, nlohmann::json::object());
  const auto& graphs = meta.value("graphs", nlohmann::json::array());
  std::map<std::string, int> per_role;
  for (const auto& g : graphs) ++per_role[roles::role_of(roles, g.value("name", ""))];
  std::string counts = std::to_string(graphs.size());
  if (per_role.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [role, n] : per_role) parts.push_back((role.empty() ? "target" : role) + " " + std::to_string(n));
    counts += " (" + join(parts) + ")";
  }
  row("graphs", counts);
  // The graphs of other roles (a speculative decoder's draft), after the target's.
  auto role_sections = [&] {
    for (const auto& [role, entry] : roles.items()) {
      o << "Graphs of role " << role << " (" << entry.value("decoder", "?") << ")\n";
      if (const auto tree = roles::draft_tree_of(entry); tree && role == roles::kDraftTree)
        o << "  the draft's " << tree->depth << "-deep loop, " << tree->branches << " branches, " << tree->nodes()
          << " nodes: one graph a step; AR = catch-up rows, CL = their context\n";
      std::map<std::string, std::string> shapes;
      for (const auto& v : entry.value("io", nlohmann::json::object()).value("variants", nlohmann::json::array()))
        shapes[v.value("graph", "")] = "  AR " + std::to_string(v.value("ar", 0)) + ", CL " + std::to_string(v.value("cl", 0));
      for (const auto& g : entry.value("graphs", nlohmann::json::array()))
        o << "  " << g.get<std::string>() << shapes[g.get<std::string>()] << "\n";
    }
  };

  const auto& io = metadata.value("io", nlohmann::json::object());
  if (io.value("layout", "") != "static") {
    for (const auto& g : graphs)
      if (roles::is_target(roles, g.value("name", ""))) row("graph", g.value("name", "?"));
    role_sections();
    return o.str();
  }
  o << "Static variants (kv_layout " << io.value("kv_layout", "hf") << ", " << io.value("layers", 0) << " layers";
  if (io.contains("split")) o << ", " << io["split"].value("num_splits", 1) << " parts each";
  o << ")\n";
  // Graph state a speculative decoder's build hook added (graph_roles.hpp kv_prefix).
  if (io.contains("kv_prefix_rows"))
    o << "  KV prefix: " << io["kv_prefix_rows"].dump() << " rows per layer in every graph, seen by flagged rows only ("
      << io["kv_prefix_rows"].dump() << " of each CL's slots)\n";
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
  role_sections();
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
    host::inline_cache_branch(*g);  // the model as a build reads it
    host::lift_constant_weights(*g);
    auto info = onnx_io::inspect(*g);
    if (json)
      std::cout << info.dump(2) << "\n";
    else
      std::cout << onnx_io::format_inspect(info);
  });
}

}  // namespace nf::cli
