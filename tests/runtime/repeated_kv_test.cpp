// GQA's repeated KV cache read in place by the cpu engine (sdk/engine/src/repeated_kv.cpp):
// on every family's export the Unsqueeze/Expand/Reshape chains are gone from the plan and
// the logits are those of the graph as written; shapes that do not repeat the cache over
// heads run the nodes as written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "runner/runner.h"
#include "runtime/package.h"
#include "support/plugins.h"

using namespace nf;

namespace {

const std::string kModels = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/";

// The engine's profile (read once per process) names the nodes each plan holds.
const std::string& profile_path() {
  static const std::string path = [] {
    std::string p = (test::process_dir("repeated_kv") / "profile.json").string();
    setenv("NPUFORGE_PROFILE", p.c_str(), 1);
    return p;
  }();
  return path;
}

std::unique_ptr<host::BackendSession> open(ir::ModelSet& ms) {
  profile_path();
  const host::PluginInfo& cpu = test::plugin(NF_KIND_BACKEND, "cpu");
  nlohmann::json options{{"threads", 1}};
  EXPECT_TRUE(manifest::validate_json(cpu.schema, options).empty());
  return host::BackendSession::open_model_set(cpu, options, ms);
}

// Prefill and three decode steps; every row's logits of each pass, in order.
std::vector<float> generate_logits(ir::ModelSet& ms) {
  std::vector<float> all;
  {
    auto session = open(ms);
    host::DynamicRunner runner(*session, host::DecoderIO::from_spec(host::graph_specs(ms)[0]));
    std::vector<int32_t> tokens{1, 17, 42, 5, 99, 23, 7};
    for (int step = 0; step < 4; ++step) {
      std::vector<float> logits = runner.append(tokens, true);
      all.insert(all.end(), logits.begin(), logits.end());
      tokens = {static_cast<int32_t>(11 + step * 13)};
    }
  }
  return all;
}

// Names of the Expand nodes that repeat an unsqueezed value into a Reshape.
std::set<std::string> repeat_expands(const ir::Graph& g) {
  std::set<std::string> names;
  for (const auto& n : g.nodes) {
    if (n->op_type != "Expand") continue;
    const ir::Node* in = g.producer(n->inputs[0]);
    bool to_reshape = false;
    for (const auto& m : g.nodes)
      to_reshape |= m->op_type == "Reshape" && m->inputs[0] == n->outputs[0];
    if (in && in->op_type == "Unsqueeze" && to_reshape) names.insert(n->name);
  }
  return names;
}

// Node names of the profiled plans of graph `graph`.
std::set<std::string> profiled_nodes(const std::string& graph) {
  std::ifstream in(profile_path());
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> names;
  for (const auto& pass : j.at("passes"))
    if (pass.at("graph") == graph)
      for (const auto& n : pass.at("nodes")) names.insert(n.at("node").get<std::string>());
  return names;
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(want[i] - got[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
  }
  EXPECT_LE(worst, 1e-5 * scale) << what;
}

}  // namespace

class RepeatedKv : public ::testing::TestWithParam<const char*> {};

TEST_P(RepeatedKv, ReadsTheCacheInPlaceWithTheSameLogits) {
  auto fused = host::load_source_model(kModels + GetParam() + "/model.onnx", "");
  const std::set<std::string> expands = repeat_expands(*fused->graphs[0]);
  ASSERT_FALSE(expands.empty()) << GetParam() << " repeats no KV head";
  // The same graph with every repeat also a graph output: the engine keeps the nodes.
  auto plain = fused->clone();
  for (const auto& n : plain->graphs[0]->nodes)
    if (expands.count(n->name)) plain->graphs[0]->outputs.push_back(n->outputs[0]);
  const std::string tag = std::string(GetParam()).substr(std::string(GetParam()).rfind('/') + 1);
  fused->graphs[0]->name = "fused_" + tag;
  plain->graphs[0]->name = "plain_" + tag;

  expect_close(generate_logits(*plain), generate_logits(*fused), GetParam());
  const std::set<std::string> in_fused = profiled_nodes(fused->graphs[0]->name),
                              in_plain = profiled_nodes(plain->graphs[0]->name);
  ASSERT_FALSE(in_fused.empty());
  for (const std::string& e : expands) {
    EXPECT_EQ(in_fused.count(e), 0u) << e << " still runs";
    EXPECT_EQ(in_plain.count(e), 1u) << e << " was removed though its value is a graph output";
  }
}

// GQA (Llama, Qwen2, Mistral with a sliding window, Mixtral), MQA (one KV head), and the SDPA
// exports, whose K^T is scaled by a Mul between the transpose and the score MatMul.
INSTANTIATE_TEST_SUITE_P(Families, RepeatedKv,
                         ::testing::Values("llama_gqa", "qwen2", "mistral_swa", "mixtral_moe", "zoo/mqa",
                                           "zoo/llama3_opset14", "zoo/llama3_sdpa", "zoo/qwen3_sdpa"));

namespace {

// y = A * Transpose(Reshape(Expand(Unsqueeze(kv, 2), expand_shape), reshape_shape)), with
// both shapes graph inputs, so one plan meets shapes that repeat heads and shapes that do not.
std::unique_ptr<ir::ModelSet> repeat_graph(const std::string& name, bool keep_expand) {
  auto ms = std::make_unique<ir::ModelSet>();
  auto g = std::make_unique<ir::Graph>();
  g->name = name;
  g->opsets[""] = 17;
  g->inputs = {"a", "kv", "expand_shape", "reshape_shape"};
  g->outputs = {"y"};
  if (keep_expand) g->outputs.push_back("expanded");
  g->initializers["axes"] = ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {1}, {2}));
  auto node = [&](const char* op, std::vector<std::string> in, std::string out, std::map<std::string, ir::Attribute> attrs = {}) {
    auto n = std::make_unique<ir::Node>();
    n->op_type = op;
    n->name = out;
    n->inputs = std::move(in);
    n->outputs = {std::move(out)};
    n->attrs = std::move(attrs);
    g->nodes.push_back(std::move(n));
  };
  ir::Attribute perm;
  perm.type = NF_ATTR_INTS;
  perm.ints = {0, 1, 3, 2};
  node("Unsqueeze", {"kv", "axes"}, "unsqueezed");
  node("Expand", {"unsqueezed", "expand_shape"}, "expanded");
  node("Reshape", {"expanded", "reshape_shape"}, "repeated");
  node("Transpose", {"repeated"}, "keys_t", {{"perm", perm}});
  node("MatMul", {"a", "keys_t"}, "y");
  ms->graphs.push_back(std::move(g));
  return ms;
}

