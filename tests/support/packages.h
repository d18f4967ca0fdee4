// Helpers for tests that build packages and run them: with `npuforge build` / `npuforge
// run` as a user would, or in-process (build from a manifest string, then open the package
// the way `npuforge run` does to read the logits the CLI does not print).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/cli_support.h"
#include "manifest/manifest.h"
#include "pipeline/pipeline.h"
#include "registry/registry.h"
#include "runner/generate.h"
#include "runner/runner.h"
#include "runner/static_runner.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "support/plugins.h"

namespace nf::test {

namespace fs = std::filesystem;

// The split transform is another folder's work: chains with it run once it is in the tree.
inline bool split_available() {
  return fs::exists(fs::path(NPUFORGE_SOURCE_DIR) / "plugins" / "transforms" / "split") && plugin_built("split");
}

// A fresh directory under /tmp for one test; removed by the destructor.
struct WorkDir {
  fs::path path;
  explicit WorkDir(std::string tag) {
    std::replace(tag.begin(), tag.end(), '/', '_');  // "zoo/phi3" is one folder
    path = fs::temp_directory_path() / ("nf_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~WorkDir() { fs::remove_all(path); }
};

// Writes a manifest for tests/models/<model> with `stages` (TOML [[quant]] / [[transform]]
// tables) and a cpu target, builds it, and returns the package directory. Fails the test
// with the CLI's stderr when the build fails.
inline fs::path build_package(const fs::path& work, const std::string& model, const std::string& stages) {
  fs::path m = fs::path(test::model_dir(model));
  std::string toml = "[model]\nonnx = \"" + (m / "model.onnx").string() + "\"\nconfig = \"" + (m / "config.json").string() +
                     "\"\n\n" + stages + "\n[targets.cpu]\nbackend = \"cpu\"\nthreads = 1\n";
  fs::create_directories(work);
  fs::path manifest = work / "manifest.toml";
  std::ofstream(manifest) << toml;
  auto r = test::npuforge({"build", manifest.string(), "--out", (work / "out").string(), "--no-cache"});
  EXPECT_EQ(r.exit_code, 0) << "npuforge build failed:\n" << r.err << "\nmanifest:\n" << toml;
  // With mha2sha every attention of a test model is split per head, none left behind.
  EXPECT_EQ(r.err.find("left multi-head"), std::string::npos) << r.err;
  return work / "out" / "cpu";
}

// Greedy tokens from `npuforge run PACKAGE --prompt-ids ... --json` (with `--decoder` when given).
inline std::vector<int32_t> cli_greedy(const fs::path& package, const std::vector<int32_t>& prompt, size_t n,
                                       const std::string& decoder = "") {
  nlohmann::json ids = prompt;
  std::vector<std::string> args{"run", package.string(), "--prompt-ids", test::join_ids(ids), "--max-new-tokens",
                                std::to_string(n), "--json"};
  if (!decoder.empty()) args.insert(args.end(), {"--decoder", decoder});
  auto r = test::npuforge(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.out).at("tokens").get<std::vector<int32_t>>();
}

struct OpenPackage {
  host::Registry registry;  // its own, so that a manifest's plugin search loads each library once
  fs::path dir;
  host::Package pkg;
  std::unique_ptr<host::BackendSession> session;
  std::unique_ptr<host::Runner> runner;
};

namespace detail {
inline void open_runner(OpenPackage& p, const fs::path& dir) {
  p.dir = dir;
  p.pkg = host::open_package(dir);
  const host::PluginInfo* backend = p.registry.find(NF_KIND_BACKEND, p.pkg.backend());
  if (!backend) throw std::runtime_error("backend " + p.pkg.backend() + " is not built");
  p.session = host::BackendSession::open_artifacts(*backend, p.pkg.backend_options(), p.pkg.artifacts().string());
  p.runner = host::make_runner(*p.session, p.pkg.meta.at("graphs"), p.pkg.meta.value("metadata", nlohmann::json()));
}
}  // namespace detail

inline std::unique_ptr<OpenPackage> open_package(const fs::path& dir) {
  auto p = std::make_unique<OpenPackage>();
  p->registry.load_directories({plugin_dir().string()});
  detail::open_runner(*p, dir);
  return p;
}

// Builds the manifest `toml` in-process (no stage cache) into work/out and opens its first
// package. Throws on the first validation or build error.
inline std::unique_ptr<OpenPackage> build_and_open(const fs::path& work, const std::string& toml) {
  fs::create_directories(work);
  auto m = manifest::parse_manifest_string(toml, (work / "manifest.toml").string());
  auto p = std::make_unique<OpenPackage>();
  auto errors = host::load_and_validate(m, p->registry);
  if (!errors.empty()) throw std::runtime_error(errors[0]);
  host::BuildRequest req;
  req.out_dir = work / "out";
  req.use_cache = false;
  req.cache_root = work / "cache";
  detail::open_runner(*p, host::build(m, p->registry, req).packages.at(0));
  return p;
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> last_logits;  // the logits the last token was chosen from
};

// Golden.json's procedure: prefill the prompt, then one token per step.
inline Greedy greedy(host::Runner& r, const std::vector<int32_t>& prompt, size_t n) {
  Greedy g;
  g.last_logits = r.append(prompt);
  for (size_t i = 0; i < n; ++i) {
    g.tokens.push_back(host::argmax(g.last_logits));
    if (i + 1 < n) g.last_logits = r.append({&g.tokens.back(), 1});
  }
  return g;
}

// max |got - want| / max |want|.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return got.size() == want.size() ? worst / scale : INFINITY;
}

// Builds `model` with `stages`, then checks the package against golden.json: the CLI's
// greedy tokens token for token, and the last logits within 1e-4 of the largest |logit|.
inline void expect_golden_package(const std::string& model, const std::string& stages, const std::string& tag) {
  if (!fs::exists(test::model_dir(model) + "/model.onnx")) GTEST_SKIP() << model << " has no model.onnx";
  WorkDir work(tag + "_" + model);
  fs::path pkg = build_package(work.path, model, stages);
  if (::testing::Test::HasFailure()) return;
  nlohmann::json g = test::golden(model);
  auto prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  auto want = g.at("generated_ids").get<std::vector<int32_t>>();
  EXPECT_EQ(cli_greedy(pkg, prompt, want.size()), want) << "npuforge run on the " << tag << " package";
  auto open = open_package(pkg);
  Greedy got = greedy(*open->runner, prompt, want.size());
  EXPECT_EQ(got.tokens, want);
  double err = relative_error(got.last_logits, g.at("last_logits").get<std::vector<float>>());
  EXPECT_LT(err, 1e-4);
  std::printf("%s %s: %zu greedy tokens, last logits max error %.3g of the largest |logit|\n", model.c_str(), tag.c_str(),
              got.tokens.size(), err);
}

}  // namespace nf::test
