// arcl + split as a user runs them: `npuforge build` on a manifest, `npuforge run` on the
// package reproduces the golden greedy tokens; package.json lists the parts; a bad split
// option is one clear line and a non-zero exit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include "../cli/cli_support.h"

using namespace nf::test;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("nf_split_cli_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

fs::path write_manifest(const fs::path& dir, const std::string& model, const std::string& arcl,
                        const std::string& split) {
  fs::path m = dir / "manifest.toml";
  std::ofstream(m) << "[model]\nonnx = \"" << model_dir(model) << "/model.onnx\"\n\n"
                   << "[[transform]]\nplugin = \"arcl\"\n" << arcl << "\n\n"
                   << "[[transform]]\nplugin = \"split\"\n" << split << "\n\n"
                   << "[targets.cpu]\nbackend = \"cpu\"\n";
  return m;
}

struct CliCase {
  std::string name, model, arcl, split;
  int64_t parts;
};

std::ostream& operator<<(std::ostream& os, const CliCase& c) { return os << c.name; }

const std::string kArcl = "arn = [1, 4]\ncontext_length = 32";

class SplitCli : public ::testing::TestWithParam<CliCase> {};

TEST_P(SplitCli, BuildThenRunEqualsGolden) {
  const CliCase& c = GetParam();
  if (!fs::exists(model_dir(c.model) + "/model.onnx")) GTEST_SKIP();
  fs::path dir = fresh_dir(c.name);
  fs::path manifest = write_manifest(dir, c.model, c.arcl, c.split);
  auto b = npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  fs::path pkg = dir / "out" / "cpu";

  auto meta = nlohmann::json::parse(slurp(pkg / "package.json"));
  std::set<std::string> graphs;
  for (const auto& g : meta.at("graphs")) graphs.insert(g.at("name"));
  const auto& io = meta.at("metadata").at("io");
  EXPECT_EQ(io.at("split").at("num_splits"), c.parts);
  for (const auto& v : io.at("variants"))
    for (int64_t i = 1; i <= c.parts; ++i)
      EXPECT_TRUE(graphs.count(v.at("graph").get<std::string>() + "_" + std::to_string(i) + "_of_" +
                               std::to_string(c.parts)));
  EXPECT_EQ(graphs.size(), io.at("variants").size() * static_cast<size_t>(c.parts));

  // inspect lists each variant's parts with their layers and what they hand on.
  auto ins = npuforge({"inspect", pkg.string()});
  ASSERT_EQ(ins.exit_code, 0) << ins.err;
  EXPECT_NE(ins.out.find(std::to_string(c.parts) + " parts each"), std::string::npos) << ins.out;
  EXPECT_NE(ins.out.find("_" + std::to_string(c.parts) + "_of_" + std::to_string(c.parts)), std::string::npos);
  EXPECT_NE(ins.out.find("hands on"), std::string::npos) << ins.out;

  auto g = golden(c.model);
  auto r = npuforge({"run", pkg.string(), "--prompt-ids", join_ids(g["prompt_ids"]), "--max-new-tokens",
                     std::to_string(g["generated_ids"].size()), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], g["generated_ids"]);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Models, SplitCli,
    ::testing::Values(CliCase{"llama_gqa", "llama_gqa", kArcl, "num_splits = 4", 4},
                      CliCase{"qwen2", "qwen2", kArcl, "num_splits = 4", 4},
                      CliCase{"mixtral_moe", "mixtral_moe", kArcl, "num_splits = 4", 4},
                      CliCase{"mistral_swa", "mistral_swa", kArcl, "num_splits = 4", 4},
                      CliCase{"mistral_swa_scl", "mistral_swa",
                              "arn = [1, 4]\ncontext_length = 512\nsliding_context_length = 256", "num_splits = 4", 4},
                      CliCase{"tiny_llama", "tiny_llama", kArcl, "", 3}),
    [](const auto& info) { return info.param.name; });

// A bad option fails the build with one line naming it, and leaves no package.
void expect_build_error(const std::string& tag, const std::string& split, const std::string& needle) {
  fs::path dir = fresh_dir(tag);
  fs::path manifest = write_manifest(dir, "llama_gqa", kArcl, split);
  auto b = npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache"});
  EXPECT_NE(b.exit_code, 0);
  EXPECT_NE(b.err.find(needle), std::string::npos) << b.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "cpu"));
  fs::remove_all(dir);
}

TEST(SplitCliErrors, TooManySplits) { expect_build_error("many", "num_splits = 12", "num_splits"); }
TEST(SplitCliErrors, RegexMatchesNothing) {
  expect_build_error("nomatch", "layer_boundary_name_regex = \"nothing_here\"", "matches no node");
}
TEST(SplitCliErrors, BadRegex) { expect_build_error("badre", "layer_boundary_name_regex = \"(\"", "not a valid regex"); }
TEST(SplitCliErrors, ZeroSplitsFailsValidation) { expect_build_error("zero", "num_splits = 0", "num_splits"); }

}  // namespace
