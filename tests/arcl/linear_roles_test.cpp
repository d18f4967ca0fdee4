// npuforge::graph::linear_roles on every exported model of tests/models (our generator's,
// the family zoo, the legacy and ONNX Runtime GenAI layouts): each linear gets its role and
// its block from the dataflow alone, whatever the exporter named it (q_proj, c_attn,
// query_key_value, Wqkv, out_proj, dense_h_to_4h, ...).
#include <gtest/gtest.h>

#include <npuforge/decoder_graph.hpp>
#include <npuforge/graph/copy_node.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/kv_layers.h>
#include <npuforge/graph/linear_roles.h>
#include <npuforge/hf_config.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "host_glue.h"

namespace arcl_test {
namespace {

namespace fs = std::filesystem;
using nf::graph::LinearRole;

std::vector<std::string> exported_models() {
  std::vector<std::string> r;
  const fs::path root = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "models";
  for (const fs::path& base : {root, root / "zoo", root / "legacy"})
    for (const auto& e : fs::directory_iterator(base))
      if (fs::exists(e.path() / "model.onnx") && fs::exists(e.path() / "config.json"))
        r.push_back(fs::relative(e.path(), root).string());
  std::sort(r.begin(), r.end());
  return r;
}

class LinearRoles : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearRoles, EveryBlockHasItsAttentionAndMlpProjections) {
  const std::string model = GetParam();
  nf::host_api_slot() = host_table();
  struct Release {
    void operator()(nf_model_set* m) const { host_table()->model_set_release(m); }
  };
  std::unique_ptr<nf_model_set, Release> ms(load_model_set(model));
  const nf::ModelSet set(ms.get());
  const nlohmann::json config =
      nlohmann::json::parse(std::ifstream(fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "models" / model / "config.json"));
  const int64_t layers = nf::hf_config::get_int(config, "num_hidden_layers").value_or(-1);
  ASSERT_GT(layers, 0) << model;

  bool moe = false;  // its routers are linears of no attention / MLP role
  for (const char* key : {"num_local_experts", "num_experts"})
    moe |= config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() > 0;

  const auto roles = nf::graph::linear_roles(set.graph(0));
  std::map<int64_t, std::map<LinearRole, int>> per_block;
  int heads = 0;
  for (const auto& [output, use] : roles) {
    if (!moe) {
      EXPECT_NE(use.role, LinearRole::other) << model << ": " << output;
    }
    if (use.role == LinearRole::lm_head) {
      ++heads;
      EXPECT_EQ(use.block, -1) << model << ": " << output;
      continue;
    }
    EXPECT_GE(use.block, 0) << model << ": " << output << " (" << nf::graph::role_name(use.role) << ")";
    EXPECT_LT(use.block, layers) << model << ": " << output << " (" << nf::graph::role_name(use.role) << ")";
    ++per_block[use.block][use.role];
  }
  EXPECT_EQ(heads, 1) << model;
  // decoder_graph.hpp's head_matmul names the same node, or none for a head that reads its
  // weight through a Transpose (a tied table): never another linear further back.
  if (auto head = nf::decoder::head_matmul(set.graph(0))) {
    auto it = roles.find(head->output(0));
    ASSERT_NE(it, roles.end()) << model;
    EXPECT_EQ(it->second.role, LinearRole::lm_head) << model << ": head_matmul gave " << head->name();
  }
  // Where the exporter used one of HF's unambiguous module names, the role agrees with it.
  static const std::pair<const char*, LinearRole> kNames[] = {
      {"/q_proj/", LinearRole::query},          {"/k_proj/", LinearRole::key},
      {"/v_proj/", LinearRole::value},          {"/o_proj/", LinearRole::attention_output},
      {"/out_proj/", LinearRole::attention_output}, {"/c_attn/", LinearRole::fused_qkv},
      {"/query_key_value/", LinearRole::fused_qkv}, {"/Wqkv/", LinearRole::fused_qkv},
      {"/qkv_proj/", LinearRole::fused_qkv},    {"/W_pack/", LinearRole::fused_qkv},
      {"/gate_proj/", LinearRole::ffn_input},   {"/up_proj/", LinearRole::ffn_input},
      {"/gate_up_proj/", LinearRole::ffn_input}, {"/fc1/", LinearRole::ffn_input},
      {"/c_fc/", LinearRole::ffn_input},        {"/dense_h_to_4h/", LinearRole::ffn_input},
      {"/down_proj/", LinearRole::ffn_down},    {"/fc2/", LinearRole::ffn_down},
      {"/dense_4h_to_h/", LinearRole::ffn_down}};
  for (const auto& [output, use] : roles) {
    for (const auto& [name, role] : kNames) {
      if (output.find(name) != std::string::npos) {
        EXPECT_EQ(nf::graph::role_name(use.role), std::string(nf::graph::role_name(role))) << model << ": " << output;
      }
    }
  }
  for (int64_t b = 0; b < layers; ++b) {
    auto& r = per_block[b];
    const bool separate = r[LinearRole::query] > 0 && r[LinearRole::key] > 0 && r[LinearRole::value] > 0;
    EXPECT_TRUE(separate || r[LinearRole::fused_qkv] > 0) << model << ": block " << b << " has no query/key/value";
    EXPECT_GT(r[LinearRole::attention_output], 0) << model << ": block " << b;
    EXPECT_GT(r[LinearRole::ffn_input], 0) << model << ": block " << b;
    EXPECT_GT(r[LinearRole::ffn_down], 0) << model << ": block " << b;
  }
}

// The graph's node order plays no part: with its nodes stored last to first, the KV layers of
// the values and every linear's role and block are the same.
TEST(LinearRolesOrder, NodesStoredInReverse) {
  nf::host_api_slot() = host_table();
  struct Release {
    void operator()(nf_model_set* m) const { host_table()->model_set_release(m); }
  };
  std::unique_ptr<nf_model_set, Release> ms(load_model_set("zoo/gpt2"));
  nf::Graph g = nf::ModelSet(ms.get()).graph(0);
  const auto roles = nf::graph::linear_roles(g);
  const auto layers = nf::graph::kv_layer_of_values(nf::graph::GraphView(g));
  std::vector<nf::Node> nodes = g.nodes();
  const std::string first = nodes.front().output(0);
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    nf::graph::copy_node(g, *it, it->inputs(), it->outputs(), std::string(it->name()));  // appended last
    g.remove_node(*it);
  }
  ASSERT_NE(g.nodes().front().output(0), first) << "the order did not change";
  EXPECT_EQ(nf::graph::kv_layer_of_values(nf::graph::GraphView(g)), layers);
  const auto again = nf::graph::linear_roles(g);
  ASSERT_EQ(again.size(), roles.size());
  for (const auto& [output, use] : roles) {
    EXPECT_EQ(again.at(output).role, use.role) << output;
    EXPECT_EQ(again.at(output).block, use.block) << output;
  }
}

INSTANTIATE_TEST_SUITE_P(Exports, LinearRoles, ::testing::ValuesIn(exported_models()), [](const auto& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
});

}  // namespace
}  // namespace arcl_test
