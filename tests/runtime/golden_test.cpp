// The float reference path (ONNX import -> cpu backend -> dynamic runner) against the
// outputs torch computed for each test model: same greedy tokens, logits within 1e-4
// of the largest magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "manifest/schema.h"
#include "onnx/onnx_io.h"
#include "pipeline/pipeline.h"
#include "pipeline/tied_head.h"
#include "runner/generate.h"
#include "runtime/package.h"
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

// torch's constant folding stores a tied LM head twice: the embedding and its transpose
// (onnx::MatMul_N). The build ties the copy back to the table: Golden.* above runs qwen2
// that way and still equals torch. Here: the copy is gone and a Transpose of the table
// produces its value; an untied head, or a copy that differs in one element, stays as it is.
// ONNX Runtime GenAI's fp32 form of a tied model: the table stored once as the head's [H, V]
// weight, the embeddings gathered from its Transpose; turned round into the table [V, H] and
// the head reading its Transpose.
TEST(TiedHead, TableGatheredFromTheHeadsTransposeBecomesTheTable) {
  auto g = onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/legacy/qwen2_genai_tied/model.onnx");
  ASSERT_TRUE(host::tied_head_as_table(*g));
  const ir::Tensor head = *g->initializer("lm_head.MatMul.weight");  // [H, V]
  size_t calls = 0;
  EXPECT_EQ(host::table_from_tied_head(*g, [&](ir::TensorRef&) { ++calls; }), "/model/embed_tokens/Transpose/output_0");
  EXPECT_EQ(calls, 1u);
  const ir::Tensor* table = g->initializer("/model/embed_tokens/Transpose/output_0");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->dims, (std::vector<int64_t>{head.dims[1], head.dims[0]}));
  EXPECT_TRUE(ir::is_transpose_of(*table, head));
  EXPECT_EQ(g->initializer("lm_head.MatMul.weight"), nullptr);
  ir::Node* t = g->producer("lm_head.MatMul.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->op_type, "Transpose");
  EXPECT_EQ(t->inputs, std::vector<std::string>{"/model/embed_tokens/Transpose/output_0"});
  EXPECT_NO_THROW(g->execution_order());
  EXPECT_FALSE(host::tied_head_as_table(*g));
  EXPECT_EQ(host::table_from_tied_head(*g), "");
}

TEST(TiedHead, FoldedCopyReadsTheTableAndOthersStay) {
  const std::string models = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/";
  for (const char* tied : {"qwen2", "zoo/gemma"}) {
    auto g = onnx_io::load_model(models + tied + "/model.onnx");
    const size_t inits = g->initializers.size();
    std::string copy = host::tie_lm_head(*g);
    ASSERT_FALSE(copy.empty()) << tied;
    EXPECT_EQ(g->initializers.count(copy), 0u) << tied;
    EXPECT_EQ(g->initializers.size(), inits - 1) << tied;
    ir::Node* t = g->producer(copy);
    ASSERT_NE(t, nullptr) << tied;
    EXPECT_EQ(t->op_type, "Transpose");
    EXPECT_EQ(t->inputs[0], "model.embed_tokens.weight") << tied;
    EXPECT_NO_THROW(g->execution_order());
  }
  auto untied = onnx_io::load_model(models + "zoo/llama3/model.onnx");
  EXPECT_EQ(host::tie_lm_head(*untied), "");

  auto g = onnx_io::load_model(models + "qwen2/model.onnx");
  ir::Node* head = g->producer("logits");
  while (head && head->op_type != "MatMul") head = g->producer(head->inputs[0]);
  ASSERT_NE(head, nullptr);
  ir::Tensor& b = g->initializers.at(head->inputs[1])->tensor;
  b.mutable_as<float>()[b.numel() - 1] += 1.f;  // the last element: past the sampled ones
  EXPECT_EQ(host::tie_lm_head(*g), "");
  EXPECT_TRUE(g->initializers.count(head->inputs[1]));
  // All-zero tables (synth_model.py --zeros standing in for an untied model) are equal but
  // not tied weights: left alone, so estimate-only packages keep the head they model.
  ir::Tensor& e = g->initializers.at("model.embed_tokens.weight")->tensor;
  std::fill(b.mutable_as<float>(), b.mutable_as<float>() + b.numel(), 0.f);
  std::fill(e.mutable_as<float>(), e.mutable_as<float>() + e.numel(), 0.f);
  EXPECT_EQ(host::tie_lm_head(*g), "");
}
