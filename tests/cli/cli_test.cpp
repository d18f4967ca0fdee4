// The CLI as a user runs it: golden greedy output, clear one-line errors, builds that are
// whole or absent, corrupted packages refused.
#include <gtest/gtest.h>

#include <map>

#include <signal.h>
#include <spawn.h>

#include <chrono>
#include <set>
#include <thread>

#include "cli_support.h"

using namespace nf::test;
namespace fs = std::filesystem;

extern char** environ;

namespace {

const char* kModels[] = {"llama_gqa", "qwen2", "mixtral_moe", "mistral_swa", "tiny_llama"};

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("nf_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A manifest over a test model with a cpu target; `extra` is appended verbatim.
fs::path write_manifest(const fs::path& dir, const std::string& model, const std::string& extra) {
  std::ofstream(dir / "manifest.toml") << "[model]\nonnx = \"" << model_dir(model) << "/model.onnx\"\n"
                                       << "[targets.cpu]\nbackend = \"cpu\"\n"
                                       << extra;
  return dir / "manifest.toml";
}

}  // namespace

class RunGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(RunGolden, GreedyTokensEqualTorch) {
  auto g = golden(GetParam());
  auto r = npuforge({"run", model_dir(GetParam()) + "/model.onnx", "--prompt-ids", join_ids(g["prompt_ids"]),
                     "--max-new-tokens", std::to_string(g["generated_ids"].size()), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], g["generated_ids"]);
  EXPECT_EQ(j["stats"]["forward_passes"], g["generated_ids"].size());
  EXPECT_GT(j["stats"]["decode_tokens_per_s"].get<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Models, RunGolden, ::testing::ValuesIn(kModels));

// Exports in forms read on load, run as bare models: optimum's merged decoder, model-local
// functions, no position_ids, ONNX Runtime GenAI's fp32 / int4 (MatMulNBits dequantized, with
// and without zero points, packed or float) / tied / DirectML (RotaryEmbedding) / ChatGLM
// (interleaved rotary) exports, a torch export at opset 23 (Attention, RotaryEmbedding,
// RMSNormalization). The bare-model run read only 16-bit
// floats before (the int4 one failed).
const char* kExportForms[] = {"legacy/llama3_merged",      "legacy/llama3_functions",  "zoo/llama3_cache_positions",
                              "legacy/llama3_genai",       "legacy/llama3_genai_int4", "legacy/qwen2_genai_tied",
                              "legacy/mistral_swa_genai",  // GQA's local window in the expanded mask
                              "legacy/qwen3_genai",        "legacy/gemma3_genai",      "legacy/phi3_genai_longrope",
                              "legacy/qwen2_genai_int4_shared", "legacy/llama3_q4",   "legacy/phi4_mini_genai",
                              "legacy/llama3_genai_fp16",        "legacy/llama3_genai_int4_fp16",
                              "legacy/llama3_genai_int4_zero_points", "legacy/llama3_genai_int4_float_zero_points",
                              "legacy/llama3_genai_dml",         "legacy/glm_genai",
                              "legacy/llama3_opset23"};
INSTANTIATE_TEST_SUITE_P(ExportForms, RunGolden, ::testing::ValuesIn(kExportForms));

// ONNX Runtime GenAI's LongRoPE tables, chosen by If(total length > 256): a 300-token prompt
// runs the long ones. The bare model gives ONNX Runtime's tokens (golden.json's long_prompt;
// with the short tables' frequencies they part from the 12th).
TEST(Run, LongRopeTablesPastTheOriginalLength) {
  const nlohmann::json g = golden("legacy/phi3_genai_longrope").at("long_prompt");
  auto r = npuforge({"run", model_dir("legacy/phi3_genai_longrope") + "/model.onnx", "--prompt-ids",
                     join_ids(g["prompt_ids"]), "--max-new-tokens", std::to_string(g["generated_ids"].size()), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], g["generated_ids"]);
}

// Static packages whose context passes that switch (CL 512 > 256): each row reads its tables by
// the sequence's length (arcl's sequence_lengths), so a 300-token prompt cut into 64-row
// passes runs the long tables as ONNX Runtime does on the whole prompt, a 250-token prompt's
// decode changes tables at token 257 as ONNX Runtime's does, and lade's tree passes across it
// keep plain greedy's tokens; cpu and htp alike (golden.json's long_prompt and switch_in_decode
// are ONNX Runtime's).
TEST(Build, StaticLongRopePastTheOriginalLength) {
  const fs::path dir = fresh_dir("longrope_static");
  const std::string arcl = "[[transform]]\nplugin = \"arcl\"\narn = [1, 16, 64]\ncontext_length = 512\n";
  auto manifest = write_manifest(dir, "legacy/phi3_genai_longrope", arcl + "[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n");
  auto b = npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const fs::path lade = dir / "lade";
  fs::create_directories(lade);
  manifest = write_manifest(lade, "legacy/phi3_genai_longrope", arcl + "[speculative]\ndecoder = \"lade\"\n");
  b = npuforge({"build", manifest.string(), "--out", (lade / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const nlohmann::json g = golden("legacy/phi3_genai_longrope");
  for (const fs::path& pkg : {dir / "out" / "cpu", dir / "out" / "htp", lade / "out" / "cpu"})
    for (const nlohmann::json& want : {g, g.at("long_prompt"), g.at("switch_in_decode")}) {
      auto r = npuforge({"run", pkg.string(), "--prompt-ids", join_ids(want["prompt_ids"]), "--max-new-tokens",
                         std::to_string(want["generated_ids"].size()), "--json"});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], want["generated_ids"]) << pkg << ", " << want["prompt_ids"].size()
                                                                              << "-token prompt";
    }
  fs::remove_all(dir);
}

// config.json's eos_token_id ends generation beside the tokenizer's own end tokens: a model
// whose end-of-turn token no tokenizer list names (Command R, EXAONE) stops there. A config
// whose eos_token_id is not a token id is one error line.
TEST(Run, StopsAtConfigEosTokens) {
  const fs::path dir = fresh_dir("config_eos");
  for (const char* f : {"model.onnx", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(model_dir("tiny_llama") + "/" + f, dir / f);
  auto g = golden("tiny_llama");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(model_dir("tiny_llama") + "/config.json"));
  const std::vector<int32_t> want = {g["generated_ids"][0], g["generated_ids"][1], g["generated_ids"][2]};
  config["eos_token_id"] = {2047, want[2]};
  std::ofstream(dir / "config.json") << config.dump(1);
  const std::vector<std::string> run{"run", (dir / "model.onnx").string(), "--prompt-ids", join_ids(g["prompt_ids"]),
                                     "--max-new-tokens", "8", "--json"};
  auto r = npuforge(run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(j["stop"], "eos");
  config["eos_token_id"] = "</s>";
  std::ofstream(dir / "config.json") << config.dump(1);
  r = npuforge(run);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("eos_token_id must be a token id or a list of them"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Run, SeededSamplingIsReproducible) {
  std::vector<std::string> args{"run", model_dir("llama_gqa") + "/model.onnx", "--prompt-ids", "1,2,3",
                                "--max-new-tokens", "12", "--temperature", "1.0", "--top-k", "50",
                                "--top-p", "0.95", "--json", "--seed"};
  auto a = npuforge([&] { auto v = args; v.push_back("7"); return v; }());
  auto b = npuforge([&] { auto v = args; v.push_back("7"); return v; }());
  auto c = npuforge([&] { auto v = args; v.push_back("8"); return v; }());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto ta = nlohmann::json::parse(a.out)["tokens"];
  EXPECT_EQ(ta, nlohmann::json::parse(b.out)["tokens"]);
  EXPECT_NE(ta, nlohmann::json::parse(c.out)["tokens"]);
}

// Each user error: non-zero exit, exactly one line on stderr naming the problem.
struct BadRun {
  std::string name;
  std::vector<std::string> args;
  std::string expect;
};

void PrintTo(const BadRun& b, std::ostream* os) { *os << b.name; }

class RunErrors : public ::testing::TestWithParam<BadRun> {};

TEST_P(RunErrors, OneClearLine) {
  auto r = npuforge(GetParam().args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().expect), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RunErrors,
    ::testing::Values(
        BadRun{"BadPromptId", {"run", model_dir("llama_gqa") + "/model.onnx", "--prompt-ids", "1,x,3"},
               "bad prompt id 'x'"},
        BadRun{"PromptIdOutOfRange", {"run", model_dir("llama_gqa") + "/model.onnx", "--prompt-ids", "1,99999"},
               "out of range"},
        BadRun{"EmptyPrompt", {"run", model_dir("llama_gqa") + "/model.onnx", "--prompt-ids", ""}, "bad prompt id ''"},
        BadRun{"NoPrompt", {"run", model_dir("llama_gqa") + "/model.onnx"}, "--prompt"},
        BadRun{"ProfileIsADirectory",
               {"run", model_dir("llama_gqa") + "/model.onnx", "--prompt-ids", "1", "--profile", model_dir("llama_gqa")},
               "is a directory"},
        BadRun{"TextPromptWithoutTokenizer", {"run", model_dir("llama_gqa") + "/model.onnx", "--prompt", "hello"},
               "no tokenizer.json"},
        BadRun{"UnsupportedOperator", {"run", source_dir() + "/tests/cli/data/unsupported_op.onnx", "--prompt-ids", "1,2"},
               "Hardmax"},
        BadRun{"MissingModel", {"run", "/nonexistent/model.onnx", "--prompt-ids", "1"}, "no such model"},
        BadRun{"InspectNotOnnx", {"inspect", source_dir() + "/README.md"}, "README.md"}),
    [](const ::testing::TestParamInfo<BadRun>& info) { return info.param.name; });

// optimum's merged decoder (one If on use_cache_branch): inspect shows it as a build reads
// it, its branch with the KV cache.
TEST(Inspect, MergedDecoderAsABuildReadsIt) {
  auto r = npuforge({"inspect", model_dir("legacy/llama3_merged") + "/model.onnx", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto info = nlohmann::json::parse(r.out);
  EXPECT_EQ(info.value("heads", -1), 4);
  EXPECT_EQ(info.value("layers", -1), 3);
  EXPECT_GT(info.value("nodes", 0), 1);
}

TEST(Build, PackageRunsAndReproducesGolden) {
  fs::path dir = fresh_dir("build");
  auto manifest = write_manifest(dir, "qwen2", "");
  auto b = npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--cache-dir", (dir / "cache").string()});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  fs::path pkg = dir / "out" / "cpu";
  ASSERT_TRUE(fs::is_regular_file(pkg / "package.json"));
  ASSERT_TRUE(fs::is_regular_file(pkg / "build_report.json"));
  auto meta = nlohmann::json::parse(slurp(pkg / "package.json"));
  EXPECT_EQ(meta["backend"]["name"], "cpu");
  EXPECT_EQ(meta["graphs"].size(), 1u);
  EXPECT_FALSE(meta["files"].empty());
  // The dynamic-layout package carries the head on the last row alone, for prefills.
  bool last_row = false;
  for (const auto& o : meta["graphs"][0]["outputs"]) last_row |= o["name"] == "logits.last_row";
  EXPECT_TRUE(last_row) << meta["graphs"][0]["outputs"].dump();

  auto g = golden("qwen2");
  auto r = npuforge({"run", pkg.string(), "--prompt-ids", join_ids(g["prompt_ids"]), "--max-new-tokens",
                     std::to_string(g["generated_ids"].size()), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], g["generated_ids"]);
  fs::remove_all(dir);
}

TEST(Build, CorruptedPackageIsRefused) {
  fs::path dir = fresh_dir("corrupt");
  auto manifest = write_manifest(dir, "llama_gqa", "");
  ASSERT_EQ(npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache"}).exit_code, 0);
  fs::path pkg = dir / "out" / "cpu";
  // Flip one byte of the largest artifact file.
  fs::path victim;
  for (const auto& e : fs::recursive_directory_iterator(pkg / "artifacts"))
    if (e.is_regular_file() && (victim.empty() || e.file_size() > fs::file_size(victim))) victim = e.path();
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  auto r = npuforge({"run", pkg.string(), "--prompt-ids", "1,2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("corrupt package"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Build, StageCacheReplaysUnchangedStages) {
  fs::path dir = fresh_dir("cache");
  auto manifest = write_manifest(dir, "llama_gqa",
                                 "[[transform]]\nplugin = \"slow_identity\"\nsteps = 3\n"
                                 "[plugins]\npaths = [\"" + test_plugins() + "\"]\n");
  std::vector<std::string> args{"build", manifest.string(), "--out", (dir / "out").string(), "--cache-dir",
                                (dir / "cache").string()};
  auto first = npuforge(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second = npuforge(args);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto report = nlohmann::json::parse(slurp(dir / "out" / "cpu" / "build_report.json"));
  EXPECT_EQ(report["stages"][0]["name"], "slow_identity");
  EXPECT_TRUE(report["stages"][0]["cached"].get<bool>());
  fs::remove_all(dir);
}

TEST(Build, InterruptedBuildLeavesNoPackage) {
  fs::path dir = fresh_dir("cancel");
  auto manifest = write_manifest(dir, "llama_gqa",
                                 "[[transform]]\nplugin = \"slow_identity\"\nsteps = 2000\n"
                                 "[plugins]\npaths = [\"" + test_plugins() + "\"]\n");
  std::string bin = binary(), m = manifest.string(), out = (dir / "out").string();
  std::vector<char*> argv{bin.data(), const_cast<char*>("build"), m.data(), const_cast<char*>("--out"), out.data(),
                          const_cast<char*>("--no-cache"), const_cast<char*>("-q"), nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  // Nothing at all under out/: no package, no partial directory.
  size_t entries = 0;
  if (fs::exists(out))
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(out)) ++entries;
  EXPECT_EQ(entries, 0u);
  fs::remove_all(dir);
}

// A build whose estimated peak memory exceeds what the machine has is refused before any
// stage runs, with both numbers on one line; --skip-resource-check builds anyway.
TEST(Build, RefusesWhatDoesNotFitBeforeAnyStage) {
  fs::path dir = fresh_dir("resources");
  auto manifest = write_manifest(dir, "llama_gqa", "");
  std::vector<std::string> args{"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache", "-q"};
  ::setenv("NPUFORGE_MEMORY_AVAILABLE", "1000", 1);
  auto refused = npuforge(args);
  args.push_back("--skip-resource-check");
  auto forced = npuforge(args);
  ::unsetenv("NPUFORGE_MEMORY_AVAILABLE");
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_EQ(line_count(refused.err), 1) << refused.err;
  EXPECT_EQ(refused.err.rfind("npuforge: error: this build needs ~", 0), 0u) << refused.err;
  EXPECT_NE(refused.err.find("has 0 MB available"), std::string::npos) << refused.err;
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_TRUE(fs::is_regular_file(dir / "out" / "cpu" / "package.json"));
  fs::remove_all(dir);
}

// A stage cache that would fill the disk is not written: the build warns once and makes
// the same package without it (llama_gqa + arcl: the packages need ~1 MB, the cache ~1 MB
// more, so 1.5 MB free holds the packages alone).
TEST(Build, SkipsACacheThatWouldFillTheDisk) {
  fs::path dir = fresh_dir("cache_disk");
  auto manifest = write_manifest(dir, "llama_gqa", "[[transform]]\nplugin = \"arcl\"\narn = [1, 8]\ncontext_length = [64]\n");
  auto build = [&](const std::string& out) {
    return npuforge({"build", manifest.string(), "--out", (dir / out).string(), "--cache-dir", (dir / "cache").string()});
  };
  ::setenv("NPUFORGE_DISK_FREE", "1500000", 1);
  auto tight = build("tight");
  ::unsetenv("NPUFORGE_DISK_FREE");
  ASSERT_EQ(tight.exit_code, 0) << tight.err;
  EXPECT_NE(tight.err.find("the stage cache would need ~"), std::string::npos) << tight.err;
  EXPECT_NE(tight.err.find("building without it"), std::string::npos) << tight.err;
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(dir / "cache" / "stages", ec) || !fs::exists(dir / "cache" / "stages"));
  EXPECT_TRUE(fs::is_empty(dir / "cache" / "compiles", ec) || !fs::exists(dir / "cache" / "compiles"));

  auto roomy = build("roomy");  // the machine's own free space: the cache is written
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_EQ(roomy.err.find("building without it"), std::string::npos) << roomy.err;
  EXPECT_FALSE(fs::is_empty(dir / "cache" / "stages"));
  auto files = [&](const std::string& out) {  // the sealed files but the report (timings)
    auto f = nlohmann::json::parse(std::ifstream(dir / out / "cpu" / "package.json"))["files"];
    f.erase("build_report.json");
    return f;
  };
  EXPECT_EQ(files("tight"), files("roomy"));
  fs::remove_all(dir);
}

// Every manifest under examples/ passes `npuforge check`: those that name the bundled
// model in place, full.toml (a user's Llama-3.2-1B) in a folder laid out as it expects,
// with the tiny model standing in. A new example must be added here.
TEST(Check, EveryExampleManifestValidates) {
  const fs::path examples = fs::path(source_dir()) / "examples";
  const std::set<std::string> in_place = {"manifests/minimal-cpu.toml", "manifests/multi_target.toml",
                                          "tiny_llama/manifest.toml"};
  for (const auto& e : fs::recursive_directory_iterator(examples)) {
    if (e.path().extension() != ".toml") continue;
    const std::string rel = fs::relative(e.path(), examples).generic_string();
    if (rel == "manifests/full.toml") continue;
    EXPECT_TRUE(in_place.count(rel)) << rel << " is not checked by this test";
  }
  for (const auto& rel : in_place) {
    auto r = npuforge({"check", (examples / rel).string()});
    EXPECT_EQ(r.exit_code, 0) << rel << ": " << r.err;
  }
  fs::path dir = fresh_dir("example_full");
  fs::create_directories(dir / "llama-3.2-1b");
  fs::create_directories(dir / "data");
  for (const char* f : {"model.onnx", "config.json", "tokenizer.json"})
    fs::copy_file(model_dir("tiny_llama") + "/" + f, dir / "llama-3.2-1b" / f);
  fs::copy_file(model_dir("tiny_llama") + "/heldout.txt", dir / "data" / "calibration.txt");
  fs::copy_file(examples / "manifests" / "full.toml", dir / "full.toml");
  auto r = npuforge({"check", (dir / "full.toml").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::remove_all(dir);
}

TEST(Check, ManifestErrorsNameFileLineAndColumn) {
  fs::path dir = fresh_dir("check");
  auto manifest = write_manifest(dir, "llama_gqa",
                                 "[[transform]]\nplugin = \"slow_identity\"\nstep = 3\n"
                                 "[plugins]\npaths = [\"" + test_plugins() + "\"]\n");
  auto r = npuforge({"check", manifest.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("manifest.toml:7:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'steps'"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// Asset options (schema "format": "asset", here the decoders' trained files) are checked
// like the manifest's own paths: a written value against the manifest's folder, a default
// against the model's; check and build stop on the same one line, before any stage.
TEST(Check, MissingAssetsNameFileLineAndColumn) {
  fs::path dir = fresh_dir("check_assets");
  auto manifest = write_manifest(dir, "llama_gqa", "[speculative]\ndecoder = \"ssd\"\n");  // no ssd/ beside it
  auto r = npuforge({"check", manifest.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(manifest.string() + ":6:1: speculative 'ssd' needs its asset 'assets': '" + model_dir("llama_gqa") +
                       "/ssd' does not exist (the default, in the model's folder; set assets = PATH)"),
            std::string::npos)
      << r.err;

  manifest = write_manifest(dir, "tiny_llama", "[speculative]\ndecoder = \"eaglet\"\ndraft = \"no_draft\"\n");
  const std::string want = manifest.string() + ":7:1: speculative 'eaglet' needs its asset 'draft': '" +
                           (dir / "no_draft").string() + "' does not exist";
  r = npuforge({"check", manifest.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  r = npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "cpu"));

  // tiny_llama ships both decoders' assets beside its model: the defaults resolve there.
  for (const char* decoder : {"ssd", "eaglet"}) {
    manifest = write_manifest(dir, "tiny_llama", std::string("[speculative]\ndecoder = \"") + decoder + "\"\n");
    r = npuforge({"check", manifest.string()});
    EXPECT_EQ(r.exit_code, 0) << decoder << ": " << r.err;
  }
  fs::remove_all(dir);
}

// A decoder's asset option left at its default resolves beside the model (not beside the
// manifest) for every use the build makes of it: the extra embeddings join the graphs and
// the folder is copied into the package, so the package runs ssd on its own.
TEST(Build, DecoderAssetsDefaultBesideTheModel) {
  fs::path dir = fresh_dir("default_assets");
  auto manifest = write_manifest(dir, "tiny_llama", "[speculative]\ndecoder = \"ssd\"\n");
  auto b = npuforge({"build", manifest.string(), "--out", (dir / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto meta = nlohmann::json::parse(slurp(dir / "out" / "cpu" / "package.json"));
  EXPECT_EQ(meta["metadata"]["extra_embeddings"]["rows"], 4) << meta["metadata"].dump();
  EXPECT_EQ(meta["speculative"]["options"]["assets"], "assets/ssd/ssd");
  EXPECT_TRUE(fs::is_regular_file(dir / "out" / "cpu" / "assets" / "ssd" / "ssd" / "assets.json"));
  std::vector<std::string> run{"run", (dir / "out" / "cpu").string(), "--prompt-ids", "1005,291,260",
                               "--max-new-tokens", "12", "--json"};
  auto with = npuforge(run);
  run.insert(run.end(), {"--decoder", "none"});
  auto plain = npuforge(run);
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto wj = nlohmann::json::parse(with.out), pj = nlohmann::json::parse(plain.out);
  EXPECT_EQ(wj["tokens"], pj["tokens"]);
  EXPECT_TRUE(wj["stats"].contains("speculative")) << with.out;
  fs::remove_all(dir);
}

TEST(Plugins, ListsEveryOptionWithTypeAndDefault) {
  auto r = npuforge({"plugins", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  bool cpu = false;
  for (const auto& p : j["plugins"])
    if (p["name"] == "cpu" && p["kind"] == "backend") {
      cpu = true;
      EXPECT_FALSE(p["options"].empty());
      for (const auto& o : p["options"]) {
        EXPECT_FALSE(o["type"].get<std::string>().empty());
        // A default is the schema's JSON value (threads: the integer 0), not its text.
        if (o["name"] == "threads") {
          EXPECT_EQ(o["default"], 0);
        }
      }
    }
  EXPECT_TRUE(cpu);
}

// `plugins NAME` for a plugin the registry refused says why, in one line.
TEST(Plugins, NameOfARefusedPluginSaysWhy) {
  const std::string cases = std::string(NPUFORGE_BINARY_DIR) + "/tests/registry/plugins/";
  setenv("NPUFORGE_PLUGIN_PATH", (cases + "schema_typo:" + cases + "abi_too_new").c_str(), 1);
  auto typo = npuforge({"plugins", "bad_schema"});
  auto library = npuforge({"plugins", "nf_test_plugin_abi_too_new"});
  auto other = npuforge({"plugins", "no_such_plugin"});
  setenv("NPUFORGE_PLUGIN_PATH", "", 1);
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_EQ(line_count(typo.err), 1) << typo.err;
  EXPECT_NE(typo.err.find("npuforge: error: plugin 'bad_schema' was refused: " + cases +
                          "schema_typo/libnf_test_plugin_schema_typo.so: transform 'bad_schema': options schema: "
                          "unknown keyword 'maximun' at /properties/steps; did you mean 'maximum'?"),
            std::string::npos)
      << typo.err;
  EXPECT_EQ(line_count(library.err), 1) << library.err;
  EXPECT_NE(library.err.find("was refused: " + cases + "abi_too_new/libnf_test_plugin_abi_too_new.so: plugin ABI 2 "
                             "is too new (this host supports 1..1); update npuforge"),
            std::string::npos)
      << library.err;
  EXPECT_NE(other.err.find("no plugin named 'no_such_plugin' is installed (2 refused: `npuforge plugins` lists why)"),
            std::string::npos)
      << other.err;
}

// The trained model with its tokenizer: text in, text out, streaming and --json agree.
TEST(Run, TextPromptThroughTheTokenizer) {
  auto g = golden("tiny_llama");
  std::string model = model_dir("tiny_llama") + "/model.onnx";
  auto j = npuforge({"run", model, "--prompt", g["prompt_text"], "--max-new-tokens",
                     std::to_string(g["generated_ids"].size()), "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  auto out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out["tokens"], g["generated_ids"]);
  EXPECT_EQ(out["text"], g["generated_text"]);
  auto streamed = npuforge({"run", model, "--prompt", g["prompt_text"], "--max-new-tokens",
                            std::to_string(g["generated_ids"].size())});
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, g["generated_text"].get<std::string>() + "\n");
}

// --profile: every node's time per pass size; the prompt's pass runs the LM head on its last
// row only (logits.last_row) and skips the full head, the decode steps the other way round.
TEST(Run, ProfileTimesEachNodeAndThePrefillRunsTheHeadOnOneRow) {
  fs::path dir = fresh_dir("profile");
  const fs::path file = dir / "profile.json";
  auto r = npuforge({"run", model_dir("tiny_llama") + "/model.onnx", "--prompt-ids", "1,17,42,5", "--max-new-tokens", "3",
                     "--profile", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("profile ("), std::string::npos) << r.err;
  auto j = nlohmann::json::parse(slurp(file));
  EXPECT_EQ(j["format"], "npuforge-profile");
  ASSERT_FALSE(j["ops"].empty());
  EXPECT_GT(j["ms"].get<double>(), 0.0);
  std::map<int64_t, nlohmann::json> by_rows;
  for (const auto& p : j["passes"]) by_rows[p["rows"].get<int64_t>()] = p;
  ASSERT_EQ(by_rows.size(), 2u) << j["passes"].dump().substr(0, 400);
  EXPECT_EQ(by_rows[4]["runs"], 1);
  EXPECT_EQ(by_rows[1]["runs"], 2);
  auto calls = [&](int64_t rows, bool branch) {
    int64_t n = -1;
    for (const auto& node : by_rows[rows]["nodes"]) {
      const std::string name = node["node"];
      if (node["op"] == "MatMul" && name.find("lm_head") != std::string::npos &&
          (name.rfind("logits.last_row/", 0) == 0) == branch)
        n = node["calls"];
    }
    return n;
  };
  EXPECT_EQ(calls(4, true), 1);
  EXPECT_EQ(calls(4, false), 0);
  EXPECT_EQ(calls(1, true), 0);
  EXPECT_EQ(calls(1, false), 2);
  fs::remove_all(dir);
}

// eval scores every row: its passes run the full head and never the last-row branch.
// A profile that cannot be written costs the run nothing but a line saying so.
TEST(Run, UnwritableProfileIsReportedAndTheRunStillSucceeds) {
  auto r = npuforge({"run", model_dir("tiny_llama") + "/model.onnx", "--prompt-ids", "1,2", "--max-new-tokens", "2",
                     "--json", "--profile", "/nonexistent_npuforge_dir/profile.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 2u);
  EXPECT_NE(r.err.find("cannot write the profile"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("profile: the backend wrote none"), std::string::npos) << r.err;
}

TEST(Eval, ProfileShowsEveryRowThroughTheFullHead) {
  fs::path dir = fresh_dir("eval_profile");
  const fs::path file = dir / "profile.json";
  auto r = npuforge({"eval", model_dir("tiny_llama") + "/model.onnx", "--text", model_dir("tiny_llama") + "/heldout.txt",
                     "--window", "64", "--json", "--profile", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(slurp(file));
  ASSERT_EQ(j["passes"].size(), 1u) << j["passes"].dump().substr(0, 300);
  const auto& pass = j["passes"][0];
  EXPECT_EQ(pass["rows"], 64);
  int64_t full = -1, branch = -1;
  for (const auto& node : pass["nodes"]) {
    const std::string name = node["node"];
    if (node["op"] != "MatMul" || name.find("lm_head") == std::string::npos) continue;
    (name.rfind("logits.last_row/", 0) == 0 ? branch : full) = node["calls"];
  }
  EXPECT_EQ(full, pass["runs"]);
  EXPECT_EQ(branch, 0);
  fs::remove_all(dir);
}

TEST(Eval, ReportsPerplexityAsJson) {
  auto r = npuforge({"eval", model_dir("tiny_llama") + "/model.onnx", "--text", model_dir("tiny_llama") + "/heldout.txt",
                     "--window", "64", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["perplexity"].get<double>(), 1.0);
  EXPECT_LT(j["perplexity"].get<double>(), 709.0);  // below the unigram baseline in eval.json
  EXPECT_EQ(j["window"], 64);
}
