// `npuforge check MANIFEST [--json]`: every manifest error, with file:line:col, before any work:
// the schemas, then each stage's own validation on the model's shapes (validate_stages).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "pipeline/pipeline.h"

namespace fs = std::filesystem;

namespace nf::cli {

void fail_with_errors(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  for (size_t i = 0; i + 1 < errors.size(); ++i) std::fprintf(stderr, "npuforge: error: %s\n", errors[i].c_str());
  throw UserError(errors.back(), exit_code::bad_input);
}

manifest::Manifest read_manifest(const std::string& path) {
  // A package or a folder is a common slip (`build out/cpu`); say what it is, not that it
  // fails to parse as TOML.
  if (fs::is_directory(path)) {
    if (fs::is_regular_file(fs::path(path) / "package.json"))
      throw UserError(path + " is a package (it has package.json), not a manifest; build and check take the "
                      "manifest.toml it was built from (`npuforge run " + path + "` runs the package)");
    if (fs::is_regular_file(fs::path(path) / "manifest.toml"))
      throw UserError(path + ": the manifest is a folder; give the manifest file, " +
                      (fs::path(path) / "manifest.toml").string());
    throw UserError(path + ": the manifest is a folder; npuforge reads it from a regular file only");
  }
  if (fs::path(path).filename() == "package.json")
    throw UserError(path + " is a package's package.json, not a manifest; build and check take the manifest.toml "
                    "the package was built from");
  return manifest::parse_manifest(path);
}

nlohmann::json manifest_summary(const manifest::Manifest& m) {
  auto uses = [](const std::vector<manifest::PluginUse>& list) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& u : list) a.push_back({{"plugin", u.name}, {"options", u.options}});
    return a;
  };
  nlohmann::json targets = nlohmann::json::array();
  for (const auto& [name, use] : m.targets) targets.push_back({{"name", name}, {"backend", use.name}, {"options", use.options}});
  return {{"model", m.model_onnx},
          {"quant", uses(m.quant)},
          {"transforms", uses(m.transforms)},
          {"targets", targets},
          {"speculative", m.speculative ? nlohmann::json(m.speculative->name) : nlohmann::json(nullptr)}};
}

void add_check(CLI::App& app) {
  auto* cmd = app.add_subcommand("check", "Validate a manifest against the installed plugins");
  static std::string path;
  static bool json = false;
  cmd->add_option("manifest", path, "manifest.toml")->required();
  cmd->add_flag("--json", json,
                "One JSON object: ok, and the errors or the plugins of each stage and target with their options "
                "(defaults filled in)");
  cmd->callback([] {
    std::vector<std::string> errors;
    std::optional<manifest::Manifest> m;
    try {
      m = read_manifest(path);
      host::Registry reg;
      errors = host::load_and_validate(*m, reg);
      // Then what the stages would refuse on this model (mapped, not read: cheap at 8B).
      if (errors.empty())
        for (const auto& e : host::validate_stages(*m, reg, *host::map_source_model(m->model_onnx, m->model_config)))
          errors.push_back(e.what());
    } catch (const std::exception& e) {
      if (json) std::cout << nlohmann::json{{"ok", false}, {"manifest", path}, {"errors", {e.what()}}}.dump() << std::endl;
      throw;
    }
    if (json) {
      nlohmann::json j{{"ok", errors.empty()}, {"manifest", path}};
      if (errors.empty()) j.update(manifest_summary(*m));
      else j["errors"] = errors;
      std::cout << j.dump() << std::endl;
    }
    fail_with_errors(errors);
    if (!json)
      std::printf("%s: ok (%zu quant, %zu transform, %zu target%s)\n", path.c_str(), m->quant.size(),
                  m->transforms.size(), m->targets.size(), m->targets.size() == 1 ? "" : "s");
  });
}

}  // namespace nf::cli
