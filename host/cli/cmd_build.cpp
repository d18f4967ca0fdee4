// `npuforge build MANIFEST [--target NAME|all] [--out DIR] [--no-cache] [--skip-resource-check]`.
#include <cstdio>

#include "cli/commands.h"
#include "pipeline/pipeline.h"
#include "pipeline/stage_cache.h"

namespace nf::cli {

void add_build(CLI::App& app) {
  auto* cmd = app.add_subcommand("build", "Build a package per target from a manifest");
  static std::string path, target = "all", out, cache_dir;
  static bool no_cache = false, skip_resource_check = false;
  cmd->add_option("manifest", path, "manifest.toml")->required();
  cmd->add_option("--target", target, "A [targets.NAME] of the manifest, or all")->capture_default_str();
  cmd->add_option("--out", out, "Output directory (default: out/ beside the manifest)");
  cmd->add_flag("--no-cache", no_cache, "Run every stage, ignoring and not filling the stage cache");
  cmd->add_option("--cache-dir", cache_dir, "Stage cache directory (default: ~/.cache/npuforge)");
  cmd->add_flag("--skip-resource-check", skip_resource_check,
                "Build even if the estimated peak memory or package size exceeds what this machine has");
  cmd->callback([] {
    auto m = manifest::parse_manifest(path);
    host::Registry reg;
    auto errors = host::load_and_validate(m, reg);
    fail_with_errors(errors);
    host::BuildRequest req;
    req.target = target;
    req.out_dir = out.empty() ? std::filesystem::path(m.dir) / "out" : std::filesystem::absolute(out);
    req.use_cache = !no_cache;
    req.cache_root = cache_dir;
    req.skip_resource_check = skip_resource_check;
    auto result = host::build(m, reg, req);
    for (const auto& p : result.packages) std::printf("%s\n", p.string().c_str());
  });
}

}  // namespace nf::cli
