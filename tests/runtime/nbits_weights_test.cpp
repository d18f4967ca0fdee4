// MatMulNBits (ONNX Runtime's int4 weights) read as MatMul over float weights on load
// (host/pipeline/nbits_weights.h). End to end, legacy/llama3_genai_int4 keeps the greedy
// tokens of the torch model holding the dequantized weights (families_test).
#include <gtest/gtest.h>

#include "pipeline/nbits_weights.h"

using namespace nf;

namespace {

// K = 20 (the second block of 16 only partly used), N = 2, 4-bit codes, zero points for
// column 0 (blocks 3 and 5) and column 1 (blocks 8 and 8), a bias.
ir::Graph one_matmul(bool zero_points, bool bias) {
  ir::Graph g;
  g.inputs = {"a"};
  g.outputs = {"y"};
  std::vector<uint8_t> codes(2 * 2 * 8);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  g.initializers["w_Q4"] = ir::make_tensor_ref(ir::Tensor::from<uint8_t>(NF_DTYPE_UINT8, {2, 2, 8}, codes));
  g.initializers["w_scales"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {4}, {0.5f, 2.f, 1.f, -1.f}));
  auto n = std::make_unique<ir::Node>();
  n->op_type = "MatMulNBits";
  n->domain = "com.microsoft";
  n->name = "mm_Q4";
  n->inputs = {"a", "w_Q4", "w_scales"};
  if (zero_points) {
    g.initializers["w_zp"] = ir::make_tensor_ref(ir::Tensor::from<uint8_t>(NF_DTYPE_UINT8, {2}, {0x53, 0x88}));
    n->inputs.push_back("w_zp");
  }
  if (bias) {
    g.initializers["b"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2}, {1.f, 2.f}));
    n->inputs.resize(5);
    n->inputs.push_back("b");
  }
  n->outputs = {"y"};
  for (auto [k, v] : {std::pair{"K", 20}, {"N", 2}, {"bits", 4}, {"block_size", 16}}) {
    n->attrs[k].type = NF_ATTR_INT;
    n->attrs[k].i = v;
  }
  g.nodes.push_back(std::move(n));
  return g;
}

}  // namespace

TEST(NBitsWeights, CodesMinusZeroPointTimesScale) {
  ir::Graph g = one_matmul(true, true);
  ASSERT_EQ(host::nbits_nodes(g), 1u);
  auto d = host::dequantize_nbits_nodes(g);
  EXPECT_EQ(d.weights, 1u);
  EXPECT_EQ(d.bytes, 20u * 2 * 4);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0]->op_type, "MatMul");
  EXPECT_EQ(g.nodes[0]->domain, "");
  EXPECT_TRUE(g.nodes[0]->attrs.empty());
  const ir::Tensor* w = g.initializer(g.nodes[0]->inputs[1]);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->dims, (std::vector<int64_t>{20, 2}));
  // Column 0, block 0: byte i holds codes (i, 15 - i) for k = 2i, 2i + 1; zero point 3, scale 0.5.
  EXPECT_EQ(w->as<float>()[0 * 2 + 0], (0 - 3) * 0.5f);
  EXPECT_EQ(w->as<float>()[1 * 2 + 0], (15 - 3) * 0.5f);
  EXPECT_EQ(w->as<float>()[6 * 2 + 0], (3 - 3) * 0.5f);
  // Column 0, block 1 (k = 16..19): bytes 8, 9; zero point 5, scale 2.
  EXPECT_EQ(w->as<float>()[16 * 2 + 0], (8 - 5) * 2.f);
  EXPECT_EQ(w->as<float>()[19 * 2 + 0], (15 - 9 - 5) * 2.f);
  // Column 1, block 1: bytes 24.. of the codes, zero point 8, scale -1.
  EXPECT_EQ(w->as<float>()[17 * 2 + 1], (15 - 8 - 8) * -1.f);
  EXPECT_EQ(g.nodes[1]->op_type, "Add");  // the bias, into the node's own output
  EXPECT_EQ(g.nodes[1]->outputs, std::vector<std::string>{"y"});
  EXPECT_EQ(g.nodes[1]->inputs[0], g.nodes[0]->outputs[0]);
  EXPECT_EQ(g.initializer("w_Q4"), nullptr);  // the packed forms go
  EXPECT_EQ(g.initializer("w_zp"), nullptr);
  EXPECT_EQ(ir::graph_problem(g), "");
}

