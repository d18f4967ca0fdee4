// aries packages end to end: tiny_llama (arcl AR 1/32, context 256; minmax calibration
// encodings) built for two aries targets from one manifest (W8, and W4 projections),
// run, scored against the float model (teacher-forced greedy agreement over the held-out
// text and perplexity), corrupted and refused, estimated; and the compile-time refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli/cli_support.h"
#include "pipeline/pipeline.h"
#include "registry/registry.h"
#include "runner/static_runner.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "support/plugins.h"
#include "tokenizer/tokenizer.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/tiny_llama";

std::string model_tables(bool arcl = true, bool calibration = true) {
  std::string s = "[model]\nonnx = \"" + kTiny + "/model.onnx\"\nconfig = \"" + kTiny + "/config.json\"\ntokenizer = \"" +
                  kTiny + "/tokenizer.json\"\n\n";
  if (calibration)
    s += "[calibration]\ntext = \"" + kTiny + "/calibration.txt\"\nnum_samples = 4\nsequence_length = 64\n\n"
         "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\nactivation_bw = 16\n\n";
  if (arcl) s += "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [256]\n\n";
  return s;
}

// Builds `manifest` (the model tables + targets); returns the result.
test::CommandResult build(const std::string& name, const std::string& manifest, const std::string& target = "") {
  fs::path dir = test::process_dir("aries") / name;
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.toml") << manifest;
  std::vector<std::string> args = {"build", (dir / "manifest.toml").string(), "--out", (dir / "out").string(), "--no-cache"};
  if (!target.empty()) args.insert(args.end(), {"--target", target});
  return test::npuforge(args);
}

// The W8 and W4 packages of one manifest, built once for the suite.
const fs::path& packages() {
  static fs::path out = [] {
    auto r = build("main", model_tables() +
                               "[targets.aries]\nbackend = \"aries\"\n\n"
                               "[targets.aries_w4]\nbackend = \"aries\"\nbits = { query = 4, key = 4, output = 4, ffn = 4 }\n"
                               "search_weight_scale = { apply = true }\n");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return test::process_dir("aries") / "main" / "out";
  }();
  return out;
}

// Removes this process's work dir at exit.
struct Scores {
  double agreement = 0, perplexity = 0, float_perplexity = 0;
  int64_t tokens = 0;
};

double nll_at(const float* row, size_t vocab, int32_t next) {
  float m = *std::max_element(row, row + vocab);
  double z = 0;
  for (size_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v] - m));
  return std::log(z) + m - row[next];
}


// The first kWindows windows of 128 held-out tokens (4096 tokens: a quarter of the text, to
// keep the suite fast; the README gives the figures over the whole text).
constexpr size_t kWindows = 32;

std::vector<int32_t> heldout_ids() {
  auto tok = Tokenizer::load(kTiny + "/tokenizer.json");
  auto ids = tok.encode(test::slurp(kTiny + "/heldout.txt"), false);
  ids.resize(std::min(ids.size(), kWindows * 128));
  return ids;
}

// Logits of every position over consecutive windows of `window` tokens (each from an empty cache).
std::vector<std::vector<float>> window_logits(host::Runner& runner, const std::vector<int32_t>& ids, size_t window) {
  std::vector<std::vector<float>> out;
  for (size_t start = 0; start + window <= ids.size(); start += window) {
    runner.reset();
    out.push_back(runner.append(std::span<const int32_t>(ids.data() + start, window), true));
  }
  return out;
}

const std::vector<std::vector<float>>& float_logits() {
  static std::vector<std::vector<float>> logits = [] {
    auto ms = host::load_source_model(kTiny + "/model.onnx", "");
    auto session = host::BackendSession::open_model_set(*test::plugins().find(NF_KIND_BACKEND, "cpu"), nlohmann::json::object(), *ms);
    auto runner = host::make_runner(*session, host::graph_specs(*ms), nullptr);
    return window_logits(*runner, heldout_ids(), 128);
  }();
  return logits;
}

