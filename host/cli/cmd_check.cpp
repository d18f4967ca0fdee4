// `npuforge check MANIFEST`: every manifest error, with file:line:col, before any work.
#include <cstdio>

#include "cli/commands.h"
#include "pipeline/pipeline.h"

namespace nf::cli {

void fail_with_errors(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  for (size_t i = 0; i + 1 < errors.size(); ++i) std::fprintf(stderr, "npuforge: error: %s\n", errors[i].c_str());
  throw UserError(errors.back(), 2);
}

void add_check(CLI::App& app) {
  auto* cmd = app.add_subcommand("check", "Validate a manifest against the installed plugins");
  static std::string path;
  cmd->add_option("manifest", path, "manifest.toml")->required();
  cmd->callback([] {
    auto m = manifest::parse_manifest(path);
    host::Registry reg;
    auto errors = host::load_and_validate(m, reg);
    fail_with_errors(errors);
    std::printf("%s: ok (%zu quant, %zu transform, %zu target%s)\n", path.c_str(), m.quant.size(), m.transforms.size(),
                m.targets.size(), m.targets.size() == 1 ? "" : "s");
  });
}

}  // namespace nf::cli
