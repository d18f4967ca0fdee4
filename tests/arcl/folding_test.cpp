// The graph toolkit on its own: fixing the inputs of a torch export to static shapes and
// folding must leave no Shape node and a fully typed graph.
#include <gtest/gtest.h>

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/fold_constants.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/infer_shapes.h>
#include <npuforge/graph/make_static.h>
#include <npuforge/graph/operators.h>
#include <npuforge/graph/unique_names.h>

#include <npuforge/kernels/tensor.h>

#include <algorithm>
#include <map>
#include <memory>

#include "host_glue.h"

namespace arcl_test {
namespace {

// The toolkit talks to graphs through the host API table, as plugins do.
struct Model {
  explicit Model(const std::string& name) {
    nf::host_api_slot() = host_table();
    ms.reset(load_model_set(name));
  }
  nf::Graph graph() const { return nf::ModelSet(ms.get()).graph(0); }
  struct Release {
    void operator()(nf_model_set* m) const { host_table()->model_set_release(m); }
  };
  std::unique_ptr<nf_model_set, Release> ms;
};

size_t count_op(const nf::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const nf::Node& node : g.nodes()) n += node.op_type() == op;
  return n;
}

TEST(GraphFolding, StaticInputsFoldEveryShapeSubgraph) {
  Model m("llama_gqa");
  nf::Graph g = m.graph();
  ASSERT_GT(count_op(g, "Shape"), 0u);
  const int64_t seq = 5, past = 3;
  g.set_value_type("input_ids", NF_DTYPE_INT64, {1, seq});
  g.set_value_type("position_ids", NF_DTYPE_INT64, {1, seq});
  g.set_value_type("attention_mask", NF_DTYPE_INT64, {1, past + seq});
  for (int l = 0; l < 3; ++l)
    for (const char* kind : {"key", "value"})
      g.set_value_type("past_key_values." + std::to_string(l) + "." + kind, NF_DTYPE_FLOAT32, {1, 2, past, 16});

  nf::graph::MakeStaticResult r = nf::graph::make_static(g, "llama_gqa");
  EXPECT_GT(r.folded_nodes, 200u);
  EXPECT_EQ(count_op(g, "Shape"), 0u);
  EXPECT_EQ(count_op(g, "Constant"), 0u);
  EXPECT_EQ(count_op(g, "Range"), 0u);
  auto present = nf::graph::get_value_type(g, "present.0.key");
  ASSERT_TRUE(present && present->dims);
  EXPECT_EQ(*present->dims, (std::vector<int64_t>{1, 2, past + seq, 16}));
  auto logits = nf::graph::get_value_type(g, "logits");
  EXPECT_EQ(*logits->dims, (std::vector<int64_t>{1, seq, 256}));
}

TEST(GraphFolding, DynamicInputsKeepShapesAndSayWhich) {
  Model m("llama_gqa");
  nf::Graph g = m.graph();
  try {
    nf::graph::make_static(g, "dynamic");
    FAIL() << "expected an error";
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no static shape"), std::string::npos) << e.what();
  }
}

// Shapes computed from Shape nodes of dynamic values are known in part: OPT runs its MLP on
// x.reshape(-1, x.size(-1)) and views the sum back with the 3-D shape; with batch and
// sequence symbolic, inference still knows the hidden axis of both (spinquant and split
// follow the residual stream through them by it). Before shape values, both were unknown.
TEST(GraphToolkit, ShapeValuesKnownInPartTypeReshapes) {
  Model m("zoo/opt");
  nf::Graph g = m.graph();
  nf::graph::infer_shapes(g);
  auto rows = nf::graph::get_value_type(g, "/layers.0/Reshape_output_0");
  ASSERT_TRUE(rows && rows->dims);
  EXPECT_EQ(*rows->dims, (std::vector<int64_t>{-1, 64}));
  auto back = nf::graph::get_value_type(g, "/layers.0/Reshape_1_output_0");
  ASSERT_TRUE(back && back->dims);
  EXPECT_EQ(*back->dims, (std::vector<int64_t>{-1, -1, 64}));
  // The head view [batch, seq, heads, head_dim] from Concat(Shape(x)[0], -1, 4, 16).
  auto heads = nf::graph::get_value_type(g, "/layers.0/self_attn/Reshape_output_0");
  ASSERT_TRUE(heads && heads->dims);
  EXPECT_EQ(*heads->dims, (std::vector<int64_t>{-1, -1, 4, 16}));
}

TEST(GraphToolkit, ViewNamesAndDeadNodes) {
  Model m("llama_gqa");
  nf::Graph g = m.graph();
  nf::graph::GraphView view(g);
  auto concat = view.consumers("past_key_values.0.key");
  ASSERT_EQ(concat.size(), 2u);  // the Concat and the Shape for the past length
  nf::graph::UniqueNames names(g);
  EXPECT_EQ(names.make("input_ids"), "input_ids_1");
  EXPECT_EQ(names.make("fresh"), "fresh");
  EXPECT_EQ(names.make("fresh"), "fresh_1");
  // Dropping the logits output kills the lm_head and the final norm.
  std::vector<std::string> outs = g.outputs();
  outs.erase(outs.begin());
  g.set_outputs(outs);
  size_t before = g.node_count();
  auto dead = nf::graph::eliminate_dead_nodes(g);
  EXPECT_GT(dead.nodes, 0u);
  EXPECT_EQ(g.node_count(), before - dead.nodes);
  EXPECT_FALSE(g.initializer("model.norm.weight"));
}

// An operator's node as the table sees it, without a graph.
struct TestNode final : nf::graph::OpNode {
  std::string op;
  int64_t version = 17;
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::vector<int64_t>> lists;
  size_t inputs = 1, outputs = 1;
  std::string_view op_type() const override { return op; }
  std::string_view name() const override { return "n"; }
  int64_t opset() const override { return version; }
  size_t input_count() const override { return inputs; }
  bool has_input(size_t i) const override { return i < inputs; }
  size_t output_count() const override { return outputs; }
  bool has_attr(const char* a) const override { return ints.count(a) || lists.count(a); }
  int64_t attr_int(const char* a, int64_t d) const override { return ints.count(a) ? ints.at(a) : d; }
  float attr_float(const char*, float d) const override { return d; }
  std::string attr_string(const char*, const std::string& d) const override { return d; }
  std::vector<int64_t> attr_ints(const char* a, std::vector<int64_t> d = {}) const override {
    return lists.count(a) ? lists.at(a) : d;
  }
  std::vector<float> attr_floats(const char*) const override { return {}; }
  nf::kernels::Tensor attr_tensor(const char*) const override { return {}; }
};

std::vector<float> run(const TestNode& n, const std::vector<const nf::kernels::Tensor*>& in) {
  const nf::graph::Operator* op = nf::graph::find_operator(n.op);
  if (!op) throw std::runtime_error("no operator " + n.op);
  std::vector<nf::kernels::Tensor> out(n.outputs);
  op->evaluate(n, in, out);
  return std::vector<float>(out[0].data<float>(), out[0].data<float>() + out[0].numel());
}

TEST(OperatorTable, OneEntryPerOperatorFoundByName) {
  std::vector<std::string> names = nf::graph::operator_names();
  ASSERT_GT(names.size(), 60u);
  EXPECT_TRUE(std::adjacent_find(names.begin(), names.end(), std::greater_equal<>()) == names.end())
      << "the table must be sorted by name with no name twice (find_operator searches it)";
  for (const std::string& n : names) {
    const nf::graph::Operator* op = nf::graph::find_operator(n);
    ASSERT_NE(op, nullptr) << n;
    EXPECT_EQ(op->name, n);
    EXPECT_NE(op->evaluate, nullptr) << n;
    EXPECT_EQ(nf::graph::find_operator(n, "ai.onnx"), op);
    EXPECT_EQ(nf::graph::find_operator(n, "com.microsoft"), nullptr);
  }
  EXPECT_EQ(nf::graph::find_operator("NoSuchOp"), nullptr);
  EXPECT_NE(nf::graph::find_operator("MatMul")->infer, nullptr);
}

// Behaviour the folding and the cpu engine used to get from two tables that disagreed.
TEST(OperatorTable, OneSemanticsForFoldingAndTheCpuEngine) {
  using nf::kernels::Tensor;
  Tensor a = Tensor::from(NF_DTYPE_FLOAT32, {4}, std::vector<float>{-7, 7, -7, 7});
  Tensor b = Tensor::from(NF_DTYPE_FLOAT32, {4}, std::vector<float>{3, -3, -3, 3});
  TestNode mod;
  mod.op = "Mod";
  mod.inputs = 2;
  mod.ints["fmod"] = 1;  // C's fmod: the sign of the dividend
  EXPECT_EQ(run(mod, {&a, &b}), (std::vector<float>{-1, 1, -1, 1}));

  // Softmax before opset 13 flattens to 2-D at `axis` (default 1): one softmax over 4 values.
  Tensor x = Tensor::from(NF_DTYPE_FLOAT32, {1, 2, 2}, std::vector<float>{0, 0, 0, 0});
  TestNode softmax;
  softmax.op = "Softmax";
  softmax.version = 11;
  EXPECT_EQ(run(softmax, {&x}), (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}));
  softmax.version = 13;  // from 13: along the last axis
  EXPECT_EQ(run(softmax, {&x}), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));

  // Transpose without perm reverses the dims; Squeeze of a dim that is not 1 is refused.
  Tensor m = Tensor::from(NF_DTYPE_FLOAT32, {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  TestNode transpose;
  transpose.op = "Transpose";
  EXPECT_EQ(run(transpose, {&m}), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  TestNode squeeze;
  squeeze.op = "Squeeze";
  squeeze.version = 11;
  squeeze.lists["axes"] = {0};
  EXPECT_THROW(run(squeeze, {&m}), nf::kernels::KernelError);
}

TEST(DecoderIO, NamesOfTheCacheAndTheirParts) {
  namespace d = nf::decoder;
  EXPECT_EQ(d::past_key(3), "past_key_values.3.key");
  EXPECT_EQ(d::present_value(12), "present.12.value");
  auto kv = d::parse_kv("present.12.value");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->layer, 12);
  EXPECT_EQ(kv->part, d::KvPart::Value);
  EXPECT_TRUE(kv->present);
  EXPECT_EQ(d::past_of(*kv), "past_key_values.12.value");
  EXPECT_TRUE(d::is_past_kv("past_key_values.0.key"));
  EXPECT_FALSE(d::is_present_kv("past_key_values.0.key"));
  for (const char* other : {"past_key_values.", "past_key_values.x.key", "past_key_values.1.keys", "present.1",
                            "present.-1.key", "past_key_values.1.key.scale", "logits", ""})
    EXPECT_FALSE(d::parse_kv(other)) << other;
  // The head is found through the ops between it and logits, past a bias that comes first
  // (Add(bias, MatMul): Phi-2's LM head), and not past kHeadHops.
  std::map<std::string, std::vector<std::string>> inputs = {
      {"logits", {"cast"}}, {"cast", {"bias", "head"}}, {"head", {"norm", "weight"}}, {"norm", {"x"}}};
  auto inputs_of = [&](const std::string& v) { return inputs.count(v) ? inputs.at(v) : std::vector<std::string>{}; };
  EXPECT_EQ(d::lm_head_output(inputs_of, [](const std::string& v) { return v == "head"; }), "head");
  EXPECT_EQ(d::lm_head_output(inputs_of, [](const std::string& v) { return v == "elsewhere"; }), "");
  // SDK 0.1's callback, the producer's first input, still compiles and walks first inputs.
  auto first_input_of = [](const std::string& v) { return std::string(v == "logits" ? "cast" : v == "cast" ? "head" : ""); };
  EXPECT_EQ(d::lm_head_output(first_input_of, [](const std::string& v) { return v == "head"; }), "head");
}

}  // namespace
}  // namespace arcl_test
