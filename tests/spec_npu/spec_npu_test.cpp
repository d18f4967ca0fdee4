// Every speculative decoder is lossless on the NPU backends: one tiny_llama package per
// backend (minmax W8A16 with calibration, as tests/htp and tests/aries build them;
// hidden_states for eaglet's draft; arcl AR 1/32, CL 256; [speculative] ssd, so the
// forecast embeddings are baked in), then `npuforge run --decoder D --json` gives exactly
// the tokens of `--decoder none` on the same package (a quantized package's own greedy).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cli/cli_support.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = test::source_dir() + "/tests/models/tiny_llama";

// Targets by name: "aries" keeps aries' default int8 activations (16 bits only at
// ffn_down); "aries_a16" keeps every linear's input/output and the KV cache at 16 bits.
std::string target_table(const std::string& target) {
  if (target == "htp") return "[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n";
  if (target == "aries_a16")
    return "[targets.aries_a16]\nbackend = \"aries\"\nactivation_16bit = [\"query\", \"key\", \"value\", \"output\", "
           "\"ffn\", \"ffn_down\", \"head\", \"kv_cache\"]\n";
  return "[targets.aries]\nbackend = \"aries\"\n";
}

// Builds the package of `backend` (a target name above) with [speculative] `decoder` ("" for
// none) once per process; returns its directory.
fs::path package(const std::string& backend, const std::string& decoder = "ssd") {
  static std::map<std::string, fs::path> built;
  const std::string key = backend + "/" + decoder;
  if (auto it = built.find(key); it != built.end()) return it->second;
  fs::path dir = test::process_dir("spec_npu") / (backend + "_" + (decoder.empty() ? "plain" : decoder));
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.toml")
      << "[model]\nonnx = \"" << kTiny << "/model.onnx\"\nconfig = \"" << kTiny << "/config.json\"\ntokenizer = \""
      << kTiny << "/tokenizer.json\"\n\n"
      << "[calibration]\ntext = \"" << kTiny << "/heldout.txt\"\nnum_samples = 4\nsequence_length = 64\n\n"
      << "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\nactivation_bw = 16\n\n"
      << "[[transform]]\nplugin = \"hidden_states\"\n\n"
      << "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [256]\n\n"
      << (decoder == "ssd" ? "[speculative]\ndecoder = \"ssd\"\nassets = \"" + kTiny + "/ssd\"\n\n" : "")
      << (decoder == "eaglet" ? "[speculative]\ndecoder = \"eaglet\"\ndraft = \"" + kTiny + "/eaglet\"\n\n" : "")
      << target_table(backend);
  auto r = test::npuforge({"build", (dir / "manifest.toml").string(), "--out", (dir / "out").string(), "--no-cache", "-q"});
  EXPECT_EQ(r.exit_code, 0) << backend << " build: " << r.err;
  fs::path pkg = dir / "out" / backend;
  // A package carries one [speculative] decoder's assets; eaglet's draft goes where its
  // default option (draft = "eaglet", relative to the package) finds it.
  if (decoder != "eaglet") fs::copy(kTiny + "/eaglet", pkg / "eaglet", fs::copy_options::recursive);
  built[key] = pkg;
  return pkg;
}

const std::vector<std::string> kPrompts = {"1", "1005,291,260", "1,5,9,5,9,5,450,1536,310"};
constexpr int kNewTokens = 32;

nlohmann::json run(const fs::path& pkg, const std::string& prompt, const std::string& decoder,
                   bool stats = false) {
  std::vector<std::string> args{"run", pkg.string(), "--prompt-ids", prompt, "--max-new-tokens",
                                std::to_string(kNewTokens), "--decoder", decoder, "--json"};
  if (stats) args.push_back("--stats");
  auto r = test::npuforge(args);
  EXPECT_EQ(r.exit_code, 0) << decoder << " on " << pkg << ", prompt " << prompt << ": " << r.err;
  if (r.exit_code != 0) return nlohmann::json::object();
  return nlohmann::json::parse(r.out);
}

void expect_decoders_lossless(const std::string& backend) {
  fs::path pkg = package(backend);
  ASSERT_TRUE(fs::is_regular_file(pkg / "package.json")) << pkg;
  for (const auto& prompt : kPrompts) {
    auto plain = run(pkg, prompt, "none");
    ASSERT_TRUE(plain.contains("tokens")) << prompt;
    ASSERT_EQ(plain["tokens"].size(), static_cast<size_t>(kNewTokens));
    EXPECT_FALSE(plain["stats"].contains("speculative"));
    for (const char* decoder : {"lade", "ssd", "eaglet"}) {
      auto got = run(pkg, prompt, decoder);
      ASSERT_TRUE(got.contains("tokens")) << decoder;
      EXPECT_EQ(got["tokens"], plain["tokens"]) << backend << " " << decoder << ", prompt " << prompt;
      const auto& spec = got["stats"]["speculative"];
      EXPECT_GE(spec["tau"].get<double>(), 1.0) << decoder;
      EXPECT_LE(spec["max_rows"].get<int64_t>(), 32) << decoder;
    }
  }
}

}  // namespace

