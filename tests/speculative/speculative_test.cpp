// Speculative decoding through the lade plugin on the cpu backend: greedy output equals
// plain greedy token for token, tau >= 1, rows per forward within the runner's limit;
// and the same through `npuforge run --decoder`.
#include <gtest/gtest.h>

#include <fstream>

#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "runner/generate.h"
#include "runner/speculative.h"
#include "runtime/package.h"
#include "support/plugins.h"
#include "tokenizer/tokenizer.h"

using namespace nf;

namespace {

using test::heldout_prompts;
using test::plugin;

struct Model {
  std::unique_ptr<ir::ModelSet> ms;
  std::unique_ptr<host::BackendSession> session;
  std::unique_ptr<host::DynamicRunner> runner;
};

Model open(const std::string& name) {
  Model m;
  nlohmann::json options = nlohmann::json::object();
  const auto& cpu = plugin(NF_KIND_BACKEND, "cpu");
  manifest::validate_json(cpu.schema, options);
  m.ms = host::load_source_model(test::model_dir(name) + "/model.onnx", "");
  m.session = host::BackendSession::open_model_set(cpu, options, *m.ms);
  m.runner = std::make_unique<host::DynamicRunner>(*m.session, host::DecoderIO::from_spec(host::graph_specs(*m.ms)[0]));
  return m;
}

std::vector<int32_t> plain_greedy(host::Runner& r, const std::vector<int32_t>& prompt, int n) {
  r.reset();
  host::Sampler s({});
  return host::generate(r, prompt, n, s, {}, nullptr, nullptr);
}

std::vector<int32_t> lade_greedy(host::Runner& r, const std::vector<int32_t>& prompt, int n,
                                 host::SpeculativeStats* st, nlohmann::json options = nlohmann::json::object()) {
  r.reset();
  host::Sampler s({});
  return host::generate_speculative(r, plugin(NF_KIND_SPECULATIVE, "lade"), options, prompt, n, s, {}, nullptr, st);
}

void expect_lossless(host::Runner& r, const std::vector<int32_t>& prompt, int n, const nlohmann::json& options = {}) {
  auto want = plain_greedy(r, prompt, n);
  host::SpeculativeStats st;
  auto got = lade_greedy(r, prompt, n, &st, options.is_null() ? nlohmann::json::object() : options);
  EXPECT_EQ(got, want) << "prompt of " << prompt.size() << " tokens, " << n << " new, options " << options.dump();
  EXPECT_GE(st.tau, 1.0);
  EXPECT_GE(st.target_forwards, 1);
  EXPECT_LE(st.max_rows, static_cast<int64_t>(r.max_rows()));
  EXPECT_EQ(st.gen.new_tokens, n);
}

}  // namespace

class LadeLossless : public ::testing::TestWithParam<const char*> {};

TEST_P(LadeLossless, GreedyEqualsPlainGreedy) {
  Model m = open(GetParam());
  std::vector<std::vector<int32_t>> prompts{{1}, {1, 5, 9, 5, 9, 5}};
  if (std::string(GetParam()) == "tiny_llama") {
    for (auto& p : heldout_prompts(2, 24)) prompts.push_back(p);
  } else {
    prompts.push_back(test::golden(GetParam())["prompt_ids"].get<std::vector<int32_t>>());
  }
  for (const auto& p : prompts)
    for (int n : {1, 7, 40}) expect_lossless(*m.runner, p, n);
}

INSTANTIATE_TEST_SUITE_P(Models, LadeLossless,
                         ::testing::Values("tiny_llama", "llama_gqa", "qwen2", "mixtral_moe", "mistral_swa"));

TEST(Lade, UpdateModesAndShapesStayLossless) {
  Model m = open("tiny_llama");
  auto prompt = heldout_prompts(1, 32)[0];
  for (const char* mode : {"always_fwd_one", "fwd_max_hit", "fwd_level"})
    expect_lossless(*m.runner, prompt, 40, {{"update_mode", mode}});
  expect_lossless(*m.runner, prompt, 40, {{"ngram", 2}, {"window", 3}, {"gcap", 2}});
  expect_lossless(*m.runner, prompt, 40, {{"ngram", 5}, {"window", 4}, {"gcap", 4}});
  expect_lossless(*m.runner, prompt, 20, {{"gcap", 0}});
  // (W+G)(N-1)+1 = 129 rows > 64: trimmed, still lossless and within the limit.
  expect_lossless(*m.runner, prompt, 20, {{"ngram", 5}, {"window", 16}, {"gcap", 16}});
}