TEST(NBitsWeights, WithoutZeroPointsTheMiddleCode) {
  ir::Graph g = one_matmul(false, false);
  host::dequantize_nbits_nodes(g);
  const ir::Tensor* w = g.initializer(g.nodes[0]->inputs[1]);
  EXPECT_EQ(w->as<float>()[1 * 2 + 0], (15 - 8) * 0.5f);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0]->outputs, std::vector<std::string>{"y"});
}

// ONNX Runtime's HQQ quantizer writes one float zero point per block and column, of the
// scales' type, not rounded to a code: value = code x scale + (-scale x zero point), the order
// ONNX Runtime's own dequantization computes it in.
TEST(NBitsWeights, FloatZeroPointsOnePerBlock) {
  ir::Graph g = one_matmul(false, false);
  const std::vector<float> zp = {3.5f, 5.25f, 8.f, 7.75f};
  g.initializers["zp_float"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 2}, zp));
  g.nodes[0]->inputs.push_back("zp_float");
  host::dequantize_nbits_nodes(g);
  const ir::Tensor* w = g.initializer(g.nodes[0]->inputs[1]);
  ASSERT_NE(w, nullptr);
  auto at = [&](float code, float scale, float zero) { return code * scale + -scale * zero; };
  EXPECT_EQ(w->as<float>()[0 * 2 + 0], at(0, 0.5f, 3.5f));    // column 0, block 0
  EXPECT_EQ(w->as<float>()[1 * 2 + 0], at(15, 0.5f, 3.5f));
  EXPECT_EQ(w->as<float>()[19 * 2 + 0], at(15 - 9, 2.f, 5.25f));  // column 0, block 1
  EXPECT_EQ(w->as<float>()[17 * 2 + 1], at(15 - 8, -1.f, 7.75f));  // column 1, block 1
  EXPECT_EQ(g.initializer("zp_float"), nullptr);
  EXPECT_EQ(ir::graph_problem(g), "");
}

TEST(NBitsWeights, FormsItDoesNotReadAreNamed) {
  ir::Graph g = one_matmul(false, false);
  g.nodes[0]->inputs = {"a", "w_Q4", "w_scales", "", "g_idx"};
  EXPECT_THROW(
      {
        try {
          host::dequantize_nbits_nodes(g);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "MatMulNBits 'mm_Q4': its g_idx input (act-order) is not read");
          throw;
        }
      },
      std::runtime_error);
  g = one_matmul(false, false);  // float zero points, one short of a value per block
  g.initializers["zp_float"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {3}, {0, 0, 0}));
  g.nodes[0]->inputs.push_back("zp_float");
  try {
    host::dequantize_nbits_nodes(g);
    ADD_FAILURE() << "three float zero points for four blocks were read";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "MatMulNBits 'mm_Q4': its zero points are neither packed uint8 codes nor one float per "
                           "block and row (the scales' type)");
  }
  g = one_matmul(false, false);
  g.nodes[0]->attrs["K"].i = 40;  // more codes than the constant holds
  EXPECT_THROW(host::dequantize_nbits_nodes(g), std::runtime_error);
  g.nodes[0]->attrs["K"].i = int64_t{1} << 62;  // a hostile size: one line, not an overflow
  EXPECT_THROW(host::dequantize_nbits_nodes(g), std::runtime_error);
}