TEST(SpecNpu, HtpDecodersMatchPlainGreedy) { expect_decoders_lossless("htp"); }

// aries with 16-bit activations on every linear and the KV cache.
TEST(SpecNpu, AriesA16DecodersMatchPlainGreedy) { expect_decoders_lossless("aries_a16"); }

// aries' default int8 activations (16 bits only at ffn_down, KV cache int8): lossless
// because the cpu engine's integer mode is layout-independent (tests/exact_int): the rotated
// keys of the pass are rounded onto the KV cache grid where they are made, and MatMul,
// Softmax and the linears sum exactly in integers.
TEST(SpecNpu, AriesInt8DecodersMatchPlainGreedy) { expect_decoders_lossless("aries"); }

// Backends that estimate: --stats --json adds the simulated decode block, the target's tree
// pass priced on the compiled graph that holds its rows (AR 32 here) at the run's context.
void expect_simulated_decode(const std::string& backend) {
  auto j = run(package(backend), "1005,291,260", "eaglet", true);
  ASSERT_TRUE(j.contains("stats"));
  const auto& sim = j["stats"]["speculative"]["simulated"];
  ASSERT_TRUE(sim.is_object()) << j["stats"].dump();
  EXPECT_FALSE(sim.contains("error")) << sim.dump();
  EXPECT_EQ(sim["backend"], backend == "htp" ? "htp" : "aries");
  EXPECT_EQ(sim["simulated"], true);
  EXPECT_EQ(sim["context_len"].get<int64_t>(), 3 + kNewTokens);
  for (const char* k : {"decode_step_ms", "tree_pass_ms", "draft_pass_ms", "plain_decode_ms", "speculative_decode_ms"})
    EXPECT_GT(sim[k].get<double>(), 0.0) << k;
  const double plain = sim["plain_decode_ms"].get<double>(), spec = sim["speculative_decode_ms"].get<double>();
  EXPECT_NEAR(plain, kNewTokens * sim["decode_step_ms"].get<double>(), 1e-6 * plain);
  EXPECT_NEAR(spec, sim["target_forwards_ms"].get<double>() + sim["draft_ms"].get<double>(), 1e-6 * spec);
  EXPECT_NEAR(sim["speedup"].get<double>(), plain / spec, 1e-9);
  EXPECT_NE(sim["notes"].dump().find("compiled 32-row graph"), std::string::npos) << sim["notes"].dump();
}

TEST(SpecNpu, HtpStatsReportSimulatedDecode) { expect_simulated_decode("htp"); }
TEST(SpecNpu, AriesStatsReportSimulatedDecode) { expect_simulated_decode("aries"); }

