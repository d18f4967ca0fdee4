// Weights carrying an AIMET encoding run on the integer kernels with exactly its grid:
// MatMul through the cpu plugin equals fp32 math over the weights quantized by hand (up to
// the decode kernels' 16-bit rounding of x, see x16_bound).
// Activations (graph inputs and computed values) with a PER_TENSOR encoding are rounded
// onto their grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "api/host_api.h"
#include "registry/registry.h"

#include "cpu_backend.h"

using namespace nf;

namespace {

const nf_backend_api* backend() { return test::cpu_backend(); }

constexpr int64_t K = 64, N = 12;

struct Fixture {
  std::vector<float> w = std::vector<float>(K * N), x = std::vector<float>(K);
  ir::ModelSet ms;
  Fixture() {
    std::mt19937 rng(3);
    std::normal_distribution<float> d;
    for (float& v : w) v = d(rng);
    for (float& v : x) v = d(rng);
    auto g = std::make_unique<ir::Graph>();
    g->name = "main";
    g->opsets[""] = 17;
    g->inputs = {"x"};
    g->outputs = {"y"};
    g->types["x"] = {NF_DTYPE_FLOAT32, std::vector<ir::Dim>{{1, ""}, {K, ""}}};
    auto n = std::make_unique<ir::Node>();
    n->op_type = "MatMul";
    n->name = "/mm";
    n->inputs = {"x", "W"};
    n->outputs = {"y"};
    g->nodes.push_back(std::move(n));
    auto ref = std::make_shared<ir::TensorRef>();
    ref->tensor = ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {K, N}, w);
    g->initializers["W"] = ref;
    ms.graphs.push_back(std::move(g));
  }
  std::vector<float> run(const char* options) {
    nf_session* s = nullptr;
    EXPECT_EQ(backend()->open_model_set(options, host::handle(&ms), nullptr, &s), nullptr);
    const char* in_name = "x";
    const char* out_name = "y";
    nf_tensor* in = host::new_tensor_handle(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {1, K}, x));
    nf_tensor* out = nullptr;
    EXPECT_EQ(backend()->run(s, "main", &in_name, &in, 1, &out_name, &out, 1), nullptr);
    const ir::Tensor& t = host::unwrap(out)->tensor;
    std::vector<float> y(t.as<float>(), t.as<float>() + N);
    host::host_api()->tensor_release(in);
    host::host_api()->tensor_release(out);
    backend()->close(s);
    return y;
  }
  // x times W with W[k][n] replaced by q(k, n).
  template <class Q>
  std::vector<float> reference(Q q) const {
    std::vector<float> y(N, 0.f);
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(x[k]) * q(k, n);
      y[n] = float(s);
    }
    return y;
  }
};

// How far y = x W may move when a decode GEMV takes x as 16-bit integers per group of 32
// inputs (the integer-dot kernels, npuforge/kernels/linear.h): sum_k |W[k][n]| times half
// a step of k's group. `wq(k, n)` is the weight the kernel multiplies.
template <class Q>
std::vector<double> x16_bound(const std::vector<float>& x, int64_t n_out, Q wq) {
  const int64_t k_in = int64_t(x.size());
  std::vector<double> bound(n_out, 0.0);
  for (int64_t k = 0; k < k_in; ++k) {
    float amax = 0;
    for (int64_t j = k / 32 * 32; j < std::min(k_in, k / 32 * 32 + 32); ++j) amax = std::max(amax, std::fabs(x[j]));
    for (int64_t n = 0; n < n_out; ++n) bound[n] += std::fabs(wq(k, n)) * 0.5 * amax / 32639;
  }
  return bound;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& extra = {}) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::fabs(b[i]) + (extra.empty() ? 0.0 : extra[i])) << i;
}

// A symmetric int8 PER_CHANNEL encoding along `axis` (offsets -128) over `scale`.
nf_encoding per_channel_int8(int axis, const std::vector<float>& scale, const std::vector<int32_t>& offset) {
  nf_encoding e{};
  e.struct_size = sizeof(nf_encoding);
  e.enc_type = NF_ENC_PER_CHANNEL;
  e.bw = 8;
  e.is_sym = 1;
  e.axis = axis;
  e.block_axis = -1;
  e.num_scales = scale.size();
  e.scale = scale.data();
  e.offset = offset.data();
  return e;
}

