// Weights held by Constant nodes are read on load as the initializers the stages expect
// (host/pipeline/constant_weights.h); other constants stay nodes.
#include <gtest/gtest.h>

#include "pipeline/constant_weights.h"

using namespace nf;

namespace {

std::unique_ptr<ir::Node> constant(const std::string& out, ir::Tensor t) {
  auto n = std::make_unique<ir::Node>();
  n->op_type = "Constant";
  n->outputs = {out};
  n->attrs["value"].type = NF_ATTR_TENSOR;
  n->attrs["value"].t = ir::make_tensor_ref(std::move(t));
  return n;
}

std::unique_ptr<ir::Node> op(const char* type, std::vector<std::string> in, std::vector<std::string> out) {
  return std::make_unique<ir::Node>(ir::Node{type, "", "", std::move(in), std::move(out), {}});
}

}  // namespace

TEST(ConstantWeights, FloatMatricesBecomeInitializers) {
  ir::Graph g;
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.nodes.push_back(constant("w", ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 2}, {1, 2, 3, 4})));
  g.nodes.push_back(constant("eps", ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {1}, {1e-5f})));     // a scalar
  g.nodes.push_back(constant("shape", ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {1, 2}, {1, -1})));  // not float
  g.nodes.push_back(op("MatMul", {"x", "w"}, {"h"}));
  g.nodes.push_back(op("Add", {"h", "eps"}, {"a"}));
  g.nodes.push_back(op("Reshape", {"a", "shape"}, {"y"}));

  EXPECT_EQ(host::lift_constant_weights(g), 1u);
  const ir::Tensor* w = g.initializer("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(w->as<float>()[3], 4.f);
  ASSERT_EQ(g.nodes.size(), 5u);
  EXPECT_EQ(g.nodes[0]->outputs[0], "eps");
  EXPECT_EQ(g.nodes[1]->outputs[0], "shape");
  EXPECT_EQ(ir::graph_problem(g), "");
  EXPECT_EQ(host::lift_constant_weights(g), 0u);
}