// A package built with [speculative] eaglet holds the draft as graphs of role "draft" (arcl's
// variants of it, quantized W8A16 like the target by the manifest's minmax on calibration
// runs of the draft over the target's features), compiled by the backend with its depth loop as
// one graph (role draft_tree), and the decoder runs them on the backend session: lossless,
// one launch a step priced as a call of the compiled tree graph, and the target's own price is
// the one of a package without the draft.
void expect_compiled_draft(const std::string& backend) {
  fs::path pkg = package(backend, "eaglet");
  ASSERT_TRUE(fs::is_regular_file(pkg / "package.json")) << pkg;
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(pkg / "package.json"));
  EXPECT_EQ(meta["metadata"]["roles"]["draft"]["graphs"],
            nlohmann::json::array({"eaglet_draft_ar1_cl256", "eaglet_draft_ar32_cl256"}));
  if (backend == "aries") {
    EXPECT_TRUE(fs::is_regular_file(pkg / "artifacts" / "draft.mxq"));
    // The draft's activations run on its calibrated grids, the shared head's input (its
    // features) included.
    const auto acts = nlohmann::json::parse(std::ifstream(pkg / "artifacts" / "aries.json")).at("activations");
    int draft_acts = 0;
    for (const auto& [name, a] : acts.items()) draft_acts += name.rfind("eaglet_draft/", 0) == 0;
    EXPECT_GE(draft_acts, 8) << acts.dump();
    EXPECT_TRUE(acts.contains("eaglet_draft/hidden_states")) << acts.dump();
    // Device memory holds the draft beside the target: its own weights and its 1-layer KV
    // cache (the target's 4 layers' plus a fifth).
    auto memory = [](const fs::path& p) {
      return nlohmann::json::parse(std::ifstream(p / "artifacts" / "aries.json")).at("memory");
    };
    const auto with = memory(pkg), without = memory(package(backend, ""));
    EXPECT_DOUBLE_EQ(with["kv_cache_bytes"].get<double>(), without["kv_cache_bytes"].get<double>() * 5 / 4);
    // The draft is one block, also where its depth loop runs it again within one graph.
    const auto roles = nlohmann::json::parse(std::ifstream(pkg / "artifacts" / "aries.json")).at("roles");
    for (const char* role : {"draft", "draft_tree"}) EXPECT_EQ(roles.at(role).at("model").at("layers"), 1) << role;
    EXPECT_GT(with["weight_bytes"].get<double>(), without["weight_bytes"].get<double>());
  } else {  // htp stores the draft's own weights at the recipe's 8 bits
    const auto weights = nlohmann::json::parse(std::ifstream(pkg / "artifacts" / "htp.json")).at("weights");
    int draft_w8 = 0;
    for (const auto& [name, w] : weights.items()) draft_w8 += name.rfind("eaglet_draft/", 0) == 0 && w.at("bits") == 8;
    EXPECT_EQ(draft_w8, 8) << weights.dump();  // fc, q, k, v, o, gate, up, down (the head is the target's)
  }
  for (const auto& prompt : kPrompts) {
    auto plain = run(pkg, prompt, "none");
    auto j = run(pkg, prompt, "eaglet", true);
    ASSERT_TRUE(j.contains("stats")) << prompt;
    EXPECT_EQ(j["tokens"], plain["tokens"]) << backend << ", prompt " << prompt;
    const auto& spec = j["stats"]["speculative"];
    EXPECT_EQ(spec["decoder"]["draft_runs_on"], "graph");
    EXPECT_GE(spec["tau"].get<double>(), 1.0);
    // The depth loop is one graph a step (role draft_tree), priced call by call: every launch
    // counted under its rows.
    EXPECT_NE(spec["simulated"]["notes"].dump().find("draft_tree graph"), std::string::npos) << spec["simulated"].dump();
    EXPECT_EQ(spec["decoder"]["draft_loop"], "one graph a step");
    int64_t launches = 0;
    for (const char* calls : {"draft_pass_rows", "draft_tree_calls"})
      for (const auto& [rows, n] : spec["decoder"][calls].items()) launches += n.get<int64_t>();
    EXPECT_EQ(launches, spec["draft_forwards"].get<int64_t>()) << spec["decoder"].dump();
    EXPECT_EQ(spec["draft_forwards"], spec["target_forwards"]) << "one launch a step";
  }
  auto decode_ms = [](const fs::path& p) {
    auto r = test::npuforge({"estimate", p.string(), "--prompt-len", "16", "--context-len", "128", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out).at("decode_ms_per_token").get<double>();
  };
  EXPECT_DOUBLE_EQ(decode_ms(pkg), decode_ms(package(backend, ""))) << "the draft's graphs priced as the target's";
}

TEST(SpecNpu, HtpPackageCompilesTheEagletDraft) { expect_compiled_draft("htp"); }
TEST(SpecNpu, AriesPackageCompilesTheEagletDraft) { expect_compiled_draft("aries"); }

// A split target's parts are weight groups of their own, and so is the draft beside them: the
// target's embedding table, which the draft reads, is packed once (in the target's first
// part) and the draft's graphs take it from there; eaglet stays lossless on the package.
TEST(SpecNpu, HtpSplitTargetSharesItsTableWithTheDraft) {
  fs::path dir = test::process_dir("spec_npu") / "htp_split_eaglet";
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.toml")
      << "[model]\nonnx = \"" << kTiny << "/model.onnx\"\nconfig = \"" << kTiny << "/config.json\"\n\n"
      << "[[transform]]\nplugin = \"hidden_states\"\n\n"
      << "[[transform]]\nplugin = \"arcl\"\narn = [1, 16]\ncontext_length = [256]\n\n"
      << "[[transform]]\nplugin = \"split\"\nnum_splits = 4\n\n"
      << "[speculative]\ndecoder = \"eaglet\"\ndraft = \"" << kTiny << "/eaglet\"\n\n"
      << "[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n";
  auto r = test::npuforge({"build", (dir / "manifest.toml").string(), "--out", (dir / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path pkg = dir / "out" / "htp";
  const auto htp = nlohmann::json::parse(std::ifstream(pkg / "artifacts" / "htp.json"));
  uint64_t packed = 0, weights = 0;
  std::set<std::string> groups;
  for (const auto& s : htp.at("splits")) {
    packed += s.at("weight_bytes").get<uint64_t>();
    groups.insert(s.at("name").get<std::string>());
  }
  for (const auto& [name, w] : htp.at("weights").items()) weights += w.at("bytes").get<uint64_t>();
  EXPECT_EQ(groups, (std::set<std::string>{"1_of_1", "1_of_4", "2_of_4", "3_of_4", "4_of_4"}));  // the draft's, the target's
  EXPECT_EQ(packed, weights) << "a weight packed in two groups";
  for (const auto& prompt : kPrompts) {
    auto plain = run(pkg, prompt, "none");
    auto j = run(pkg, prompt, "eaglet", true);
    ASSERT_TRUE(j.contains("stats")) << prompt;
    EXPECT_EQ(j["tokens"], plain["tokens"]) << "prompt " << prompt;
    EXPECT_EQ(j["stats"]["speculative"]["decoder"]["draft_runs_on"], "graph");
  }
}
