// `npuforge build MANIFEST [--target NAME|all] [--out DIR] [--no-cache] [--skip-resource-check] [--json]
//  [--executor local|slurm] [--jobs N] [--shards N] [--retries N] [--sbatch-arg ARG]...`, and
// `npuforge build-stage PLAN STAGE`, which a build's executor runs for one stage.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/util.h"
#include "manifest/suggest.h"
#include "pipeline/pipeline.h"
#include "pipeline/stage_cache.h"

namespace fs = std::filesystem;

namespace nf::cli {
namespace {

// What a built package holds, from its package.json and build_report.json.
nlohmann::json package_summary(const fs::path& dir) {
  auto meta = nlohmann::json::parse(host::read_regular_file(dir / "package.json", host::kJsonMax, "package.json"));
  auto report =
      nlohmann::json::parse(host::read_regular_file(dir / "build_report.json", host::kJsonMax, "build_report.json"));
  uint64_t bytes = 0, files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      bytes += e.file_size();
      ++files;
    }
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : report.value("stages", nlohmann::json::array()))
    stages.push_back({{"kind", s.value("kind", "")},
                      {"name", s.value("name", "")},
                      {"cached", s.value("cached", false)},
                      {"seconds", s.value("seconds", 0.0)}});
  return {{"target", meta.value("target", "")},
          {"path", dir.string()},
          {"backend", meta.contains("backend") ? meta["backend"].value("name", "") : ""},
          {"graphs", meta.value("graphs", nlohmann::json::array()).size()},
          {"stages", stages},
          {"compile_seconds", report.value("compile_seconds", 0.0)},
          {"files", files},
          {"bytes", bytes}};
}

std::string megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

