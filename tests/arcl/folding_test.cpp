// The graph toolkit on its own: fixing the inputs of a torch export to static shapes and
// folding must leave no Shape node and a fully typed graph.
#include <gtest/gtest.h>

#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/fold_constants.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/infer_shapes.h>
#include <npuforge/graph/make_static.h>
#include <npuforge/graph/unique_names.h>

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

}  // namespace
}  // namespace arcl_test
