// The float reference path (ONNX import -> cpu backend -> dynamic runner) against the
// outputs torch computed for each test model: same greedy tokens, logits within 1e-4
// of the largest magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "runner/generate.h"
#include "tokenizer/tokenizer.h"

using namespace nf;

namespace {

nlohmann::json read_json(const std::string& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// Max |a-b| relative to the largest |b|.
double relative_error(const std::vector<float>& a, const nlohmann::json& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double ref = b[i].get<double>();
    worst = std::max(worst, std::abs(a[i] - ref));
    scale = std::max(scale, std::abs(ref));
  }
  return worst / scale;
}

}  // namespace

class Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Golden, GreedyAndLogitsMatchTorch) {
  std::string dir = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/" + GetParam();
  auto golden = read_json(dir + "/golden.json");
  host::Registry reg;
  reg.load_directories({host::Registry::builtin_dir()});
  const host::PluginInfo* cpu = reg.find(NF_KIND_BACKEND, "cpu");
  ASSERT_NE(cpu, nullptr);
  nlohmann::json options = nlohmann::json::object();
  ASSERT_TRUE(manifest::validate_json(cpu->schema, options).empty());
  auto ms = host::load_source_model(dir + "/model.onnx", "");
  auto session = host::BackendSession::open_model_set(*cpu, options, *ms);
  host::DynamicRunner runner(*session, host::DecoderIO::from_spec(host::graph_specs(*ms)[0]));

  std::vector<int32_t> prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  auto want = golden["generated_ids"].get<std::vector<int32_t>>();
  std::vector<float> logits = runner.append(prompt);
  EXPECT_LT(relative_error(logits, golden["prefill_last_logits"]), 1e-4);
  std::vector<int32_t> got;
  for (size_t i = 0; i < want.size(); ++i) {
    got.push_back(host::argmax(logits));
    if (i + 1 < want.size()) logits = runner.append(std::vector<int32_t>{got.back()});
  }
  EXPECT_EQ(got, want);
  EXPECT_LT(relative_error(logits, golden["last_logits"]), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Models, Golden,
                         ::testing::Values("llama_gqa", "qwen2", "mixtral_moe", "mistral_swa", "tiny_llama"));

// `npuforge eval`'s perplexity (same windows as tools/models/train_tiny_llama.py's
// protocol, recorded in eval.json) equals torch's to within 0.1%.
TEST(Perplexity, TinyLlamaMatchesTorch) {
  std::string dir = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/tiny_llama";
  auto want = read_json(dir + "/eval.json");
  host::Registry reg;
  reg.load_directories({host::Registry::builtin_dir()});
  const host::PluginInfo* cpu = reg.find(NF_KIND_BACKEND, "cpu");
  ASSERT_NE(cpu, nullptr);
  nlohmann::json options{{"threads", 1}};
  ASSERT_TRUE(manifest::validate_json(cpu->schema, options).empty());
  auto ms = host::load_source_model(dir + "/model.onnx", "");
  auto session = host::BackendSession::open_model_set(*cpu, options, *ms);
  host::DynamicRunner runner(*session, host::DecoderIO::from_spec(host::graph_specs(*ms)[0]));
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  std::ifstream in(dir + "/heldout.txt", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto ids = tok.encode(text, false);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), want["heldout_tokens"].get<int64_t>());
  auto r = host::perplexity(runner, ids, want["window_length"].get<int>());
  EXPECT_EQ(r.tokens_scored, want["tokens_scored"].get<int64_t>());
  EXPECT_NEAR(r.perplexity / want["ppl"].get<double>(), 1.0, 1e-3) << r.perplexity;
}
