// A linear weight stored [out, in] behind a Transpose (torch's dynamo export without its
// optimizer) is read on load as the [in, out] initializer the stages expect
// (host/pipeline/weight_transposes.h); a table something else also reads keeps its Transpose.
#include <gtest/gtest.h>

#include "pipeline/weight_transposes.h"

using namespace nf;

namespace {

// Op type, inputs, outputs: a node of the default domain without a name or attributes.
std::unique_ptr<ir::Node> op(const char* type, std::vector<std::string> in, std::vector<std::string> out) {
  return std::make_unique<ir::Node>(ir::Node{type, "", "", std::move(in), std::move(out), {}});
}

}  // namespace

TEST(WeightTransposes, FoldsAWeightOnlyItsTransposeReads) {
  ir::Graph g;
  g.inputs = {"x", "ids"};
  g.outputs = {"y", "logits", "rows"};
  // w_t [out 3, in 2]; the MatMul wants [2, 3].
  g.initializers["w_t"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {3, 2}, {1, 2, 3, 4, 5, 6}));
  // A tied table: the Gather reads it too, so its Transpose stays.
  g.initializers["table"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}));
  g.initializers["p"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 2, 1}, {1, 2, 3, 4}));
  g.nodes.push_back(op("Transpose", {"w_t"}, {"w"}));
  g.nodes.push_back(op("MatMul", {"x", "w"}, {"y"}));
  g.nodes.push_back(op("Gather", {"table", "ids"}, {"rows"}));
  g.nodes.push_back(op("Transpose", {"table"}, {"head"}));
  g.nodes.push_back(op("MatMul", {"x", "head"}, {"logits"}));
  g.nodes.push_back(op("Transpose", {"p"}, {"p_t"}));  // 3-D: not a linear weight
  g.nodes.push_back(op("Add", {"x", "p_t"}, {"z"}));
  ASSERT_EQ(host::foldable_weight_transposes(g), 1u);

  size_t kept = 0;
  host::FoldedTransposes f = host::fold_weight_transposes(g, [&](ir::TensorRef&) { ++kept; });
  EXPECT_EQ(f.weights, 1u);
  EXPECT_EQ(f.bytes, 6u * 4);
  EXPECT_EQ(kept, 1u);
  EXPECT_FALSE(g.initializers.count("w_t"));
  const ir::Tensor* w = g.initializer("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dims, (std::vector<int64_t>{2, 3}));
  const float* v = w->as<float>();
  EXPECT_EQ(std::vector<float>(v, v + 6), (std::vector<float>{1, 3, 5, 2, 4, 6}));
  ASSERT_EQ(g.nodes.size(), 6u);
  EXPECT_EQ(g.nodes[0]->op_type, "MatMul");
  EXPECT_TRUE(g.initializers.count("table"));
  EXPECT_EQ(host::foldable_weight_transposes(g), 0u);
}

TEST(WeightTransposes, LeavesOtherPermutationsAndGraphOutputs) {
  ir::Graph g;
  g.inputs = {"x"};
  g.outputs = {"w"};
  g.initializers["w_t"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 2}, {1, 2, 3, 4}));
  g.nodes.push_back(op("Transpose", {"w_t"}, {"w"}));  // its output is the graph's
  EXPECT_EQ(host::foldable_weight_transposes(g), 0u);
  g.outputs = {"y"};
  g.nodes.push_back(op("MatMul", {"x", "w"}, {"y"}));
  ir::Attribute perm;
  perm.type = NF_ATTR_INTS;
  perm.ints = {0, 1};  // the identity permutation: not a transpose of the weight
  g.nodes[0]->attrs["perm"] = perm;
  EXPECT_EQ(host::foldable_weight_transposes(g), 0u);
}
