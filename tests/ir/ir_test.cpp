#include "ir/ir.h"

#include <gtest/gtest.h>

using namespace nf::ir;

TEST(Graph, CloneSharesWeightBytesButNotBoxes) {
  Graph g;
  g.name = "g";
  auto t = make_tensor_ref(Tensor::from<float>(NF_DTYPE_FLOAT32, {2}, {1.f, 2.f}));
  g.initializers["w"] = t;
  auto c = g.clone();
  EXPECT_EQ(c->initializer("w")->data(), g.initializer("w")->data());
  // Writing through the clone copies first: the original keeps its bytes.
  c->initializers["w"]->tensor.mutable_as<float>()[0] = 5.f;
  EXPECT_EQ(g.initializer("w")->as<float>()[0], 1.f);
  EXPECT_EQ(c->initializer("w")->as<float>()[0], 5.f);
}

TEST(Graph, SortOrdersProducersFirstAndDetectsCycles) {
  Graph g;
  g.nodes.push_back(std::make_unique<Node>(Node{"Relu", "", "b", {"x1"}, {"y"}, {}}));
  g.nodes.push_back(std::make_unique<Node>(Node{"Neg", "", "a", {"x"}, {"x1"}, {}}));
  g.sort();
  EXPECT_EQ(g.nodes[0]->name, "a");
  EXPECT_EQ(g.nodes[1]->name, "b");
  g.nodes[1]->outputs[0] = "x";  // a <- b <- a
  g.nodes[0]->inputs[0] = "x";
  g.nodes[1]->inputs[0] = "x1";
  EXPECT_THROW(g.sort(), std::runtime_error);
}

TEST(Tensor, MappedFileIsReadOnlyAndCopiedOnWrite) {
  char path[] = "/tmp/nf_ir_testXXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  float v[2] = {3.f, 4.f};
  ASSERT_EQ(write(fd, v, sizeof v), (ssize_t)sizeof v);
  close(fd);
  Tensor t;
  t.dtype = NF_DTYPE_FLOAT32;
  t.dims = {1};
  t.buffer = std::make_shared<MappedFile>(path);
  t.offset = 4;
  EXPECT_EQ(t.as<float>()[0], 4.f);
  t.mutable_as<float>()[0] = 9.f;
  EXPECT_EQ(t.as<float>()[0], 9.f);
  EXPECT_EQ(MappedFile(path).size(), 8u);
  EXPECT_THROW(MappedFile("/nonexistent/file"), std::runtime_error);
  unlink(path);
}