// An input the graph declares no type for (a graph cut out of a bigger one) runs with
// whatever it is given; the shape check read past an empty dims list and crashed.
TEST(Encodings, InputWithoutADeclaredTypeRuns) {
  Fixture f;
  f.ms.graphs[0]->types.clear();
  expect_near(f.run(R"({"use_encodings": false})"), f.reference([&](int64_t k, int64_t n) { return f.w[k * N + n]; }));
}

TEST(Encodings, PerChannelInt8UsesExactScales) {
  Fixture f;
  std::vector<float> scale(N);
  std::vector<int32_t> offset(N, -128);
  for (int64_t n = 0; n < N; ++n) scale[n] = 0.01f + 0.003f * float(n);
  f.ms.encodings["W"] = ir::Encoding::from(per_channel_int8(1, scale, offset));
  auto wq = [&](int64_t k, int64_t n) {
    return std::clamp(std::nearbyint(f.w[k * N + n] / scale[n]), -128.f, 127.f) * scale[n];
  };
  expect_near(f.run("{}"), f.reference(wq), x16_bound(f.x, N, wq));
  // use_encodings false: the float weights.
  auto fp = f.reference([&](int64_t k, int64_t n) { return f.w[k * N + n]; });
  expect_near(f.run(R"({"use_encodings": false})"), fp);
}

TEST(Encodings, LpbqInt4UsesChannelTimesBlockScales) {
  Fixture f;
  const int64_t bs = 16, nb = K / bs;
  std::vector<float> scale(N);
  std::vector<int32_t> offset(N, -8), ints(N * nb);
  for (int64_t n = 0; n < N; ++n) scale[n] = 0.02f + 0.001f * float(n);
  for (int64_t i = 0; i < N * nb; ++i) ints[i] = 5 + int32_t(i % 11);
  nf_encoding e{};
  e.struct_size = sizeof(nf_encoding);
  e.enc_type = NF_ENC_LPBQ;
  e.bw = 8;
  e.compressed_bw = 4;
  e.is_sym = 1;
  e.axis = 1;
  e.block_axis = 0;
  e.block_size = bs;
  e.num_scales = N;
  e.scale = scale.data();
  e.offset = offset.data();
  e.num_block_ints = N * nb;
  e.per_block_int_scale = ints.data();
  f.ms.encodings["W"] = ir::Encoding::from(e);
  auto wq = [&](int64_t k, int64_t n) {
    float s = scale[n] * float(ints[n * nb + k / bs]);
    return std::clamp(std::nearbyint(f.w[k * N + n] / s), -8.f, 7.f) * s;
  };
  expect_near(f.run("{}"), f.reference(wq), x16_bound(f.x, N, wq));
}

nf_encoding per_tensor(int bw, const float* scale, const int32_t* offset) {
  nf_encoding e{};
  e.struct_size = sizeof(nf_encoding);
  e.enc_type = NF_ENC_PER_TENSOR;
  e.bw = bw;
  e.axis = -1;
  e.block_axis = -1;
  e.num_scales = 1;
  e.scale = scale;
  e.offset = offset;
  return e;
}

// real = (q + offset) * scale, q in [0, 2^bw - 1], rounded half to even.
float on_grid(float v, int bw, float scale, int32_t offset) {
  float q = std::clamp(std::nearbyint(v / scale) - float(offset), 0.f, std::ldexp(1.f, bw) - 1);
  return (q + float(offset)) * scale;
}

TEST(Encodings, ActivationsAreRoundedOntoTheirGrid) {
  Fixture f;
  const float in_scale = 0.05f, out_scale = 0.25f;
  const int32_t in_offset = -128, out_offset = -20;  // the output grid clips below -5 and above 58.75
  f.ms.encodings["x"] = ir::Encoding::from(per_tensor(8, &in_scale, &in_offset));
  f.ms.encodings["y"] = ir::Encoding::from(per_tensor(8, &out_scale, &out_offset));
  std::vector<float> xq(K);
  for (int64_t k = 0; k < K; ++k) xq[k] = on_grid(f.x[k], 8, in_scale, in_offset);
  std::vector<float> want(N);
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(xq[k]) * f.w[k * N + n];
    want[n] = on_grid(float(s), 8, out_scale, out_offset);
  }
  std::vector<float> got = f.run("{}");
  expect_near(got, want);
  bool clipped = false;
  for (float v : got) clipped |= v == -5.f;
  EXPECT_TRUE(clipped) << "the test data should reach the grid's lower clip";
  // use_encodings false: plain float.
  auto fp = f.reference([&](int64_t k, int64_t n) { return f.w[k * N + n]; });
  expect_near(f.run(R"({"use_encodings": false})"), fp);
}

