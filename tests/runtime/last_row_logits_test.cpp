// The LM head on the last row alone (host/pipeline/last_row_logits.h): on every decoder
// family's export, the prefill through logits.last_row gives the last row of the full
// logits, and the branch is only added where it computes the same thing.
#include <gtest/gtest.h>
#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <cmath>

#include "manifest/schema.h"
#include "pipeline/last_row_logits.h"
#include "pipeline/pipeline.h"
#include "runner/runner.h"
#include "runtime/package.h"
#include "support/plugins.h"

using namespace nf;

namespace {

const std::string kModels = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/";

// Prefill logits of the last prompt row, and every row's, through the dynamic runner.
std::vector<float> prefill_last_row(ir::ModelSet& ms, bool all_rows) {
  const host::PluginInfo& cpu = test::plugin(NF_KIND_BACKEND, "cpu");  // the plugins load once per process
  nlohmann::json options{{"threads", 1}};
  EXPECT_TRUE(manifest::validate_json(cpu.schema, options).empty());
  auto session = host::BackendSession::open_model_set(cpu, options, ms);
  host::DynamicRunner runner(*session, host::DecoderIO::from_spec(host::graph_specs(ms)[0]));
  const std::vector<int32_t> prompt{1, 17, 42, 5, 99, 23, 7};
  std::vector<float> logits = runner.append(prompt, all_rows);
  if (!all_rows) return logits;
  const size_t vocab = logits.size() / prompt.size();
  return {logits.end() - static_cast<long>(vocab), logits.end()};
}

}  // namespace

class LastRowLogits : public ::testing::TestWithParam<const char*> {};

TEST_P(LastRowLogits, EqualsTheLastRowOfTheFullHead) {
  auto ms = host::load_source_model(kModels + GetParam() + "/model.onnx", "");
  auto with = host::with_last_row_logits(*ms);
  ASSERT_NE(with, nullptr) << GetParam();
  const auto specs = host::graph_specs(*with);
  EXPECT_EQ(host::DecoderIO::from_spec(specs[0]).last_row_logits, decoder::kLastRowLogits);
  EXPECT_TRUE(host::DecoderIO::from_spec(specs[0]).extra_outputs.empty());
  EXPECT_EQ(host::with_last_row_logits(*with), nullptr) << "added twice";
  EXPECT_EQ(ms->graphs[0]->outputs.size() + 1, with->graphs[0]->outputs.size()) << "the source is not changed";

  const std::vector<float> full = prefill_last_row(*ms, true), last = prefill_last_row(*with, false);
  ASSERT_EQ(full.size(), last.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(full[i] - last[i])));
    scale = std::max(scale, static_cast<double>(std::abs(full[i])));
  }
  EXPECT_LT(worst, 1e-5 * scale) << GetParam();
  EXPECT_EQ(std::max_element(full.begin(), full.end()) - full.begin(),
            std::max_element(last.begin(), last.end()) - last.begin());
}

// Untied, tied (qwen2, gemma: Transpose of the table), a Cast after the head (phi3), a
// softcap chain Div/Tanh/Mul after it (gemma2), MoE, sliding window.
INSTANTIATE_TEST_SUITE_P(Families, LastRowLogits,
                         ::testing::Values("tiny_llama", "llama_gqa", "qwen2", "mistral_swa", "mixtral_moe",
                                           "zoo/gemma", "zoo/gemma2", "zoo/phi3", "zoo/llama3_opset14"));

TEST(LastRowLogitsRefused, WhereItWouldNotComputeTheSame) {
  // A Reshape between the head and logits may carry the prompt's length: no branch.
  auto ms = host::load_source_model(kModels + "tiny_llama/model.onnx", "");
  ir::Graph& g = *ms->graphs[0];
  ir::Node* producer = g.producer(decoder::kLogits);
  ASSERT_NE(producer, nullptr);
  auto reshape = std::make_unique<ir::Node>();
  reshape->op_type = "Reshape";
  reshape->name = "/extra/Reshape";
  reshape->inputs = {"logits.before_reshape", "/extra/shape"};
  reshape->outputs = {decoder::kLogits};
  for (std::string& o : producer->outputs)
    if (o == decoder::kLogits) o = "logits.before_reshape";
  g.initializers["/extra/shape"] = ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {3}, {1, -1, 2048}));
  g.nodes.push_back(std::move(reshape));
  EXPECT_EQ(host::with_last_row_logits(*ms), nullptr);

  // Static layouts (arcl's "io" metadata) and model sets of several graphs are not changed.
  auto static_ms = host::load_source_model(kModels + "tiny_llama/model.onnx", "");
  static_ms->metadata["io"] = R"({"layout":"static"})";
  EXPECT_EQ(host::with_last_row_logits(*static_ms), nullptr);
}