host::TensorPtr floats(std::vector<int64_t> dims, float seed) {
  ir::Tensor t = ir::Tensor::zeros(NF_DTYPE_FLOAT32, dims);
  float* p = t.mutable_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return ir::make_tensor_ref(std::move(t));
}

host::TensorPtr ints(std::vector<int64_t> v) {
  return ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {static_cast<int64_t>(v.size())}, v));
}

}  // namespace

TEST(RepeatedKvShapes, ShapesThatDoNotRepeatHeadsRunAsWritten) {
  struct Case {
    const char* what;
    std::vector<int64_t> a, kv, expand, reshape, y;
  };
  const Case cases[] = {
      {"two query heads per KV head", {1, 4, 3, 8}, {1, 2, 5, 8}, {1, 2, 2, 5, 8}, {1, 4, 5, 8}, {1, 4, 3, 5}},
      {"0 and -1 in the reshape", {1, 6, 2, 8}, {1, 2, 5, 8}, {1, 2, 3, 5, 8}, {0, -1, 5, 8}, {1, 6, 2, 5}},
      {"the repeat folded into the sequence", {1, 2, 3, 8}, {1, 2, 5, 8}, {1, 2, 2, 5, 8}, {1, 2, 10, 8}, {1, 2, 3, 10}},
      {"a broadcast batch", {1, 4, 3, 8}, {1, 2, 5, 8}, {2, 2, 2, 5, 8}, {2, 4, 5, 8}, {2, 4, 3, 5}},
  };
  auto fused_ms = repeat_graph("fused", false), plain_ms = repeat_graph("plain", true);
  auto fused = open(*fused_ms), plain = open(*plain_ms);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::vector<host::NamedTensor> in{
        {"a", floats(c.a, 0.5f)}, {"kv", floats(c.kv, 1.5f)}, {"expand_shape", ints(c.expand)}, {"reshape_shape", ints(c.reshape)}};
    const host::TensorPtr want = plain->run("plain", in, {"y"}).at(0), got = fused->run("fused", in, {"y"}).at(0);
    ASSERT_EQ(got->tensor.dims, c.y);
    ASSERT_EQ(want->tensor.dims, c.y);
    const float* w = want->tensor.as<float>();
    expect_close({w, w + want->tensor.numel()}, {got->tensor.as<float>(), got->tensor.as<float>() + got->tensor.numel()}, c.what);
  }
  // A shape the Expand itself refuses fails as the node would, in one line.
  const std::vector<host::NamedTensor> bad{
      {"a", floats({1, 4, 3, 8}, 0.5f)}, {"kv", floats({1, 2, 5, 8}, 1.5f)}, {"expand_shape", ints({1, 3, 2, 5, 8})}, {"reshape_shape", ints({1, 4, 5, 8})}};
  EXPECT_THROW(fused->run("fused", bad, {"y"}), std::exception);
}
