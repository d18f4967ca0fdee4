// ONNX Runtime GenAI's CPU export: its contrib operators are expanded on load into standard
// operators (host/pipeline/microsoft_ops.h). That the expansion computes the same numbers is
// families_test's (legacy/llama3_genai keeps torch's greedy tokens through every chain); here,
// what it leaves and what it refuses.
#include <gtest/gtest.h>

#include <set>

#include "onnx/onnx_io.h"
#include "pipeline/microsoft_ops.h"

using namespace nf;

namespace {

std::unique_ptr<ir::Graph> genai_export() {
  return onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/legacy/llama3_genai/model.onnx");
}

ir::Node& first(ir::Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n->op_type == op) return *n;
  throw std::runtime_error("no " + op);
}

// The one-line error expanding `g` gives, or "" when it expands.
std::string refusal(ir::Graph& g) {
  try {
    host::expand_microsoft_ops(g);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(MicrosoftOps, EveryContribNodeBecomesStandardOperators) {
  auto g = genai_export();
  // 3 layers: a GroupQueryAttention each; the first norm simplified, the six after it (the
  // last the final norm) with the residual Add inside.
  EXPECT_EQ(host::expand_microsoft_ops(*g), 10u);
  std::set<std::string> ops;
  for (const auto& n : g->nodes) {
    EXPECT_EQ(n->domain, "") << n->name;
    ops.insert(n->op_type);
  }
  for (const char* gone : {"GroupQueryAttention", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization",
                           "ReduceSum"})  // seqlens_k is computed from the mask and read by nothing now
    EXPECT_FALSE(ops.count(gone)) << gone;
  for (const char* made : {"Split", "Range", "Softmax", "Where", "Expand", "ReduceMean", "Reciprocal"})
    EXPECT_TRUE(ops.count(made)) << made;
  EXPECT_EQ(ir::graph_problem(*g), "");
  EXPECT_EQ(host::expand_microsoft_ops(*g), 0u);
}

// The builder's DirectML layout rotates q and k by RotaryEmbedding nodes before attention
// (legacy/llama3_genai_dml), ChatGLM's by interleaved pairs inside GroupQueryAttention
// (legacy/glm_genai), a torch export at opset 23 holds Attention, RotaryEmbedding and
// RMSNormalization (legacy/llama3_opset23): each expands to standard operators
// (families_test: torch's tokens).
TEST(MicrosoftOps, RotaryEmbeddingAndInterleavedPairsExpand) {
  for (const char* model : {"llama3_genai_dml", "glm_genai", "llama3_opset23"}) {
    auto g = onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/legacy/" + model + "/model.onnx");
    EXPECT_GT(host::expand_microsoft_ops(*g), 0u) << model;
    for (const auto& n : g->nodes) EXPECT_EQ(n->domain, "") << model << ": " << n->name;
    EXPECT_EQ(ir::graph_problem(*g), "") << model;
  }
}

TEST(MicrosoftOps, FormsItDoesNotExpandAreNamed) {
  // opset 23's is_causal aligns the causal mask to the cache's start, not the rows' positions.
  auto g = onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/legacy/llama3_opset23/model.onnx");
  ir::Attribute causal;
  causal.type = NF_ATTR_INT;
  causal.i = 1;
  first(*g, "Attention").attrs["is_causal"] = causal;
  EXPECT_NE(refusal(*g).find("Attention 'model.layers.0/Attention': is_causal (a causal mask aligned to the cache's "
                             "start) is not expanded"),
            std::string::npos)
      << refusal(*g);

  g = onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/legacy/llama3_genai_dml/model.onnx");
  first(*g, "RotaryEmbedding").attrs["is_packed_batching"] = first(*g, "GroupQueryAttention").attrs.at("do_rotary");
  first(*g, "RotaryEmbedding").attrs["is_packed_batching"].i = 1;
  EXPECT_EQ(refusal(*g), "the model's ONNX Runtime contrib operators: RotaryEmbedding "
                         "'/model/layers.0/attn/q_rotary/RotaryEmbedding': packed batching is not expanded");

  g = genai_export();
  first(*g, "GroupQueryAttention").inputs[3] = "";
  EXPECT_NE(refusal(*g).find("without past_key / past_value (no KV cache)"), std::string::npos);

  g = genai_export();
  auto& norm = first(*g, "SimplifiedLayerNormalization");
  norm.outputs.push_back("inv_std_var");
  g->outputs.push_back("inv_std_var");
  EXPECT_NE(refusal(*g).find("output 1 is read; only output 0 (the normalized value) is expanded"), std::string::npos);
}