namespace {

// GatherBlockQuantized over a 2 x 32 table of 4-bit codes (blocks of 16, a zero point per
// block), read through a Reshape of the codes and a Cast of the scales (GenAI's shared
// embeddings view the LM head's codes so).
ir::Graph one_gather(int64_t gather_axis) {
  ir::Graph g;
  g.inputs = {"ids"};
  g.outputs = {"rows"};
  std::vector<uint8_t> codes(2 * 16);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  g.initializers["head_Q4"] = ir::make_tensor_ref(ir::Tensor::from<uint8_t>(NF_DTYPE_UINT8, {2, 2, 8}, codes));
  g.initializers["shape"] = ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {2}, {0, -1}));
  g.initializers["scales"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 2}, {0.5f, 2.f, 1.f, -1.f}));
  g.initializers["zp"] = ir::make_tensor_ref(ir::Tensor::from<uint8_t>(NF_DTYPE_UINT8, {2, 1}, {0x53, 0x88}));
  auto node = [&](const char* op, std::vector<std::string> in, std::string out, const char* domain = "") {
    g.nodes.push_back(std::make_unique<ir::Node>(ir::Node{op, domain, out, std::move(in), {out}, {}}));
    return g.nodes.back().get();
  };
  node("Reshape", {"head_Q4", "shape"}, "table_codes");
  ir::Attribute& to = node("Cast", {"scales"}, "table_scales")->attrs["to"];
  to.type = NF_ATTR_INT;
  to.i = NF_DTYPE_FLOAT32;
  ir::Node* gbq = node("GatherBlockQuantized", {"table_codes", "ids", "table_scales", "zp"}, "rows", "com.microsoft");
  for (auto [k, v] : {std::pair{"bits", int64_t{4}}, {"block_size", 16}, {"gather_axis", gather_axis}}) {
    gbq->attrs[k].type = NF_ATTR_INT;
    gbq->attrs[k].i = v;
  }
  return g;
}

}  // namespace

TEST(NBitsWeights, GatheredTableRowsAreTheirCodesDequantized) {
  ir::Graph g = one_gather(0);
  ASSERT_EQ(host::nbits_nodes(g), 1u);
  EXPECT_EQ(host::nbits_weight_elements(g, *g.nodes[2]), 2u * 32);
  auto d = host::dequantize_nbits_nodes(g);
  EXPECT_EQ(d.tables, 1u);
  EXPECT_EQ(d.weights, 0u);
  ASSERT_EQ(g.nodes.size(), 1u);  // the Reshape and Cast went with the packed values
  EXPECT_EQ(g.nodes[0]->op_type, "Gather");
  EXPECT_EQ(g.nodes[0]->inputs[1], "ids");
  const ir::Tensor* t = g.initializer(g.nodes[0]->inputs[0]);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->dims, (std::vector<int64_t>{2, 32}));
  // Row 0, block 0: byte i holds codes (i, 15 - i) for k = 2i, 2i + 1; zero point 3, scale 0.5.
  EXPECT_EQ(t->as<float>()[0], (0 - 3) * 0.5f);
  EXPECT_EQ(t->as<float>()[1], (15 - 3) * 0.5f);
  // Row 0, block 1 (k = 16..31): bytes 8.., zero point 5, scale 2. Row 1, block 1: zero point 8, scale -1.
  EXPECT_EQ(t->as<float>()[16], (8 - 5) * 2.f);
  EXPECT_EQ(t->as<float>()[32 + 17], (15 - 8 - 8) * -1.f);
  for (const char* gone : {"head_Q4", "scales", "zp", "shape"}) EXPECT_EQ(g.initializer(gone), nullptr) << gone;
  EXPECT_EQ(ir::graph_problem(g), "");
}

TEST(NBitsWeights, GatherOfColumnsIsNamed) {
  ir::Graph g = one_gather(1);
  try {
    host::dequantize_nbits_nodes(g);
    FAIL() << "a table gathered by columns was read";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "GatherBlockQuantized 'rows': only rows gathered (gather_axis 0) from a table quantized along them "
                 "(quantize_axis 1) are read");
  }
}