TEST(Lade, BadOptionsAreRejected) {
  Model m = open("tiny_llama");
  host::SpeculativeStats st;
  EXPECT_THROW(lade_greedy(*m.runner, {1, 2}, 4, &st, {{"window", 0}}), std::runtime_error);
  EXPECT_THROW(lade_greedy(*m.runner, {1, 2}, 4, &st, {{"update_mode", "sideways"}}), std::runtime_error);
  EXPECT_THROW(lade_greedy(*m.runner, {1, 2}, 4, &st, {{"windw", 4}}), std::runtime_error);
}

// With sampling the target draws every emitted token and the matching branch is followed:
// with the same seed the output is plain sampling's, token for token (so its distribution
// is the target's).
TEST(Lade, SamplingEqualsPlainSamplingWithTheSameSeed) {
  Model m = open("tiny_llama");
  const host::SamplingParams sp{0.8f, 40, 0.95f, 7};
  for (const auto& prompt : heldout_prompts(2, 16)) {
    m.runner->reset();
    host::Sampler s(sp);
    host::SpeculativeStats st;
    auto a = host::generate_speculative(*m.runner, plugin(NF_KIND_SPECULATIVE, "lade"), nlohmann::json::object(),
                                        prompt, 30, s, {}, nullptr, &st);
    m.runner->reset();
    host::Sampler plain_sampler(sp);
    auto plain = host::generate(*m.runner, prompt, 30, plain_sampler, {}, nullptr, nullptr);
    EXPECT_EQ(a.size(), 30u);
    EXPECT_EQ(a, plain);
    EXPECT_GT(st.acceptance_rate, 0.0) << "guesses were accepted, so the comparison covers them";
  }
}

// tau on held-out text with the default options (reported, not a speed test).
TEST(Lade, TauOnHeldoutText) {
  Model m = open("tiny_llama");
  int64_t tokens = 0, forwards = 0;
  for (const auto& p : heldout_prompts(6, 32)) {
    host::SpeculativeStats st;
    auto want = plain_greedy(*m.runner, p, 64);
    auto got = lade_greedy(*m.runner, p, 64, &st);
    EXPECT_EQ(got, want);
    tokens += st.gen.new_tokens;
    forwards += st.target_forwards;
    std::printf("prompt %zu tokens: tau %.3f, acceptance %.3f, %lld forwards, max rows %lld, decoder %s\n", p.size(),
                st.tau, st.acceptance_rate, static_cast<long long>(st.target_forwards),
                static_cast<long long>(st.max_rows), st.decoder.dump().c_str());
  }
  double tau = static_cast<double>(tokens) / static_cast<double>(forwards);
  std::printf("tiny_llama held-out tau (W8 N3 G8): %.3f over %lld tokens\n", tau, static_cast<long long>(tokens));
  RecordProperty("tau_x1000", static_cast<int>(tau * 1000));
  EXPECT_GT(tau, 1.0);
}

TEST(LadeCli, DecoderFlagMatchesPlainAndReportsStats) {
  std::string model = test::model_dir("tiny_llama") + "/model.onnx";
  std::vector<std::string> base{"run", model, "--prompt-ids", "1,450,1536,310,278", "--max-new-tokens", "24", "--json"};
  auto plain = test::npuforge(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto args = base;
  args.insert(args.end(), {"--decoder", "lade"});
  auto spec = test::npuforge(args);
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  auto pj = nlohmann::json::parse(plain.out), sj = nlohmann::json::parse(spec.out);
  EXPECT_EQ(sj["tokens"], pj["tokens"]);
  ASSERT_TRUE(sj["stats"].contains("speculative"));
  EXPECT_GE(sj["stats"]["speculative"]["tau"].get<double>(), 1.0);
  EXPECT_FALSE(pj["stats"].contains("speculative"));

  auto text = test::npuforge({"run", model, "--prompt-ids", "1,450", "--max-new-tokens", "8", "--decoder", "lade", "--stats"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("tau"), std::string::npos) << text.err;

  auto bad = test::npuforge({"run", model, "--prompt-ids", "1,2", "--decoder", "medusa"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown speculative decoder 'medusa'; installed: "), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("lade"), std::string::npos) << bad.err;
}