void add_build(CLI::App& app) {
  auto* cmd = app.add_subcommand("build", "Build a package per target from a manifest");
  static std::string path, target = "all", out, cache_dir;
  static bool no_cache = false, skip_resource_check = false, json = false;
  static std::string executor;
  static int jobs = 0, shards = 0, retries = -1;
  static std::vector<std::string> sbatch_args;
  cmd->add_option("manifest", path, "manifest.toml")->required();
  cmd->add_option("--target", target, "A [targets.NAME] of the manifest, or all")->capture_default_str();
  cmd->add_option("--out", out, "Output directory (default: out/ beside the manifest)");
  cmd->add_flag("--no-cache", no_cache, "Run every stage, ignoring and not filling the stage cache");
  cmd->add_option("--cache-dir", cache_dir, "Stage cache directory (default: ~/.cache/npuforge)");
  cmd->add_flag("--skip-resource-check", skip_resource_check,
                "Build even if the estimated peak memory or package size exceeds what this machine has");
  cmd->add_option("--executor", executor,
                  "Where the stages run: local (this machine) or slurm (batch jobs; the cache, --out and the model on "
                  "a file system every node sees). Default: [build] executor, else local")
      ->check(CLI::IsMember({"local", "slurm"}));
  cmd->add_option("--jobs,-j", jobs,
                  "local: stages run at once in their own processes (targets compile side by side); 1 runs them in "
                  "this process. Default: [build] jobs, else 1")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--shards", shards,
                  "Parts a quant stage whose recipe splits its work runs in, side by side before the stage (Slurm: "
                  "one job array): lpbq, minmax and seqmse calibrate by batches, seqmse with inp_symmetry = "
                  "\"symfp\" also searches by layers; at most one part per calibration batch. Default: [build] "
                  "shards, else local: 1 (one machine's cores already serve one stage); slurm: the cluster's nodes")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--retries", retries, "Times a failed stage process or job is started again (default: [build] retries, else 2)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--sbatch-arg", sbatch_args, "slurm: an argument for every sbatch, e.g. --sbatch-arg=--partition=cpu (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--json", json,
                "One JSON object on stdout: ok, seconds, and per package its path, backend, graphs, stages, files "
                "and bytes (or the errors)");
  cmd->callback([] {
    host::install_cancel_handler();  // stops at the next stage or progress report
    const auto t0 = std::chrono::steady_clock::now();
    std::string stage;         // the stage running, for an interruption's message
    bool reported = false;     // --json: the failure object is printed
    fs::path out_dir;
    bool out_existed = true;
    auto print_json = [&](const nlohmann::json& j) {
      std::cout << j.dump() << std::endl;
      reported = true;
    };
    // The out folder a failed build made stays only if something else put files in it.
    auto remove_out_if_ours = [&] {
      std::error_code ec;
      if (!out_existed && fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)) fs::remove(out_dir, ec);
    };
    host::BuildResult result;
    try {
      auto m = read_manifest(path);
      host::Registry reg;
      auto errors = host::load_and_validate(m, reg);
      if (!errors.empty() && json) print_json({{"ok", false}, {"manifest", path}, {"errors", errors}});
      fail_with_errors(errors);
      if (target != "all") {
        std::vector<std::string> names;
        for (const auto& t : m.targets) names.push_back(t.first);
        if (std::find(names.begin(), names.end(), target) == names.end())
          throw UserError(path + ": no target named " + manifest::quote(target) +
                          manifest::did_you_mean(target, names) + " (targets: " + manifest::join(names) + ")");
      }
      // -v: what each stage and target will run with, defaults filled in.
      const auto summary = manifest_summary(m);
      for (const char* list : {"quant", "transforms"})
        for (const auto& u : summary[list])
          spdlog::debug("{} {}: {}", list == std::string("quant") ? "quant" : "transform",
                        u["plugin"].get<std::string>(), u["options"].dump());
      for (const auto& t : summary["targets"])
        spdlog::debug("target {} (backend {}): {}", t["name"].get<std::string>(), t["backend"].get<std::string>(),
                      t["options"].dump());
      host::BuildRequest req;
      req.executor.kind = executor.empty() ? m.build.executor : executor;
      req.executor.jobs = static_cast<size_t>(jobs ? jobs : m.build.jobs);
      req.executor.shards = static_cast<size_t>(shards ? shards : m.build.shards);
      if (no_cache && (req.executor.kind != "local" || req.executor.jobs > 1))
        throw UserError("--no-cache: the " + req.executor.kind + " executor runs stages in separate processes that "
                        "hand their results on through the stage cache; build with the cache (--cache-dir picks "
                        "where) or with --jobs 1");
      req.target = target;
      req.out_dir = out.empty() ? fs::path(m.dir) / "out" : fs::absolute(out);
      req.use_cache = !no_cache;
      req.cache_root = cache_dir;
      req.skip_resource_check = skip_resource_check;
      req.executor.retries = retries >= 0 ? retries : m.build.retries;
      req.executor.sbatch_args = m.build.sbatch_args;
      req.executor.sbatch_args.insert(req.executor.sbatch_args.end(), sbatch_args.begin(), sbatch_args.end());
      req.on_stage = [&](const std::string& s) {
        stage = s;
        spdlog::debug("stage {}", s);
      };
      out_dir = req.out_dir;
      out_existed = fs::exists(out_dir);
      result = host::build(m, reg, req);
    } catch (const host::Cancelled&) {
      remove_out_if_ours();
      if (json) print_json({{"ok", false}, {"manifest", path}, {"stop", "interrupted"}, {"stage", stage}});
      throw Interrupted((stage.empty() ? std::string("before the first stage") : "during stage '" + stage + "'") +
                        "; no package was written or replaced");
    } catch (const std::exception& e) {
      remove_out_if_ours();
      if (json && !reported) print_json({{"ok", false}, {"manifest", path}, {"errors", {e.what()}}});
      throw;
    }

    nlohmann::json packages = nlohmann::json::array();
    for (const auto& p : result.packages) {
      nlohmann::json s = package_summary(p);
      // -v: the stages of each package; -vv: also its files.
      std::string stages;
      for (const auto& st : s["stages"])
        stages += (stages.empty() ? "" : ", ") + st["kind"].get<std::string>() + " " + st["name"].get<std::string>() +
                  (st["cached"].get<bool>() ? " (cached)" : "");
      spdlog::debug("package {}: backend {}, {} graph(s), {} files, {}; stages: {}", p.string(),
                    s["backend"].get<std::string>(), s["graphs"].get<size_t>(), s["files"].get<uint64_t>(),
                    megabytes(s["bytes"].get<uint64_t>()), stages.empty() ? "none" : stages);
      if (spdlog::should_log(spdlog::level::trace))
        for (const auto& e : fs::recursive_directory_iterator(p))
          if (e.is_regular_file())
            spdlog::trace("  {} {}", megabytes(e.file_size()), fs::relative(e.path(), p).string());
      packages.push_back(std::move(s));
    }
    if (json)
      print_json({{"ok", true},
                  {"manifest", path},
                  {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                  {"packages", packages}});
    else
      for (const auto& p : result.packages) std::printf("%s\n", p.string().c_str());
  });
}

void add_build_stage(CLI::App& app) {
  auto* cmd = app.add_subcommand("build-stage", "Run one stage of a planned build (what build's executors start)");
  cmd->group("");  // not for people: `build --executor` writes the plan and starts these
  static std::string plan, stage;
  cmd->add_option("plan", plan, "plan.json of the build")->required();
  cmd->add_option("stage", stage, "the stage's id in the plan")->required();
  cmd->callback([] {
    host::install_cancel_handler();
    try {
      host::run_planned_stage(plan, stage);
    } catch (const host::Cancelled&) {
      throw Interrupted("during stage '" + stage + "'");
    }
  });
}

}  // namespace nf::cli