// A tied table E [V, H]: the embedding lookup Gather(E, ids) and the LM head
// MatMul(x, Transpose(E)) both read E on its encoding's grid (PER_CHANNEL on axis 0, one
// step per row: what lpbq gives a tied LM head), so the device's one stored table serves
// both. The Transpose is not materialised: the head packs from E with E's encoding.
TEST(Encodings, TiedTableIsOneGridForLookupAndHead) {
  constexpr int64_t V = 48, H = 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  std::vector<float> table(V * H), x(H), scale(V);
  for (float& v : table) v = d(rng);
  for (float& v : x) v = d(rng);
  std::vector<int32_t> offset(V, -128);
  for (int64_t r = 0; r < V; ++r) {
    float absmax = 0;
    for (int64_t c = 0; c < H; ++c) absmax = std::max(absmax, std::fabs(table[r * H + c]));
    scale[r] = absmax / 127;
  }
  ir::ModelSet ms;
  auto g = std::make_unique<ir::Graph>();
  g->name = "main";
  g->opsets[""] = 17;
  g->inputs = {"ids", "x"};
  g->outputs = {"rows", "logits"};
  g->types["ids"] = {NF_DTYPE_INT64, std::vector<ir::Dim>{{2, ""}}};
  g->types["x"] = {NF_DTYPE_FLOAT32, std::vector<ir::Dim>{{1, ""}, {H, ""}}};
  auto node = [&](const char* op, std::vector<std::string> in, std::string out) {
    auto n = std::make_unique<ir::Node>();
    n->op_type = op;
    n->name = std::string("/") + op;
    n->inputs = std::move(in);
    n->outputs = {std::move(out)};
    g->nodes.push_back(std::move(n));
  };
  node("Gather", {"E", "ids"}, "rows");
  node("Transpose", {"E"}, "Et");
  node("MatMul", {"x", "Et"}, "logits");
  auto ref = std::make_shared<ir::TensorRef>();
  ref->tensor = ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {V, H}, table);
  g->initializers["E"] = ref;
  ms.graphs.push_back(std::move(g));
  ms.encodings["E"] = ir::Encoding::from(per_channel_int8(0, scale, offset));
  auto q = [&](int64_t r, int64_t c) { return std::clamp(std::nearbyint(table[r * H + c] / scale[r]), -128.f, 127.f) * scale[r]; };
  const std::vector<double> x16 = x16_bound(x, V, [&](int64_t c, int64_t v) { return q(v, c); });

  for (bool encoded : {true, false}) {
    nf_session* s = nullptr;
    ASSERT_EQ(backend()->open_model_set(encoded ? "{}" : R"({"use_encodings": false})", host::handle(&ms), nullptr, &s),
              nullptr);
    const std::vector<int64_t> ids = {7, -1};  // -1: the last row
    const char* in_names[] = {"ids", "x"};
    const char* out_names[] = {"rows", "logits"};
    nf_tensor* in[] = {host::new_tensor_handle(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {2}, ids)),
                       host::new_tensor_handle(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {1, H}, x))};
    nf_tensor* out[2] = {nullptr, nullptr};
    ASSERT_EQ(backend()->run(s, "main", in_names, in, 2, out_names, out, 2), nullptr);
    const float* rows = host::unwrap(out[0])->tensor.as<float>();
    const float* logits = host::unwrap(out[1])->tensor.as<float>();
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t r = i == 0 ? 7 : V - 1;
      for (int64_t c = 0; c < H; ++c)
        EXPECT_FLOAT_EQ(rows[i * H + c], encoded ? q(r, c) : table[r * H + c]) << "row " << r << " col " << c;
    }
    for (int64_t v = 0; v < V; ++v) {
      double want = 0;
      for (int64_t c = 0; c < H; ++c) want += double(x[c]) * (encoded ? q(v, c) : table[v * H + c]);
      EXPECT_NEAR(logits[v], want, 1e-4 + 1e-4 * std::fabs(want) + (encoded ? x16[v] : 0.0)) << "logit " << v;
    }
    for (nf_tensor* t : in) host::host_api()->tensor_release(t);
    for (nf_tensor* t : out) host::host_api()->tensor_release(t);
    backend()->close(s);
  }
}

}  // namespace
