// int32 decoder inputs are read on load as int64 with a Cast to int32 in the graph
// (host/pipeline/int64_inputs.h); other inputs keep their types.
#include <gtest/gtest.h>

#include "pipeline/int64_inputs.h"

using namespace nf;

TEST(Int64Inputs, Int32DecoderInputsAreCastInTheGraph) {
  ir::Graph g;
  g.inputs = {"input_ids", "attention_mask", "hidden"};
  g.outputs = {"rows"};
  g.types["input_ids"].dtype = NF_DTYPE_INT32;
  g.types["attention_mask"].dtype = NF_DTYPE_INT64;  // already int64: kept
  g.types["hidden"].dtype = NF_DTYPE_INT32;          // not a decoder input: kept
  g.initializers["table"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {4, 1}, {0, 1, 2, 3}));
  g.nodes.push_back(std::make_unique<ir::Node>(ir::Node{"Gather", "", "", {"table", "input_ids"}, {"rows"}, {}}));

  EXPECT_EQ(host::int64_decoder_inputs(g), 1u);
  EXPECT_EQ(g.types["input_ids"].dtype, NF_DTYPE_INT64);
  EXPECT_EQ(g.types["attention_mask"].dtype, NF_DTYPE_INT64);
  EXPECT_EQ(g.types["hidden"].dtype, NF_DTYPE_INT32);
  ASSERT_EQ(g.nodes.size(), 2u);
  const ir::Node& cast = *g.nodes[0];
  EXPECT_EQ(cast.op_type, "Cast");
  EXPECT_EQ(cast.inputs, std::vector<std::string>{"input_ids"});
  EXPECT_EQ(cast.attrs.at("to").i, NF_DTYPE_INT32);
  EXPECT_EQ(g.nodes[1]->inputs[1], cast.outputs[0]);
  EXPECT_EQ(ir::graph_problem(g), "");
  EXPECT_EQ(host::int64_decoder_inputs(g), 0u);
}