// Teacher-forced greedy agreement with the float model and perplexity, windows of 128.
Scores score(const fs::path& pkg_dir) {
  host::Package pkg = host::open_package(pkg_dir);
  auto session = host::BackendSession::open_artifacts(*test::plugins().find(NF_KIND_BACKEND, pkg.backend()),
                                                      pkg.backend_options(), pkg.artifacts().string());
  auto runner = host::make_runner(*session, pkg.meta.at("graphs"), pkg.meta.value("metadata", nlohmann::json()));
  auto ids = heldout_ids();
  auto q = window_logits(*runner, ids, 128);
  const auto& f = float_logits();
  EXPECT_EQ(q.size(), f.size());
  Scores s;
  double nll = 0, fnll = 0;
  int64_t same = 0;
  for (size_t w = 0; w < q.size(); ++w) {
    size_t vocab = q[w].size() / 128;
    for (size_t i = 0; i + 1 < 128; ++i) {
      const float* a = q[w].data() + i * vocab;
      const float* b = f[w].data() + i * vocab;
      same += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
      nll += nll_at(a, vocab, ids[w * 128 + i + 1]);
      fnll += nll_at(b, vocab, ids[w * 128 + i + 1]);
      ++s.tokens;
    }
  }
  s.agreement = static_cast<double>(same) / static_cast<double>(s.tokens);
  s.perplexity = std::exp(nll / static_cast<double>(s.tokens));
  s.float_perplexity = std::exp(fnll / static_cast<double>(s.tokens));
  return s;
}

