// `npuforge build --executor local|slurm --jobs N` through the real binary: a build's stages
// run as separate processes (or Slurm jobs) that hand their results on through the stage
// cache, and must make the packages a build in one process makes, byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "cli/cli_support.h"
#include "common/util.h"

namespace fs = std::filesystem;
using namespace nf;

namespace {

const std::string kTiny = test::model_dir("tiny_llama");

// tiny_llama: minmax W8A16 on 4 x 64 calibration tokens, arcl AR 1/32 x CL 256, and three
// targets: 2 chain stages and 3 compiles.
std::string manifest_text(const std::string& extra = "") {
  return "[model]\nonnx = \"" + kTiny + "/model.onnx\"\nconfig = \"" + kTiny + "/config.json\"\ntokenizer = \"" + kTiny +
         "/tokenizer.json\"\n\n[calibration]\ntext = \"" + kTiny +
         "/calibration.txt\"\nnum_samples = 4\nsequence_length = 64\n\n"
         "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\nactivation_bw = 16\n\n"
         "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [256]\n\n" +
         extra +
         "[targets.cpu]\nbackend = \"cpu\"\n\n[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n\n"
         "[targets.aries]\nbackend = \"aries\"\n";
}

fs::path write_manifest(const std::string& name, const std::string& text) {
  const fs::path dir = test::process_dir("executor") / name;
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.toml") << text;
  return dir / "manifest.toml";
}

// `npuforge build` of `manifest` into <its folder>/out with the cache <its folder>/cache.
test::CommandResult build(const fs::path& manifest, std::vector<std::string> args) {
  const fs::path dir = manifest.parent_path();
  std::vector<std::string> all{"build", manifest.string(), "--out", (dir / "out").string(), "--cache-dir",
                               (dir / "cache").string()};
  all.insert(all.end(), args.begin(), args.end());
  return test::npuforge(all);
}

// Every file of a package but the two that record timings (package.json, build_report.json),
// by relative path.
std::map<std::string, std::string> package_files(const fs::path& pkg) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(pkg)) {
    const std::string rel = fs::relative(e.path(), pkg).generic_string();
    if (e.is_regular_file() && rel != "package.json" && rel != "build_report.json") files[rel] = test::slurp(e.path());
  }
  return files;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(test::slurp(p)); }

void expect_same_package(const fs::path& a, const fs::path& b) {
  const auto fa = package_files(a), fb = package_files(b);
  ASSERT_FALSE(fa.empty());
  EXPECT_EQ(fa.size(), fb.size());
  for (const auto& [rel, bytes] : fa) {
    auto it = fb.find(rel);
    ASSERT_NE(it, fb.end()) << rel;
    EXPECT_TRUE(it->second == bytes) << rel << " differs";
  }
  const auto ma = read_json(a / "package.json"), mb = read_json(b / "package.json");
  for (const char* field : {"graphs", "metadata", "backend", "source"}) EXPECT_EQ(ma[field], mb[field]) << field;
}

void expect_same_packages(const fs::path& a, const fs::path& b) {
  for (const char* target : {"cpu", "htp", "aries"}) {
    SCOPED_TRACE(target);
    expect_same_package(a / target, b / target);
  }
}

