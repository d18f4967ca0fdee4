// optimum's merged decoder: the If on use_cache_branch is read on load as its branch that
// reads past_key_values (host/pipeline/cache_branch.h).
#include <gtest/gtest.h>

#include "pipeline/cache_branch.h"

using namespace nf;

namespace {

std::unique_ptr<ir::Node> op(const char* type, std::vector<std::string> in, std::vector<std::string> out) {
  return std::make_unique<ir::Node>(ir::Node{type, "", "", std::move(in), std::move(out), {}});
}

std::shared_ptr<ir::Graph> branch(std::vector<std::unique_ptr<ir::Node>> nodes, std::vector<std::string> outputs) {
  auto b = std::make_shared<ir::Graph>();
  b->nodes = std::move(nodes);
  b->outputs = std::move(outputs);
  return b;
}

}  // namespace

TEST(CacheBranch, TheBranchReadingThePastReplacesTheIf) {
  ir::Graph g;
  g.inputs = {"x", "past_key_values.0.key", "use_cache_branch"};
  g.outputs = {"logits", "present.0.key"};
  g.types["use_cache_branch"].dtype = NF_DTYPE_BOOL;
  g.initializers["w"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {1, 1}, {2}));
  std::vector<std::unique_ptr<ir::Node>> no_past, with_past;
  no_past.push_back(op("MatMul", {"x", "w"}, {"a"}));
  with_past.push_back(op("MatMul", {"x", "w"}, {"logits"}));  // an outer name: renamed on inlining
  with_past.push_back(op("Concat", {"past_key_values.0.key", "x"}, {"kv"}));
  auto merge = op("If", {"use_cache_branch"}, {"logits", "present.0.key"});
  merge->attrs["then_branch"].type = NF_ATTR_GRAPH;
  merge->attrs["then_branch"].g = branch(std::move(no_past), {"a", "x"});  // "x": an outer value
  merge->attrs["else_branch"].type = NF_ATTR_GRAPH;
  merge->attrs["else_branch"].g = branch(std::move(with_past), {"logits", "kv"});
  merge->name = "optimum::if";
  g.nodes.push_back(std::move(merge));

  EXPECT_EQ(host::inline_cache_branch(g), "optimum::if");
  EXPECT_EQ(g.inputs, (std::vector<std::string>{"x", "past_key_values.0.key"}));
  EXPECT_FALSE(g.types.count("use_cache_branch"));
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0]->op_type, "MatMul");
  EXPECT_EQ(g.nodes[0]->outputs[0], "logits");
  EXPECT_EQ(g.nodes[1]->op_type, "Concat");
  EXPECT_EQ(g.nodes[1]->outputs[0], "present.0.key");
  EXPECT_EQ(ir::graph_problem(g), "");
  EXPECT_EQ(host::inline_cache_branch(g), "");
}