// `npuforge eval` over the first 6000 characters of the held-out text.
double eval_ppl(const std::string& model) {
  static fs::path text = [] {
    fs::path p = test::process_dir("aries") / "heldout_head.txt";
    std::ofstream(p) << test::slurp(kTiny + "/heldout.txt").substr(0, 6000);
    return p;
  }();
  auto r = test::npuforge({"eval", model, "--text", text.string(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out).at("perplexity").get<double>() : NAN;
}

}  // namespace

static void check_LayoutAndRun() {
  fs::path pkg = packages() / "aries";
  ASSERT_TRUE(fs::exists(pkg / "package.json"));
  EXPECT_TRUE(fs::exists(pkg / "artifacts" / "part_0_of_1.mxq"));
  auto meta = nlohmann::json::parse(test::slurp(pkg / "artifacts" / "aries.json"));
  EXPECT_EQ(meta["options"]["llm"]["max_cache_length"], 256);  // from the arcl graph
  EXPECT_TRUE(meta["activations_calibrated"].get<bool>());
  int wide = 0, narrow = 0;
  for (const auto& [name, a] : meta["activations"].items()) (a["bw"] == 16 ? wide : narrow)++;
  EXPECT_GT(narrow, 0);
  EXPECT_GT(wide, 0);  // the down projections' input and output (default activation_16bit)
  for (const auto& l : meta["linears"]) EXPECT_EQ(l["bits"], 8);
  auto run = test::npuforge({"run", pkg.string(), "--prompt", "SQLite is a", "--max-new-tokens", "8"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
}

static void check_W8AgreesWithFloatGreedy() {
  Scores s = score(packages() / "aries");
  std::printf("tiny_llama heldout (%lld tokens), aries W8 (int8 weights, int8 activations, 16-bit down-proj, KV int8): "
              "greedy agreement %.4f; perplexity float %.4f, aries %.4f (%+.2f%%)\n",
              static_cast<long long>(s.tokens), s.agreement, s.float_perplexity, s.perplexity,
              100 * (s.perplexity / s.float_perplexity - 1));
  EXPECT_GE(s.agreement, 0.95);
  EXPECT_LT(std::fabs(s.perplexity / s.float_perplexity - 1), 0.05);
  // The same package through `npuforge eval` (its own windows over a shorter text).
  double fp = eval_ppl(kTiny + "/model.onnx"), q = eval_ppl((packages() / "aries").string());
  std::printf("npuforge eval (first 6000 characters): float %.4f, aries W8 %.4f\n", fp, q);
  EXPECT_LT(std::fabs(q / fp - 1), 0.05);
  EXPECT_NE(q, fp) << "the package should run integer grids, not fp32";
}

static void check_W4ProjectionsReported() {
  Scores s = score(packages() / "aries_w4");
  double fp = s.float_perplexity, q = s.perplexity;
  std::printf("tiny_llama heldout (%lld tokens), aries W4 (query/key/output/ffn int4 per channel + search_weight_scale, "
              "value/head int8): greedy agreement %.4f; perplexity float %.4f, aries %.4f (%+.2f%%)\n",
              static_cast<long long>(s.tokens), s.agreement, fp, q, 100 * (q / fp - 1));
  auto meta = nlohmann::json::parse(test::slurp(packages() / "aries_w4" / "artifacts" / "aries.json"));
  for (const auto& l : meta["linears"])
    EXPECT_EQ(l["bits"], l["kind"] == "value" || l["kind"] == "head" ? 8 : 4) << l.dump();
  EXPECT_LT(fs::file_size(packages() / "aries_w4" / "artifacts" / "part_0_of_1.mxq"),
            fs::file_size(packages() / "aries" / "artifacts" / "part_0_of_1.mxq") * 0.75);
  EXPECT_GT(s.agreement, 0.5);
  EXPECT_LT(q, 2 * fp);
}

static void check_CorruptedContainerIsRefused() {
  fs::path copy = test::process_dir("aries") / "corrupt";
  fs::remove_all(copy);
  fs::copy(packages() / "aries", copy, fs::copy_options::recursive);
  fs::path mxq = copy / "artifacts" / "part_0_of_1.mxq";
  {
    std::fstream io(mxq, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(1000);
    io.put('\x5a');
  }
  // The host's package hashes catch it first...
  auto r = test::npuforge({"run", copy.string(), "--prompt", "SQLite", "--max-new-tokens", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("part_0_of_1.mxq"), std::string::npos) << r.err;
  // ...and the backend's own checksum when the artifacts are opened directly.
  nf_session* s = nullptr;
  nf_status* st = test::plugins().find(NF_KIND_BACKEND, "aries")->backend()->open("{}", (copy / "artifacts").c_str(), nullptr, &s);
  ASSERT_NE(st, nullptr);
  std::string msg = host::host_api()->status_message(st);
  host::host_api()->status_release(st);
  EXPECT_NE(msg.find("corrupted (checksum mismatch)"), std::string::npos) << msg;
}

static void check_EstimateFromThePackage() {
  const nf_backend_api* api = test::plugins().find(NF_KIND_BACKEND, "aries")->backend();
  auto estimate = [&](const nlohmann::json& wl) {
    std::string out;
    nf_status* st = api->estimate("{}", (packages() / "aries" / "artifacts").c_str(), wl.dump().c_str(),
                                  [](void* u, const char* j) { *static_cast<std::string*>(u) = j; }, &out);
    EXPECT_EQ(st, nullptr);
    return nlohmann::json::parse(out);
  };
  auto a = estimate({{"prompt_len", 32}, {"context_len", 64}});
  auto b = estimate({{"prompt_len", 200}, {"context_len", 256}});
  EXPECT_EQ(a["backend"], "aries");
  EXPECT_EQ(a["device"], "aries-rb");
  EXPECT_TRUE(a["simulated"].get<bool>());
  EXPECT_GT(a["ttft_ms"].get<double>(), 0);
  EXPECT_LT(a["ttft_ms"].get<double>(), b["ttft_ms"].get<double>());
  EXPECT_GE(a["decode_tokens_per_s"].get<double>(), b["decode_tokens_per_s"].get<double>());
  EXPECT_GT(a["memory_bytes"].get<double>(), a["weight_bytes"].get<double>());
  // A tree pass is priced on the compiled graph that holds its rows (AR 1 or 32), every row
  // through the head, not as a prefill chunk; more rows than the largest take two calls.
  auto pass = [&](int64_t rows) { return estimate({{"context_len", 64}, {"pass_rows", rows}})["pass"]; };
  const auto p1 = pass(1), p16 = pass(16), p32 = pass(32), p40 = pass(40);
  EXPECT_EQ(p1["graph_rows"], 1);
  EXPECT_EQ(p16["graph_rows"], 32);
  EXPECT_EQ(p16["calls"], 1);
  EXPECT_EQ(p40["graph_rows"], 32);
  EXPECT_EQ(p40["calls"], 2);
  EXPECT_NEAR(p1["ms"].get<double>(), a["decode_ms_per_token"].get<double>() * 1.0, 0.5 * p1["ms"].get<double>());
  EXPECT_GT(p16["ms"].get<double>(), p1["ms"].get<double>());
  EXPECT_EQ(p16["ms"], p32["ms"]);
  EXPECT_NEAR(p40["ms"].get<double>(), 2 * p32["ms"].get<double>(), 1e-9);
  EXPECT_LT(p16["ms"].get<double>(), estimate({{"prompt_len", 128}, {"context_len", 128}})["ttft_ms"].get<double>());
  auto w4 = nlohmann::json::parse(test::slurp(packages() / "aries_w4" / "artifacts" / "aries.json"));
  EXPECT_LT(w4["memory"]["weight_bytes"].get<double>(), 0.75 * nlohmann::json::parse(test::slurp(packages() / "aries" / "artifacts" / "aries.json"))["memory"]["weight_bytes"].get<double>());
}

// Each ctest case is its own process: the packages are built once per case, so the
// checks that share them are grouped.
TEST(AriesPackage, RoundTripCorruptionEstimate) {
  check_LayoutAndRun();
  check_CorruptedContainerIsRefused();
  check_EstimateFromThePackage();
}

TEST(AriesPackage, W8AndW4AgainstFloat) {
  check_W8AgreesWithFloatGreedy();
  check_W4ProjectionsReported();
}

TEST(AriesCompile, Refusals) {
  // Dynamic shapes (no arcl).
  auto r = build("dynamic", model_tables(false, false) + "[targets.aries]\nbackend = \"aries\"\nllm = { max_sequence_length = 256 }\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("symbolic dimension"), std::string::npos) << r.err;
  // A cache longer than the static graph holds.
  r = build("cache", model_tables(true, false) + "[targets.aries]\nbackend = \"aries\"\npreset = \"llm\"\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("exceeds the graph's static context length 256"), std::string::npos) << r.err;
  // Exclusive split strategies, through the manifest.
  r = build("split", model_tables(true, false) + "[targets.aries]\nbackend = \"aries\"\nsplit_parts = 2\nsplit_blocks = [2]\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("split_parts and split_blocks are exclusive"), std::string::npos) << r.err;
  // A device without the memory for the model.
  fs::path dev = test::process_dir("aries") / "tiny_device.json";
  auto d = nlohmann::json::parse(test::slurp(std::string(NPUFORGE_SOURCE_DIR) + "/plugins/backends/aries/devices/aries-rb.json"));
  d["params"]["dram_bytes"]["value"] = 4 << 20;
  d["params"]["dram_reserved_bytes"]["value"] = 0;
  std::ofstream(dev) << d.dump();
  r = build("memory", model_tables(true, false) + "[targets.aries]\nbackend = \"aries\"\ndevice_file = \"" + dev.string() + "\"\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("of device memory"), std::string::npos) << r.err;
}

TEST(AriesCompile, SplitPartsAndNoCalibration) {
  // No [calibration]: weights at their integer grids, activations float (warned, recorded).
  auto r = build("split2", model_tables(true, false) + "[targets.aries]\nbackend = \"aries\"\nsplit_parts = 2\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::path pkg = test::process_dir("aries") / "split2" / "out" / "aries";
  EXPECT_TRUE(fs::exists(pkg / "artifacts" / "part_0_of_2.mxq"));
  EXPECT_TRUE(fs::exists(pkg / "artifacts" / "part_1_of_2.mxq"));
  EXPECT_NE(r.err.find("no calibration encodings"), std::string::npos) << r.err;
  auto meta = nlohmann::json::parse(test::slurp(pkg / "artifacts" / "aries.json"));
  EXPECT_FALSE(meta["activations_calibrated"].get<bool>());
  EXPECT_EQ(meta["parts"][0]["blocks"], nlohmann::json({0, 2}));
  auto run = test::npuforge({"run", pkg.string(), "--prompt", "SQLite is a", "--max-new-tokens", "4"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
}