// The build in one process every executor is compared with (made once).
const fs::path& reference_out() {
  static const fs::path out = [] {
    const fs::path m = write_manifest("reference", manifest_text());
    auto r = build(m, {"--jobs", "1", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return m.parent_path() / "out";
  }();
  return out;
}

bool slurm_cluster_up() {
  const char* conf = std::getenv("SLURM_CONF");
  return conf && *conf && std::system("sinfo -h >/dev/null 2>&1") == 0;
}

std::string crash_once_plugin() { return std::string(NF_FAULT_PLUGIN_DIR) + "/crash_once"; }

// A transform after arcl that dies the first time it runs (while the marker file exists).
std::string crash_once_stage() {
  return "[[transform]]\nplugin = \"bad_transform\"\n\n[plugins]\npaths = [\"" + crash_once_plugin() + "\"]\n\n";
}

// Builds `m` (with crash_once_stage) while a marker file tells that stage to die once; the
// marker is gone once the stage ran (the variable reaches the stage processes, and Slurm's
// jobs, through the environment).
test::CommandResult build_crashing_once(const fs::path& m, const std::vector<std::string>& args) {
  const fs::path marker = m.parent_path() / "crash-marker";
  std::ofstream(marker) << "x";
  setenv("NF_FAULT_CRASH_ONCE", marker.c_str(), 1);
  auto r = build(m, args);
  unsetenv("NF_FAULT_CRASH_ONCE");
  EXPECT_FALSE(fs::exists(marker));
  return r;
}

TEST(LocalExecutor, TwoWorkersMakeTheSamePackagesAsOneProcessAndARerunIsCached) {
  const fs::path m = write_manifest("local2", manifest_text());
  auto r = build(m, {"--jobs", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Locally a stage that could split stays one (its process uses every core) unless asked.
  EXPECT_NE(r.err.find("running 5 stage(s) on the local, 2 worker(s) executor"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("parts side by side"), std::string::npos) << r.err;
  expect_same_packages(reference_out(), m.parent_path() / "out");
  // The plan, results and logs of a finished build go.
  EXPECT_TRUE(fs::is_empty(m.parent_path() / "cache" / "builds"));

  // Again: both chain stages and the three compiles come from the cache.
  r = build(m, {"--jobs", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 of 2 stage(s) in the stage cache already"), std::string::npos) << r.err;
  for (const auto& s : read_json(m.parent_path() / "out" / "htp" / "build_report.json")["stages"])
    EXPECT_TRUE(s["cached"].get<bool>()) << s.dump();
  for (const char* target : {"cpu", "htp", "aries"})
    EXPECT_TRUE(read_json(m.parent_path() / "out" / target / "build_report.json")["compile_cached"].get<bool>()) << target;
  expect_same_packages(reference_out(), m.parent_path() / "out");
}

TEST(LocalExecutor, ACrashedStageIsStartedAgain) {
  const fs::path m = write_manifest("crash_retried", manifest_text(crash_once_stage()));
  auto r = build_crashing_once(m, {"--jobs", "2", "--retries", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stage 'transform bad_transform' failed (killed by signal"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("starting it again (attempt 2 of 2)"), std::string::npos) << r.err;
  // bad_transform changes nothing: the packages are the reference's.
  expect_same_packages(reference_out(), m.parent_path() / "out");
}

TEST(LocalExecutor, AStageThatKeepsFailingFailsTheBuildWithItsLogAndItsPlanIsKept) {
  const fs::path m = write_manifest("crash_fails", manifest_text(crash_once_stage()));
  auto r = build_crashing_once(m, {"--jobs", "2", "--shards", "2", "--retries", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string expect = "stage 'transform bad_transform' failed 1 time(s), last: killed by signal";
  ASSERT_NE(r.err.find(expect), std::string::npos) << r.err;
  // The log it names is there, and says how the stage began.
  const size_t at = r.err.find("its log: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const fs::path log = r.err.substr(at + 9, r.err.find('\n', at) - at - 9);
  EXPECT_TRUE(fs::is_regular_file(log)) << log;
  // Nothing half-made in the output folder.
  if (fs::exists(m.parent_path() / "out"))
    for (const auto& e : fs::directory_iterator(m.parent_path() / "out")) ADD_FAILURE() << "left behind: " << e.path();

  // The failed build's plan stays with its logs; once the manifest changes, a stage of it is refused.
  const fs::path plan = log.parent_path().parent_path() / "plan.json";
  ASSERT_TRUE(fs::is_regular_file(plan));
  // Each stage carries its own memory estimate (Slurm's --mem): the calibrated one needs more.
  const nlohmann::json stages = read_json(plan)["stages"];
  ASSERT_EQ(stages.size(), 8u) << stages.dump();  // minmax's 2 parts, minmax, arcl, bad_transform, 3 compiles
  for (const auto& s : stages) EXPECT_GT(s["memory"].get<uint64_t>(), 0u) << s.dump();
  EXPECT_EQ(stages[0]["id"], "quant-0-minmax-part-0");
  EXPECT_EQ(stages[2]["id"], "quant-0-minmax");
  EXPECT_EQ(stages[2]["deps"], nlohmann::json({0, 1})) << "after both parts";
  EXPECT_EQ(stages[0]["memory"], stages[2]["memory"]) << "a part asks for its stage's memory";
  EXPECT_GT(stages[2]["memory"].get<uint64_t>(), stages[3]["memory"].get<uint64_t>()) << stages.dump();
  // A stage that finished, run again, is a cache hit.
  auto again = test::npuforge({"build-stage", plan.string(), "quant-0-minmax"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(read_json(plan.parent_path() / "results" / "quant-0-minmax.json")["cached"].get<bool>());
  std::ofstream(m, std::ios::app) << "# edited\n";
  auto stale = test::npuforge({"build-stage", plan.string(), "transform-1-arcl"});
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_NE(stale.err.find("changed since the build was planned"), std::string::npos) << stale.err;
}

// htp's and aries' compiles split (nf_backend_api compile_part): each part packs a share
// of the weight containers' payloads (htp) or quantizes a share of the linear weights
// (aries), and the compile takes them instead of making them again. The targets share the
// parts asked for: 6 for three targets give each compile 2.
TEST(LocalExecutor, CompilesRunInPartsAndMakeTheSamePackages) {
  const fs::path m = write_manifest("compile_parts", manifest_text());
  auto r = build(m, {"--jobs", "2", "--shards", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("compile htp: in 2 parts side by side"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("compile aries: in 2 parts side by side"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("compile cpu: in"), std::string::npos) << "cpu compiles whole\n" << r.err;
  // minmax's 4 parts (one a calibration batch), minmax, arcl, 2 + 2 compile parts, 3 compiles
  EXPECT_NE(r.err.find("running 13 stage(s)"), std::string::npos) << r.err;
  // Every payload, every quantized weight came from the parts.
  const fs::path out = m.parent_path() / "out";
  const size_t packed = read_json(out / "htp" / "artifacts" / "htp.json")["weights"].size();
  const size_t quantized = read_json(out / "aries" / "artifacts" / "aries.json")["linears"].size();
  ASSERT_GT(packed, 10u);
  ASSERT_GT(quantized, 10u);
  for (const auto& [target, steps] : {std::pair{"htp", packed}, std::pair{"aries", quantized}})
    EXPECT_TRUE(std::regex_search(r.err, std::regex(std::string("compile ") + target +
                                                    R"(: finished in [0-9.]+s \(\d+ of 13\); )" + std::to_string(steps) +
                                                    R"( step\(s\) from its parts)")))
        << target << "\n" << r.err;
  expect_same_packages(reference_out(), out);

  // Again: the compiles are cached, so no parts are planned.
  r = build(m, {"--jobs", "2", "--shards", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("parts side by side"), std::string::npos) << r.err;
  expect_same_packages(reference_out(), out);
}

// A part's result whose digest holds but whose size is not the weight's (hostile, or a part
// of another version) is made again, and the package is the one a whole compile makes.
TEST(LocalExecutor, ACompilePartsResultOfTheWrongSizeIsMadeAgain) {
  for (const std::string target : {"htp", "aries"}) {
    SCOPED_TRACE(target);
    const fs::path m = write_manifest("compile_parts_hostile_" + target, manifest_text(crash_once_stage()));
    auto r = build_crashing_once(m, {"--jobs", "2", "--shards", "2", "--retries", "0", "--target", target});
    ASSERT_EQ(r.exit_code, 1) << r.err;
    const size_t at = r.err.find("its log: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    const fs::path plan =
        fs::path(r.err.substr(at + 9, r.err.find('\n', at) - at - 9)).parent_path().parent_path() / "plan.json";
    for (const std::string& stage : std::vector<std::string>{"transform-2-bad_transform", "compile-" + target + "-part-0",
                                                             "compile-" + target + "-part-1"}) {
      auto s = test::npuforge({"build-stage", plan.string(), stage});
      ASSERT_EQ(s.exit_code, 0) << stage << "\n" << s.err;
    }
    std::vector<fs::path> entries;
    for (const auto& e : fs::recursive_directory_iterator(m.parent_path() / "cache" / "checkpoints"))
      if (e.path().filename().string().starts_with(target == "htp" ? "packed-" : "quantized-")) entries.push_back(e.path());
    ASSERT_GE(entries.size(), 2u);
    auto rewrite = [](const fs::path& entry, const std::string& data) {
      std::ofstream(entry / "data", std::ios::binary | std::ios::trunc) << data;
      std::ofstream(entry / "digest.json", std::ios::trunc)
          << nlohmann::json{{"bytes", data.size()}, {"hash", host::hash_bytes(data.data(), data.size())}}.dump() << "\n";
    };
    const std::string shorter = test::slurp(entries[0] / "data").substr(1);
    rewrite(entries[0], shorter);
    // aries: the right size, a scale (the payload's last 4 bytes) that is not a number.
    std::string nan_scale = test::slurp(entries[1] / "data");
    const float nan = std::nanf("");
    if (target == "aries") std::memcpy(nan_scale.data() + nan_scale.size() - 4, &nan, 4);
    rewrite(entries[1], nan_scale);
    auto c = test::npuforge({"build-stage", plan.string(), "compile-" + target});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_NE(c.err.find("a compile part left has " + std::to_string(shorter.size()) + " bytes, not " +
                         std::to_string(shorter.size() + 1) + "; "),
              std::string::npos)
        << c.err;
    if (target == "aries") {
      EXPECT_NE(c.err.find("a compile part left has a scale that is not a positive number; quantizing it again"),
                std::string::npos)
          << c.err;
    }
    expect_same_package(reference_out() / target, read_json(plan)["staging"][target].get<std::string>());
  }
}

TEST(LocalExecutor, WorkerProcessesNeedTheStageCache) {
  const fs::path m = write_manifest("no_cache", manifest_text());
  auto r = build(m, {"--jobs", "2", "--no-cache"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--no-cache"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(m.parent_path() / "out" / "cpu"));
}

// seqmse on float-model inputs (symfp) splits into one part per worker: the parts search
// their layers side by side, the stage takes every layer from their checkpoints, and the
// packages are the ones the stage alone makes in one process.
std::string split_manifest_text(const std::string& symmetry) {
  return "[model]\nonnx = \"" + kTiny + "/model.onnx\"\nconfig = \"" + kTiny + "/config.json\"\n\n[calibration]\ntext = \"" +
         kTiny + "/calibration.txt\"\nnum_samples = 4\nsequence_length = 32\n\n[[quant]]\nrecipe = \"seqmse\"\n"
         "inp_symmetry = \"" + symmetry + "\"\ngranularity = \"per_block\"\nblock_size = 64\nnum_candidates = 8\n\n"
         "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\n\n"
         "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [256]\n\n"
         "[targets.cpu]\nbackend = \"cpu\"\n\n[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n\n"
         "[targets.aries]\nbackend = \"aries\"\n";
}

const fs::path& split_reference_out() {
  static const fs::path out = [] {
    const fs::path m = write_manifest("split_reference", split_manifest_text("symfp"));
    auto r = build(m, {"--jobs", "1", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return m.parent_path() / "out";
  }();
  return out;
}

TEST(LocalExecutor, ASearchThatSplitsRunsInPartsAndMakesTheSamePackages) {
  const fs::path m = write_manifest("split_local", split_manifest_text("symfp"));
  auto r = build(m, {"--jobs", "2", "--shards", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("quant seqmse: in 3 parts side by side"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quant lpbq: in 3 parts side by side"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("running 12 stage(s)"), std::string::npos) << r.err;  // 6 parts, 3 chain stages, 3 compiles
  for (const char* part : {"seqmse (part 1 of 3): finished", "seqmse (part 3 of 3): finished", "lpbq (part 2 of 3): finished"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
  // tiny_llama's 17 layer inputs (4 layers x 4, the LM head) and the activation ranges of the
  // 4 calibration batches all come from the parts; so do lpbq's 29 weight encodings.
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(quant seqmse: finished in [0-9.]+s \(4 of 12\); 21 step\(s\) from its parts)")))
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(quant lpbq: finished in [0-9.]+s \(8 of 12\); 33 step\(s\) from its parts)")))
      << r.err;
  expect_same_packages(split_reference_out(), m.parent_path() / "out");
  EXPECT_FALSE(fs::exists(m.parent_path() / "cache" / "checkpoints") &&
               !fs::is_empty(m.parent_path() / "cache" / "checkpoints"))
      << "the finished stage's checkpoints are removed";

  // Again: the stage is cached, so no parts are planned.
  r = build(m, {"--jobs", "2", "--shards", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("parts side by side"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3 of 3 stage(s) in the stage cache already"), std::string::npos) << r.err;
}

// A part per calibration batch at most: 8 asked of 4 batches make 4.
TEST(LocalExecutor, NoMorePartsThanCalibrationBatches) {
  const fs::path m = write_manifest("split_capped", split_manifest_text("symfp"));
  auto r = build(m, {"--jobs", "2", "--shards", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("quant seqmse: in 4 parts side by side"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quant lpbq: in 4 parts side by side"), std::string::npos) << r.err;
  expect_same_packages(split_reference_out(), m.parent_path() / "out");
}

TEST(LocalExecutor, ASearchOnQuantizedInputsIsOneStage) {
  const fs::path m = write_manifest("split_symqt", split_manifest_text("symqt"));
  auto r = build(m, {"--jobs", "2", "--shards", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("quant seqmse: in"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quant lpbq: in 3 parts"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("running 9 stage(s)"), std::string::npos) << r.err;
}

TEST(SlurmExecutor, MakesTheSamePackagesAsOneProcessAndRetriesACrashedJob) {
  if (!slurm_cluster_up()) GTEST_SKIP() << "no Slurm cluster (bash scripts/slurm_cluster.sh start; export SLURM_CONF)";
  const fs::path m = write_manifest("slurm", manifest_text(crash_once_stage()));
  auto r = build_crashing_once(m, {"--executor", "slurm", "--retries", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("on the slurm executor"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stage 'transform bad_transform' failed (Slurm job"), std::string::npos) << r.err;
  expect_same_packages(reference_out(), m.parent_path() / "out");
}

// The parts of a split search go to Slurm as one job array (task handles <job>_<k>).
TEST(SlurmExecutor, ASearchThatSplitsIsOneJobArray) {
  if (!slurm_cluster_up()) GTEST_SKIP() << "no Slurm cluster (bash scripts/slurm_cluster.sh start; export SLURM_CONF)";
  const fs::path m = write_manifest("split_slurm", split_manifest_text("symfp"));
  auto r = build(m, {"--executor", "slurm", "--shards", "2", "-v"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch first, second;
  ASSERT_TRUE(std::regex_search(r.err, first, std::regex(R"(stage quant-0-seqmse-part-0 started \((\d+)_0\))"))) << r.err;
  ASSERT_TRUE(std::regex_search(r.err, second, std::regex(R"(stage quant-0-seqmse-part-1 started \((\d+)_1\))"))) << r.err;
  EXPECT_EQ(first[1], second[1]) << "one array";
  EXPECT_NE(r.err.find("21 step(s) from its parts"), std::string::npos) << r.err;
  expect_same_packages(split_reference_out(), m.parent_path() / "out");
}

// So do the parts of a compile.
TEST(SlurmExecutor, ACompileThatSplitsIsOneJobArray) {
  if (!slurm_cluster_up()) GTEST_SKIP() << "no Slurm cluster (bash scripts/slurm_cluster.sh start; export SLURM_CONF)";
  const fs::path m = write_manifest("compile_parts_slurm", manifest_text());
  auto r = build(m, {"--executor", "slurm", "--shards", "2", "--target", "htp", "-v"});  // 2 parts for one target
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch first, second;
  ASSERT_TRUE(std::regex_search(r.err, first, std::regex(R"(stage compile-htp-part-0 started \((\d+)_0\))"))) << r.err;
  ASSERT_TRUE(std::regex_search(r.err, second, std::regex(R"(stage compile-htp-part-1 started \((\d+)_1\))"))) << r.err;
  EXPECT_EQ(first[1], second[1]) << "one array";
  expect_same_package(reference_out() / "htp", m.parent_path() / "out" / "htp");
}

}  // namespace
