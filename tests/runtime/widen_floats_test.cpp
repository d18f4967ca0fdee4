// A float16 or bfloat16 export is computed in float32 (host/pipeline/widen_floats.h): every
// 16-bit float weight, constant, value type and Cast target widens, exactly, and nothing else.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "pipeline/widen_floats.h"

using namespace nf;

namespace {

ir::Tensor bits16(nf_dtype dtype, std::vector<uint16_t> bits) {
  return ir::Tensor::from<uint16_t>(dtype, {static_cast<int64_t>(bits.size())}, bits);
}

std::unique_ptr<ir::Node> node(std::string op, std::vector<std::string> in, std::vector<std::string> out) {
  auto n = std::make_unique<ir::Node>();
  n->op_type = std::move(op);
  n->inputs = std::move(in);
  n->outputs = std::move(out);
  return n;
}

ir::Attribute int_attr(int64_t v) {
  ir::Attribute a;
  a.type = NF_ATTR_INT;
  a.i = v;
  return a;
}

}  // namespace

TEST(WidenFloats, Float16GraphBecomesFloat32Exactly) {
  ir::Graph g;
  g.inputs = {"x", "ids"};
  g.types["x"] = {NF_DTYPE_FLOAT16, std::nullopt};
  g.types["ids"] = {NF_DTYPE_INT64, std::nullopt};
  g.types["y"] = {NF_DTYPE_FLOAT16, std::nullopt};
  // 1, -2, 65504 (max), 2^-24 (smallest subnormal), -0, inf
  auto w = ir::make_tensor_ref(bits16(NF_DTYPE_FLOAT16, {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00}));
  g.initializers["w"] = w;
  g.initializers["w_again"] = w;  // one tensor under two names: widened once
  g.initializers["steps"] = ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {2}, {1, 2}));

  auto cast_half = node("Cast", {"x"}, {"xh"});
  cast_half->attrs["to"] = int_attr(NF_DTYPE_FLOAT16);
  auto cast_int = node("Cast", {"x"}, {"xi"});
  cast_int->attrs["to"] = int_attr(NF_DTYPE_INT32);
  auto constant = node("Constant", {}, {"c"});
  constant->attrs["value"].type = NF_ATTR_TENSOR;
  constant->attrs["value"].t = ir::make_tensor_ref(bits16(NF_DTYPE_FLOAT16, {0xfbff}));  // -65504: masks use it
  // A subgraph (If branch) is widened too.
  auto body = std::make_shared<ir::Graph>();
  body->types["b"] = {NF_DTYPE_FLOAT16, std::nullopt};
  auto branch = node("If", {"cond"}, {"b"});
  branch->attrs["then_branch"].type = NF_ATTR_GRAPH;
  branch->attrs["then_branch"].g = body;
  for (auto* n : {&cast_half, &cast_int, &constant, &branch}) g.nodes.push_back(std::move(*n));

  size_t kept = 0;
  host::Widened r = host::widen_16bit_floats(g, [&](ir::TensorRef& t) {
    EXPECT_EQ(t.tensor.dtype, NF_DTYPE_FLOAT32);
    ++kept;
  });

  EXPECT_EQ(r.from, NF_DTYPE_FLOAT16);
  EXPECT_EQ(r.weights, 1u);
  EXPECT_EQ(kept, 1u) << "every widened weight is handed to `keep` (the build spills it)";
  EXPECT_EQ(r.bytes, 6u * 4);
  const ir::Tensor& wt = g.initializers["w"]->tensor;
  ASSERT_EQ(wt.dtype, NF_DTYPE_FLOAT32);
  EXPECT_EQ(g.initializers["w_again"], g.initializers["w"]);
  const float* f = wt.as<float>();
  EXPECT_EQ(f[0], 1.f);
  EXPECT_EQ(f[1], -2.f);
  EXPECT_EQ(f[2], 65504.f);
  EXPECT_EQ(f[3], std::ldexp(1.f, -24));
  EXPECT_TRUE(f[4] == 0.f && std::signbit(f[4]));
  EXPECT_TRUE(std::isinf(f[5]));
  EXPECT_EQ(g.initializers["steps"]->tensor.dtype, NF_DTYPE_INT64) << "integers are left alone";

  EXPECT_EQ(g.types["x"].dtype, NF_DTYPE_FLOAT32);
  EXPECT_EQ(g.types["y"].dtype, NF_DTYPE_FLOAT32);
  EXPECT_EQ(g.types["ids"].dtype, NF_DTYPE_INT64);
  EXPECT_EQ(g.nodes[0]->attrs["to"].i, NF_DTYPE_FLOAT32);
  EXPECT_EQ(g.nodes[1]->attrs["to"].i, NF_DTYPE_INT32);
  const ir::Tensor& c = g.nodes[2]->attrs["value"].t->tensor;
  ASSERT_EQ(c.dtype, NF_DTYPE_FLOAT32);
  EXPECT_EQ(c.as<float>()[0], -65504.f);
  EXPECT_EQ(body->types["b"].dtype, NF_DTYPE_FLOAT32);
  EXPECT_TRUE(r.any());
}

TEST(WidenFloats, Bfloat16WeightsWidenExactly) {
  ir::Graph g;
  // 1.5, -3.140625 (0xc049), 1e38-ish (0x7e96)
  g.initializers["w"] = ir::make_tensor_ref(bits16(NF_DTYPE_BFLOAT16, {0x3fc0, 0xc049, 0x7e96}));
  host::Widened r = host::widen_16bit_floats(g);
  EXPECT_EQ(r.from, NF_DTYPE_BFLOAT16);
  const float* f = g.initializers["w"]->tensor.as<float>();
  for (int i = 0; i < 3; ++i) {
    const uint16_t in[] = {0x3fc0, 0xc049, 0x7e96};
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    EXPECT_EQ(bits, static_cast<uint32_t>(in[i]) << 16) << "bfloat16 is the top half of a float";
  }
  EXPECT_EQ(f[0], 1.5f);
}

TEST(WidenFloats, Float32GraphIsUntouched) {
  ir::Graph g;
  g.types["x"] = {NF_DTYPE_FLOAT32, std::nullopt};
  auto w = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2}, {1.f, 2.f}));
  g.initializers["w"] = w;
  auto cast = node("Cast", {"x"}, {"y"});
  cast->attrs["to"] = int_attr(NF_DTYPE_FLOAT32);
  g.nodes.push_back(std::move(cast));
  const void* before = w->tensor.data();
  host::Widened r = host::widen_16bit_floats(g);
  EXPECT_FALSE(r.any());
  EXPECT_EQ(g.initializers["w"]->tensor.data(), before) << "no copy of a float32 weight";
}
