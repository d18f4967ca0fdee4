// seqmse and spinquant: the SeqMSE search picks the known best clip of a constructed layer,
// seqmse on tiny_llama writes per-block encodings lpbq then decomposes, SpinQuant keeps
// float logits within 1e-4 (tiny_llama with R1+R2, mistral_swa whose hidden size 96 needs a
// Paley Hadamard, tied qwen2), the Hadamard orders, the encodings file of a build against
// the AIMET 1.0.0 format, bad inputs, and the calibration text in the stage-cache key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <random>

#include "calibration/calibration.h"
#include "common/util.h"
#include "cli/cli_support.h"
#include "manifest/manifest.h"
#include "manifest/schema.h"
#include "onnx/onnx_io.h"
#include "pipeline/pipeline.h"
#include "registry/registry.h"
#include "runtime/session.h"
#include "seqmse/seqmse_math.h"
#include "support/packages.h"
#include "spinquant/hadamard.h"
#include "spinquant/rotation.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models";
const std::string kTiny = kModels + "/tiny_llama";

host::Registry& registry() {
  static host::Registry* reg = [] {
    auto* r = new host::Registry;
    r->load_directories({host::Registry::builtin_dir()});
    return r;
  }();
  return *reg;
}

const host::PluginInfo& cpu() {
  const host::PluginInfo* p = registry().find(NF_KIND_BACKEND, "cpu");
  EXPECT_NE(p, nullptr);
  return *p;
}

std::unique_ptr<host::TextCalibration> calibration(const std::string& model_dir, int samples, int len) {
  manifest::Manifest::Calibration c;
  c.text = kTiny + "/heldout.txt";
  c.num_samples = samples;
  c.sequence_length = len;
  return std::make_unique<host::TextCalibration>(c, model_dir + "/tokenizer.json", cpu());
}

std::string apply_recipe(const std::string& name, nlohmann::json options, ir::ModelSet& ms, nf_calibration* calib) {
  const host::PluginInfo* p = registry().find(NF_KIND_QUANT, name);
  if (!p) return "no plugin " + name;
  auto errors = manifest::validate_json(p->schema, options);
  if (!errors.empty()) return "schema: " + errors[0].message;
  nf_context ctx{"quant " + name, [](uint64_t, uint64_t, const std::string&) { return false; }};
  std::string json = options.dump();
  nf_status* st = p->quant()->apply(json.c_str(), host::handle(&ms), calib, &ctx);
  if (!st) return "";
  std::string msg = host::host_api()->status_message(st);
  host::host_api()->status_release(st);
  return msg;
}

// Float logits of one prefill of ids 1..T (mod vocab) through the cpu backend, encodings off.
std::vector<float> float_logits(ir::ModelSet& ms, int64_t T, int64_t vocab) {
  auto session = host::BackendSession::open_model_set(cpu(), {{"use_encodings", false}}, ms);
  const ir::Graph& g = *ms.graphs[0];
  std::vector<int64_t> ids, ones(static_cast<size_t>(T), 1), pos;
  for (int64_t i = 0; i < T; ++i) {
    ids.push_back((i * 7919 + 13) % vocab);
    pos.push_back(i);
  }
  auto i64 = [&](const std::vector<int64_t>& v) {
    return ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {1, T}, v));
  };
  std::vector<host::NamedTensor> in;
  for (const auto& name : g.inputs) {
    if (name == "input_ids") in.push_back({name, i64(ids)});
    else if (name == "attention_mask") in.push_back({name, i64(ones)});
    else if (name == "position_ids") in.push_back({name, i64(pos)});
    else {
      const auto& shape = *g.types.at(name).shape;
      in.push_back({name, ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, shape[1].value, 0, shape[3].value}))});
    }
  }
  auto out = session->run(g.name, in, {"logits"});
  const float* p = out[0]->tensor.as<float>();
  return std::vector<float>(p, p + out[0]->tensor.numel());
}

// max |a - b| and max |a|.
std::pair<double, double> max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
  }
  return {d, m};
}

}  // namespace

// One channel [1.0, 0.1, 0.2, -0.3] whose outlier 1.0 multiplies an input that is always 0:
// only 0.1, 0.2, -0.3 reach the output, and of the 10 candidates (clip = (c+1)/10, 4 bits,
// scale = clip / 7) only c = 6 (scale 0.1) represents all three exactly. Min/max (c = 9,
// scale 1/7) would not. The second channel's inputs all matter: its best clip is the full
// range (its weights are multiples of 1/7). Checked for the Gram (mse, sqnr) and direct
// (l1, asym) paths.
TEST(SeqMseMath, PicksTheKnownBestClip) {
  const int64_t K = 4, N = 2, T = 64;
  std::vector<float> w = {1.0f, 3.f / 7,    // [K, N] row-major
                          0.1f, -2.f / 7,   //
                          0.2f, 1.f / 7,    //
                          -0.3f, 3.f / 7 + 0.5f};
  // channel 1 absmax is 3/7 + 0.5; use a channel whose weights are on the full-range grid:
  w[7] = 1.f;  // channel 1 = [3/7, -2/7, 1/7, 1]: scale 1/7 represents all exactly
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(t * K + k)] = k == 0 ? 0.f : nd(rng);
  for (auto loss : {quant::SeqMseLoss::mse, quant::SeqMseLoss::sqnr, quant::SeqMseLoss::l1}) {
    quant::SeqMseLayer L;
    L.w = w.data();
    L.K = K;
    L.N = N;
    L.bw = 4;
    L.candidates = 10;
    L.loss = loss;
    L.x_q = L.x_ref = x.data();
    L.T = T;
    auto r = quant::seqmse_search(L);
    ASSERT_EQ(r.blocks, 1);
    EXPECT_EQ(r.candidate[0], 6) << "loss " << static_cast<int>(loss);
    EXPECT_NEAR(r.scale[0], 0.1f, 1e-6f);
    EXPECT_EQ(r.candidate[1], 9);
    EXPECT_NEAR(r.scale[1], 1.f / 7, 1e-6f);
  }
  // asym: x_ref a separate (equal) buffer takes the direct path; same answer.
  std::vector<float> x_ref = x;
  quant::SeqMseLayer L;
  L.w = w.data();
  L.K = K;
  L.N = N;
  L.candidates = 10;
  L.x_q = x.data();
  L.x_ref = x_ref.data();
  L.T = T;
  EXPECT_EQ(quant::seqmse_search(L).candidate[0], 6);
  // When the outlier's input is live, clipping it costs more than the rounding it saves.
  for (int64_t t = 0; t < T; ++t) x[static_cast<size_t>(t * K)] = nd(rng);
  L.x_ref = x.data();
  EXPECT_EQ(quant::seqmse_search(L).candidate[0], 9);
}

// The LPBQ refinement returns block scales i * s_ch (i in 1..16), the top block at 16, and
// no block worse than the plain per-block choice rounded as lpbq would round it.
TEST(SeqMseMath, LpbqRefinementStaysOnTheLpbqGrid) {
  const int64_t K = 8, N = 3, T = 128;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<float> w(static_cast<size_t>(K * N)), x(static_cast<size_t>(T * K));
  for (auto& v : w) v = nd(rng) * 0.1f;
  w[0] = 0.9f;  // one large weight in channel 0, block 0
  for (auto& v : x) v = nd(rng);
  quant::SeqMseLayer L;
  L.w = w.data();
  L.K = K;
  L.N = N;
  L.block_size = 2;
  L.candidates = 20;
  L.x_q = L.x_ref = x.data();
  L.T = T;
  auto r = quant::seqmse_search_lpbq(L, 8);
  ASSERT_EQ(r.blocks, 4);
  for (int64_t n = 0; n < N; ++n) {
    float top = 0;
    for (int64_t b = 0; b < 4; ++b) top = std::max(top, r.scale[static_cast<size_t>(n * 4 + b)]);
    const float s_ch = top / 16;
    for (int64_t b = 0; b < 4; ++b) {
      float i = r.scale[static_cast<size_t>(n * 4 + b)] / s_ch;
      EXPECT_NEAR(i, std::nearbyint(i), 1e-4) << n << "," << b;
      EXPECT_GE(std::nearbyint(i), 1);
      EXPECT_LE(std::nearbyint(i), 16);
    }
  }
}

TEST(Hadamard, OrdersAndOrthogonality) {
  // Paley II bases: 28 (q 13), 36 (q 17), 76 (q 37), 148 (q 73); 224 = 28 doubled three times.
  for (int64_t n : {1, 2, 8, 12, 20, 24, 28, 36, 76, 96, 148, 224, 256}) {
    auto R = quant::random_hadamard(n, n == 96 || n == 224 ? 5 : 0);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += R[static_cast<size_t>(i * n + k)] * R[static_cast<size_t>(j * n + k)];
        worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
      }
    EXPECT_LT(worst, 1e-12) << "order " << n;
  }
  // The smallest base: 3584 = 28 * 128 (Paley I would need 224 = 223 + 1), 2304 = 36 * 64.
  EXPECT_EQ(quant::hadamard_base_order(3584), 28);
  EXPECT_EQ(quant::hadamard_base_order(2304), 36);
  EXPECT_EQ(quant::hadamard_base_order(3072), 12);
  try {
    quant::hadamard_matrix(116);  // 116 = 29 * 4: neither 115 nor 57 is a prime of the form needed
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no Hadamard matrix of order 116"), std::string::npos) << e.what();
  }
}

// The structured rotation (base step + fast Walsh-Hadamard + signs) and the dense one equal
// x R with R formed densely, on rows and on columns, for 2^k, Paley (I and II) and Paley x 2^k
// orders.
TEST(Hadamard, FastRotationEqualsDenseProduct) {
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  for (int64_t n : {1, 2, 8, 12, 20, 24, 28, 96, 224, 256, 1536}) {  // 28, 224: a Paley II base
    const uint64_t seed = n % 3 == 0 ? 5 : 0;
    const std::vector<double> R = quant::random_hadamard(n, seed);
    for (bool learned : {false, true}) {
      const spinquant::Rotation rot =
          learned ? spinquant::Rotation::dense(R, n) : spinquant::Rotation::random_hadamard(n, seed);
      const int64_t count = 3;
      std::vector<double> x(static_cast<size_t>(count * n));
      for (auto& v : x) v = nd(rng);
      std::vector<double> want(x.size(), 0.0);  // x R, row by row
      for (int64_t r = 0; r < count; ++r)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t c = 0; c < n; ++c)
            want[static_cast<size_t>(r * n + c)] += x[static_cast<size_t>(r * n + j)] * R[static_cast<size_t>(j * n + c)];
      std::vector<double> rows = x;
      rot.apply_to_rows(rows.data(), count);
      // The same vectors as the columns of an n x count block.
      std::vector<double> cols(x.size());
      for (int64_t r = 0; r < count; ++r)
        for (int64_t j = 0; j < n; ++j) cols[static_cast<size_t>(j * count + r)] = x[static_cast<size_t>(r * n + j)];
      rot.apply_to_columns(cols.data(), count);
      double worst = 0;
      for (int64_t r = 0; r < count; ++r)
        for (int64_t c = 0; c < n; ++c) {
          const double w = want[static_cast<size_t>(r * n + c)];
          worst = std::max({worst, std::fabs(rows[static_cast<size_t>(r * n + c)] - w),
                            std::fabs(cols[static_cast<size_t>(c * count + r)] - w)});
        }
      EXPECT_LT(worst, 1e-12) << "order " << n << (learned ? " dense" : " fast");
    }
    EXPECT_EQ(spinquant::Rotation::random_hadamard(n, seed).matrix(), R) << "order " << n;
  }
}

// R4's online Hadamard as P (x) Q (online.h): the factored rotation is the Kronecker product
// of its factors' matrices, on rows and on columns (16 x 44 = tiny_llama's 704; 4 x 12).
TEST(Hadamard, KroneckerRotationIsTheKroneckerProduct) {
  std::mt19937 rng(11);
  std::normal_distribution<double> nd;
  for (auto [p, q] : {std::pair<int64_t, int64_t>{16, 44}, {4, 12}}) {
    const auto P = spinquant::Rotation::random_hadamard(p, 0), Q = spinquant::Rotation::random_hadamard(q, 3);
    const auto R = spinquant::Rotation::kronecker(P, Q);
    const int64_t n = p * q;
    ASSERT_EQ(R.size(), n);
    const auto mp = P.matrix(), mq = Q.matrix(), mr = R.matrix();
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const double want = mp[static_cast<size_t>((i / q) * p + j / q)] * mq[static_cast<size_t>((i % q) * q + j % q)];
        worst = std::max(worst, std::fabs(mr[static_cast<size_t>(i * n + j)] - want));
      }
    EXPECT_LT(worst, 1e-15) << p << " x " << q;
    // Columns: every column x of an n x 3 block becomes x R.
    const int64_t width = 3;
    std::vector<double> X(static_cast<size_t>(n * width));
    for (auto& v : X) v = nd(rng);
    std::vector<double> want(X.size(), 0.0);
    for (int64_t c = 0; c < width; ++c)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < n; ++i)
          want[static_cast<size_t>(j * width + c)] += X[static_cast<size_t>(i * width + c)] * mr[static_cast<size_t>(i * n + j)];
    R.apply_to_columns(X.data(), width);
    worst = 0;
    for (size_t k = 0; k < X.size(); ++k) worst = std::max(worst, std::fabs(X[k] - want[k]));
    EXPECT_LT(worst, 1e-12) << p << " x " << q;
  }
}

// R1 + R2 on tiny_llama; R1 on mistral_swa (hidden 96 = 12 * 8); qwen2 ties its embedding;
// Qwen2-MoE: each expert's down projection, times its routing weight (one column, by shape
// inference), and the shared expert times its sigmoid gate write the stream; R4 before every
// expert's down projection.
TEST(SpinQuant, FloatLogitsWithin1e4) {
  struct Case {
    std::string model;
    nlohmann::json options;
  };
  for (const Case& c : {Case{"tiny_llama", {{"r2", true}, {"seed", 3}}}, Case{"mistral_swa", {{"seed", 1}}},
                        Case{"qwen2", {{"untie_embedding", true}, {"r2", true}}},
                        Case{"zoo/qwen2_moe", {{"untie_embedding", true}, {"seed", 2}, {"online_down_proj", true}}}}) {
    const std::string dir = kModels + "/" + c.model;
    auto ms = host::load_source_model(dir + "/model.onnx", "");
    const int64_t vocab = nlohmann::json::parse(test::slurp(dir + "/config.json"))["vocab_size"];
    auto before = float_logits(*ms, 24, vocab);
    ASSERT_EQ(apply_recipe("spinquant", c.options, *ms, nullptr), "") << c.model;
    auto after = float_logits(*ms, 24, vocab);
    ASSERT_EQ(before.size(), after.size());
    auto [d, m] = max_diff(before, after);
    std::printf("%s spinquant %s: max |logit diff| %.3g (max |logit| %.3g)\n", c.model.c_str(), c.options.dump().c_str(),
                d, m);
    EXPECT_LT(d, 1e-4) << c.model;
  }
}

namespace {

// The graph as opset 18 writes it: ReduceMean's axes become an input.
void to_opset18(ir::Graph& g) {
  g.opsets[""] = 18;
  size_t k = 0;
  for (auto& n : g.nodes) {
    auto axes = n->attrs.find("axes");
    if (n->op_type != "ReduceMean" || axes == n->attrs.end()) continue;
    const std::string name = "axes18_" + std::to_string(k++);
    const std::vector<int64_t> values = axes->second.ints;
    g.initializers[name] = ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {static_cast<int64_t>(values.size())}, values));
    n->inputs.push_back(name);
    n->attrs.erase(axes);
  }
}

}  // namespace

// LayerNorm models (spinquant/layer_norms.h): the stream's writers, embedding and position
// table are centred, each LayerNorm becomes an RMSNorm and its bias goes into the layers
// reading it. Phi-2 written out at opset 14 (ReduceMean / Sub / ... / Add(bias), parallel
// attention and MLP, biased LM head), and at opset 18 (ReduceMean's axes an input); GPT-2
// (the LayerNormalization op, learned positions, Conv1D readers behind a Reshape, tied head);
// Phi-2's LayerNormalization op at opset 18 (the RMSNorm written with an axes input).
TEST(SpinQuant, LayerNormModelsKeepFloatLogits) {
  struct Case {
    std::string model;
    nlohmann::json options;
    bool opset18 = false;
  };
  for (const Case& c : {Case{"zoo/phi_opset14", {{"seed", 5}, {"r2", true}}}, Case{"zoo/phi_opset14", nlohmann::json::object(), true},
                        Case{"zoo/gpt2", {{"untie_embedding", true}}}, Case{"zoo/phi", nlohmann::json::object(), true}}) {
    const std::string dir = kModels + "/" + c.model;
    auto ms = host::load_source_model(dir + "/model.onnx", "");
    if (c.opset18) to_opset18(*ms->graphs[0]);
    const int64_t vocab = nlohmann::json::parse(test::slurp(dir + "/config.json"))["vocab_size"];
    auto before = float_logits(*ms, 24, vocab);
    ASSERT_EQ(apply_recipe("spinquant", c.options, *ms, nullptr), "") << c.model;
    size_t layer_norms = 0, mean_subtractions = 0;
    const ir::Graph& g = *ms->graphs[0];
    for (const auto& n : g.nodes) {
      layer_norms += n->op_type == "LayerNormalization";
      const ir::Node* m = n->op_type == "Sub" ? g.producer(n->inputs[1]) : nullptr;
      mean_subtractions += m && m->op_type == "ReduceMean";
    }
    EXPECT_EQ(layer_norms, 0u) << c.model;
    EXPECT_EQ(mean_subtractions, 0u) << c.model;
    auto [d, m] = max_diff(before, float_logits(*ms, 24, vocab));
    std::printf("%s%s spinquant %s: max |logit diff| %.3g (max |logit| %.3g)\n", c.model.c_str(), c.opset18 ? " (opset 18)" : "",
                c.options.dump().c_str(), d, m);
    EXPECT_LT(d, 1e-4) << c.model;
  }
}

// Centring the stream is exact only where every norm of it is a LayerNorm, and only the
// stream is centred: tiny_llama with its final RMSNorm turned into a LayerNorm without bias
// (a mean subtraction before it), and Phi-2 with a LayerNorm on its query projection, are
// refused in one line each.
TEST(SpinQuant, LayerNormsOffTheCentredStreamAreRefused) {
  auto tiny = host::load_source_model(kTiny + "/model.onnx", "");
  ir::Graph& g = *tiny->graphs[0];
  const std::string x = "/model/norm/Cast_output_0";
  auto mean = std::make_unique<ir::Node>();
  mean->op_type = "ReduceMean";
  mean->name = "/test/mean";
  mean->inputs = {x};
  mean->outputs = {"/test/mean"};
  ir::Attribute axes;
  axes.type = NF_ATTR_INTS;
  axes.ints = {-1};
  mean->attrs["axes"] = axes;
  auto sub = std::make_unique<ir::Node>();
  sub->op_type = "Sub";
  sub->name = "/test/centred";
  sub->inputs = {x, "/test/mean"};
  sub->outputs = {"/test/centred"};
  for (auto& n : g.nodes)
    if (n->name == "/model/norm/Pow" || n->name == "/model/norm/Mul") n->inputs[0] = "/test/centred";
  g.nodes.push_back(std::move(mean));
  g.nodes.push_back(std::move(sub));
  g.sort();
  std::string err = apply_recipe("spinquant", nlohmann::json::object(), *tiny, nullptr);
  EXPECT_NE(err.find("both RMSNorms and LayerNorms"), std::string::npos) << err;

  auto phi = host::load_source_model(kModels + "/zoo/phi/model.onnx", "");
  ir::Graph& p = *phi->graphs[0];
  const std::string q = "/model/layers.0/self_attn/q_proj/Add_output_0";
  for (auto& n : p.nodes)
    for (auto& in : n->inputs)
      if (in == q) in = "/test/q_norm";
  auto ln = std::make_unique<ir::Node>();
  ln->op_type = "LayerNormalization";
  ln->name = "/test/q_norm";
  ln->inputs = {q, "model.layers.0.input_layernorm.weight", "model.layers.0.input_layernorm.bias"};
  ln->outputs = {"/test/q_norm"};
  p.nodes.push_back(std::move(ln));
  p.sort();
  err = apply_recipe("spinquant", nlohmann::json::object(), *phi, nullptr);
  EXPECT_NE(err.find("'" + q + "', which is not the residual stream"), std::string::npos) << err;

  // A LayerNorm over another axis, or with its gain computed, is not one the rewrite knows.
  for (const char* edit : {"axis", "gain"}) {
    auto bad = host::load_source_model(kModels + "/zoo/phi/model.onnx", "");
    for (auto& n : bad->graphs[0]->nodes)
      if (n->name == "/model/final_layernorm/LayerNormalization") {
        if (std::string(edit) == "axis") {
          ir::Attribute axis;
          axis.type = NF_ATTR_INT;
          axis.i = 1;
          n->attrs["axis"] = axis;
        } else {
          n->inputs[1] = n->inputs[0];
        }
      }
    err = apply_recipe("spinquant", nlohmann::json::object(), *bad, nullptr);
    EXPECT_NE(err.find("is not a last-axis norm with a constant 1-D gain"), std::string::npos) << edit << ": " << err;
  }
}

// OLMo-1 clamps q, k and v after their projections: the rotation of the stream (R1) keeps the
// projections' outputs and so the clamps, but R2 would rotate each head's values before the
// clamp. It is refused in one line naming the Clip; without R2 the family suite keeps torch's
// logits (FamilyQuant zoo_olmo_spinquant_float).
TEST(SpinQuant, R2RefusesValuesThroughAClip) {
  auto olmo = host::load_source_model(kModels + "/zoo/olmo/model.onnx", "");
  std::string err = apply_recipe("spinquant", {{"r2", true}}, *olmo, nullptr);
  EXPECT_NE(err.find("(the values come through Clip '/model/layers.0/self_attn/Clip_2', which does not commute with a rotation)"),
            std::string::npos)
      << err;
}

// Norms reading one gain initializer (constant folding or deduplication stores equal gains
// once; a freshly initialized Gemma's 1 + 0 are all equal): each fused norm's readers get
// that gain, and a post-norm sharing it keeps it. Both were silently wrong before (logits off
// by 0.05 on tiny_llama). torch.onnx's deduplication keeps the first of equal parameters and
// writes each later one as an Identity of it, under the later one's name: that norm was not
// recognised, its readers were left unrotated and the logits were wrong without an error
// (an InternLM2 export at default norm gains gave other greedy tokens).
TEST(SpinQuant, NormsSharingAGainKeepFloatLogits) {
  struct Case {
    std::string model, node, gain;
    nlohmann::json options;
    bool through_identity = false;
  };
  for (const Case& c : {Case{"tiny_llama", "/model/layers.1/input_layernorm/Mul_1", "model.layers.0.input_layernorm.weight",
                             {{"seed", 1}}},
                        Case{"tiny_llama", "/model/layers.1/input_layernorm/Mul_1", "model.layers.0.input_layernorm.weight",
                             {{"seed", 1}}, true},
                        Case{"zoo/gemma2", "/model/layers.0/post_attention_layernorm/Mul_1", "onnx::Mul_1246",
                             {{"untie_embedding", true}}}}) {
    const std::string dir = kModels + "/" + c.model;
    auto ms = host::load_source_model(dir + "/model.onnx", "");
    ir::Graph& g = *ms->graphs[0];
    for (auto& n : g.nodes)
      if (n->name == c.node)
        for (auto& in : n->inputs) {
          if (!g.initializers.count(in)) continue;
          if (!c.through_identity) {
            in = c.gain;
            continue;
          }
          g.initializers.erase(in);
          g.nodes.insert(g.nodes.begin(), std::make_unique<ir::Node>(ir::Node{"Identity", "", in + "/dedup", {c.gain}, {in}, {}}));
          break;
        }
    const int64_t vocab = nlohmann::json::parse(test::slurp(dir + "/config.json"))["vocab_size"];
    auto before = float_logits(*ms, 24, vocab);
    ASSERT_EQ(apply_recipe("spinquant", c.options, *ms, nullptr), "") << c.model;
    auto [d, m] = max_diff(before, float_logits(*ms, 24, vocab));
    EXPECT_LT(d, 1e-4) << c.model << ": max |logit| " << m;
  }
}

TEST(SpinQuant, TiedEmbeddingNeedsUntie) {
  auto ms = host::load_source_model(kModels + "/qwen2/model.onnx", "");
  std::string err = apply_recipe("spinquant", nlohmann::json::object(), *ms, nullptr);
  EXPECT_NE(err.find("set untie_embedding = true"), std::string::npos) << err;
}

namespace {

const std::string kRotations = kTiny + "/spinquant/rotations.json";

// Writes a rotations.json + rotations.bin pair of identity matrices with the given sizes
// into work/name.
std::string write_identity_rotations(const fs::path& work, const std::string& name, int64_t hidden, int64_t head_dim,
                                     int64_t layers, int64_t extra_doubles = 0) {
  const fs::path dir = work / name;
  fs::create_directories(dir);
  std::vector<double> data;
  auto eye = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) data.push_back(i == j ? 1.0 : 0.0);
  };
  eye(hidden);
  for (int64_t l = 0; l < layers; ++l) eye(head_dim);
  data.resize(data.size() + static_cast<size_t>(extra_doubles), 0.0);
  std::ofstream(dir / "r.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(double)));
  nlohmann::json j = {{"format", "npuforge-spinquant-rotations"}, {"version", 1}, {"dtype", "float64"}, {"data", "r.bin"},
                      {"hidden_size", hidden}, {"head_dim", head_dim}, {"num_layers", layers}};
  std::ofstream(dir / "r.json") << j.dump();
  return (dir / "r.json").string();
}

}  // namespace

// Norms between a writer and its residual Add (Gemma-2, Gemma-3, OLMo-2) normalize in the
// writer's basis: the writer keeps its weights and R1 = P (x) Q runs online after each such
// norm (two small MatMuls, recorded for the A8 recipes). OLMo-2's q/k projections read the
// stream with no norm between. Float logits within 1e-4, with R4 and random signs too.
TEST(SpinQuant, NormsAfterWritersGetR1Online) {
  struct Case {
    std::string model;
    nlohmann::json options;
  };
  for (const Case& c : {Case{"zoo/gemma2", {{"untie_embedding", true}, {"seed", 3}, {"online_down_proj", true}}},
                        Case{"zoo/gemma3", {{"untie_embedding", true}, {"r2", true}}}, Case{"zoo/olmo2", {{"seed", 1}}}}) {
    const std::string dir = kModels + "/" + c.model;
    auto ms = host::load_source_model(dir + "/model.onnx", "");
    const nlohmann::json config = nlohmann::json::parse(test::slurp(dir + "/config.json"));
    const int64_t vocab = config["vocab_size"], layers = config["num_hidden_layers"];
    auto before = float_logits(*ms, 24, vocab);
    ASSERT_EQ(apply_recipe("spinquant", c.options, *ms, nullptr), "") << c.model;
    size_t r1_online = 0;
    for (const auto& r : nlohmann::json::parse(ms->metadata.at("online_rotations")))
      r1_online += r.at("weight").get<std::string>().find(".online_r1.") != std::string::npos;
    EXPECT_EQ(r1_online, static_cast<size_t>(2 * 2 * layers)) << c.model << ": two MatMuls after each of two norms a layer";
    auto [d, m] = max_diff(before, float_logits(*ms, 24, vocab));
    std::printf("%s spinquant %s: max |logit diff| %.3g (max |logit| %.3g)\n", c.model.c_str(), c.options.dump().c_str(), d, m);
    EXPECT_LT(d, 1e-4) << c.model;
  }
  // A learned R1 would run online as a dense hidden x hidden MatMul per norm: refused.
  auto ms = host::load_source_model(kModels + "/zoo/olmo2/model.onnx", "");
  test::WorkDir work("spin_rot_post_norm");
  const std::string rot = write_identity_rotations(work.path, "post_norm", 64, 16, 2);
  const std::string err = apply_recipe("spinquant", {{"rotations", rot}}, *ms, nullptr);
  EXPECT_NE(err.find("need R1 online"), std::string::npos) << err;
}

// The learned rotations (tests/models/tiny_llama/spinquant, tools/quant/train_spinquant.py)
// and the online Hadamard before every down_proj (R4 of 704 = 16 x 44: Sylvester 16 (x)
// Paley 44, online.h) keep the float logits of tiny_llama within 1e-4; R4 adds seven nodes
// per layer (Shape, two Reshapes, two MatMuls, two Transposes) and records both MatMuls for
// the quant recipes. mistral_swa: R4 of 256 = 16 x 16 with random R1 of 96.
TEST(SpinQuant, LearnedRotationsAndOnlineDownProjKeepFloatLogits) {
  struct Case {
    std::string model;
    nlohmann::json options;
    size_t online;
  };
  for (const Case& c : {Case{"tiny_llama", {{"rotations", kRotations}, {"r2", true}, {"online_down_proj", true}}, 4},
                        Case{"tiny_llama", {{"rotations", kRotations}, {"r2", true}}, 0},
                        Case{"mistral_swa", {{"seed", 2}, {"online_down_proj", true}}, 2}}) {
    const std::string dir = kModels + "/" + c.model;
    auto ms = host::load_source_model(dir + "/model.onnx", "");
    const int64_t vocab = nlohmann::json::parse(test::slurp(dir + "/config.json"))["vocab_size"];
    const size_t nodes_before = ms->graphs[0]->nodes.size();
    auto before = float_logits(*ms, 24, vocab);
    ASSERT_EQ(apply_recipe("spinquant", c.options, *ms, nullptr), "") << c.model;
    auto after = float_logits(*ms, 24, vocab);
    ASSERT_EQ(before.size(), after.size());
    auto [d, m] = max_diff(before, after);
    std::printf("%s spinquant %s: max |logit diff| %.3g (max |logit| %.3g)\n", c.model.c_str(), c.options.dump().c_str(),
                d, m);
    EXPECT_LT(d, 1e-4) << c.model;
    EXPECT_EQ(ms->graphs[0]->nodes.size(), nodes_before + 7 * c.online) << c.model;
    if (c.online) {
      auto rec = nlohmann::json::parse(ms->metadata.at("online_rotations"));
      ASSERT_EQ(rec.size(), 2 * c.online);
      for (const auto& r : rec) {
        const ir::Tensor* h = ms->graphs[0]->initializer(r["weight"].get<std::string>());
        ASSERT_NE(h, nullptr);
        const float mag = 1.f / std::sqrt(static_cast<float>(h->dims[0]));
        for (int64_t i = 0; i < h->numel(); ++i) ASSERT_NEAR(std::fabs(h->as<float>()[i]), mag, 1e-7f);
      }
    }
  }
}

// The learned R1 is not a Hadamard: the rotated embedding differs from seed-1 Hadamard's.
TEST(SpinQuant, LearnedRotationsAreUsed) {
  auto a = host::load_source_model(kTiny + "/model.onnx", "");
  auto b = host::load_source_model(kTiny + "/model.onnx", "");
  ASSERT_EQ(apply_recipe("spinquant", {{"rotations", kRotations}}, *a, nullptr), "");
  ASSERT_EQ(apply_recipe("spinquant", {{"seed", 1}}, *b, nullptr), "");
  const std::string e = "model.embed_tokens.weight";
  ASSERT_NE(a->graphs[0]->initializer(e), nullptr);
  const float* pa = a->graphs[0]->initializer(e)->as<float>();
  const float* pb = b->graphs[0]->initializer(e)->as<float>();
  double diff = 0;
  for (int64_t i = 0; i < 256; ++i) diff = std::max(diff, static_cast<double>(std::fabs(pa[i] - pb[i])));
  EXPECT_GT(diff, 1e-3);
}

// A rotations file of another model's sizes, a truncated data file, a non-orthogonal matrix
// and a missing file: one clear error each.
TEST(SpinQuant, RotationsFileMustMatchTheModel) {
  auto err_of = [](const nlohmann::json& options) {
    auto ms = host::load_source_model(kTiny + "/model.onnx", "");
    return apply_recipe("spinquant", options, *ms, nullptr);
  };
  test::WorkDir work("spin_rot");
  auto rotations = [&](auto... args) { return write_identity_rotations(work.path, args...); };
  std::string err = err_of({{"rotations", rotations("hidden", 128, 32, 4)}});
  EXPECT_NE(err.find("hold R1 of size 128 but the model's hidden size is 256"), std::string::npos) << err;
  err = err_of({{"rotations", rotations("layers", 256, 32, 3)}, {"r2", true}});
  EXPECT_NE(err.find("hold 3 R2 of size 32 but the model has 4 attention layers of head_dim 32"), std::string::npos)
      << err;
  std::string bad = rotations("size", 256, 32, 4, 5);
  err = err_of({{"rotations", bad}});
  EXPECT_NE(err.find("bytes; hidden_size 256, head_dim 32 and 4 layers need"), std::string::npos) << err;
  std::string skew = rotations("skew", 256, 32, 4);
  {
    std::fstream f(fs::path(skew).parent_path() / "r.bin", std::ios::in | std::ios::out | std::ios::binary);
    double two = 2.0;
    f.write(reinterpret_cast<const char*>(&two), sizeof two);
  }
  err = err_of({{"rotations", skew}});
  EXPECT_NE(err.find("R1 is not orthogonal"), std::string::npos) << err;
  err = err_of({{"rotations", "/nonexistent/rotations.json"}});
  EXPECT_NE(err.find("rotations '/nonexistent/rotations.json': cannot be opened"), std::string::npos) << err;
  // The identity with the right sizes is accepted (float equivalence is the test above).
  EXPECT_EQ(err_of({{"rotations", rotations("ok", 256, 32, 4)}, {"r2", true}}), "");
}

// After online_down_proj, lpbq W4A8 encodes each Hadamard factor: its weight at int8 per
// channel (exact: every entry is +-1/sqrt(16) or +-1/sqrt(44)), the rotation's input and
// inner values at 16 bits (computed before quantization) and its output, down_proj's input,
// at 8.
TEST(SpinQuant, OnlineHadamardGetsEncodingsInA8Recipes) {
  auto calib = calibration(kTiny, 1, 16);
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  ASSERT_EQ(apply_recipe("spinquant", {{"rotations", kRotations}, {"r2", true}, {"online_down_proj", true}}, *ms,
                         nullptr),
            "");
  ASSERT_EQ(apply_recipe("lpbq", {{"activation_bw", 8}}, *ms, calib.get()), "");
  auto rec = nlohmann::json::parse(ms->metadata.at("online_rotations"));
  ASSERT_EQ(rec.size(), 8u);
  for (const auto& r : rec) {
    const std::string w = r["weight"], in = r["input"], out = r["output"];
    ASSERT_TRUE(ms->encodings.count(w) && ms->encodings.count(in) && ms->encodings.count(out)) << w;
    const nf_encoding& we = ms->encodings.at(w).view;
    EXPECT_EQ(we.enc_type, NF_ENC_PER_CHANNEL) << w;
    EXPECT_EQ(we.bw, 8) << w;
    EXPECT_EQ(ms->encodings.at(in).view.bw, 16) << in;
    EXPECT_EQ(ms->encodings.at(out).view.bw, r["inner"].get<bool>() ? 16 : 8) << out;
  }
}

TEST(SeqMseRecipe, PerBlockFeedsLpbq) {
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  auto calib = calibration(kTiny, 2, 32);
  ASSERT_EQ(apply_recipe("seqmse", {{"granularity", "per_block"}, {"block_size", 64}, {"num_candidates", 10}}, *ms,
                         calib.get()),
            "");
  // A q_proj-like weight [256, 256]: PER_BLOCK, 256 * 4 scales; the LM head int8 per channel.
  const std::string q = "onnx::MatMul_1121";
  ASSERT_TRUE(ms->encodings.count(q));
  const nf_encoding& e = ms->encodings.at(q).view;
  EXPECT_EQ(e.enc_type, NF_ENC_PER_BLOCK);
  EXPECT_EQ(e.bw, 4);
  EXPECT_EQ(e.block_size, 64);
  EXPECT_EQ(e.num_scales, 256u * 4u);
  std::vector<float> block_scales(e.scale, e.scale + e.num_scales);
  size_t per_channel = 0, per_block = 0, activations = 0;
  for (const auto& [name, enc] : ms->encodings) {
    per_channel += enc.view.enc_type == NF_ENC_PER_CHANNEL;
    per_block += enc.view.enc_type == NF_ENC_PER_BLOCK;
    activations += enc.view.enc_type == NF_ENC_PER_TENSOR;
  }
  EXPECT_EQ(per_block, 28u);  // 4 layers * 7 linears
  EXPECT_EQ(per_channel, 1u);  // LM head
  EXPECT_GT(activations, 20u);
  // Some block clips are below the block's absmax (the search did something).
  const float* w = ms->graphs[0]->initializers.at(q)->tensor.as<float>();
  size_t clipped = 0;
  for (int64_t n = 0; n < 256; ++n)
    for (int64_t b = 0; b < 4; ++b) {
      float absmax = 0;
      for (int64_t k = b * 64; k < (b + 1) * 64; ++k) absmax = std::max(absmax, std::fabs(w[k * 256 + n]));
      clipped += block_scales[static_cast<size_t>(n * 4 + b)] < absmax / 7 * 0.999f;
    }
  EXPECT_GT(clipped, 0u);
  // lpbq keeps those block ranges: s_ch = max_b s_blk / 16, i_blk = round(s_blk / s_ch).
  ASSERT_EQ(apply_recipe("lpbq", {{"block_size", 64}}, *ms, calib.get()), "");
  const nf_encoding& l = ms->encodings.at(q).view;
  ASSERT_EQ(l.enc_type, NF_ENC_LPBQ);
  for (int64_t n = 0; n < 256; ++n) {
    float s_max = 0;
    for (int64_t b = 0; b < 4; ++b) s_max = std::max(s_max, block_scales[static_cast<size_t>(n * 4 + b)]);
    ASSERT_FLOAT_EQ(l.scale[n], s_max / 16) << n;
    for (int64_t b = 0; b < 4; ++b) {
      float expect = std::clamp(std::nearbyint(block_scales[static_cast<size_t>(n * 4 + b)] / l.scale[n]), 1.f, 16.f);
      ASSERT_EQ(l.per_block_int_scale[n * 4 + b], static_cast<int32_t>(expect));
    }
  }
}

TEST(SeqMseRecipe, BadInputs) {
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  EXPECT_NE(apply_recipe("seqmse", nlohmann::json::object(), *ms, nullptr).find("seqmse: needs [calibration]"),
            std::string::npos);
  auto calib = calibration(kTiny, 1, 16);
  std::string err = apply_recipe("seqmse", {{"granularity", "per_block"}, {"block_size", 48}}, *ms, calib.get());
  EXPECT_NE(err.find("block_size 48 does not divide the 256 input channels of weight"), std::string::npos) << err;
  EXPECT_TRUE(ms->encodings.empty());
  EXPECT_NE(apply_recipe("seqmse", {{"weight_bw", 8}}, *ms, calib.get()).find("schema"), std::string::npos);
  // spinquant after another recipe: its rotation would invalidate the encodings.
  ASSERT_EQ(apply_recipe("minmax", nlohmann::json::object(), *ms, nullptr), "");
  err = apply_recipe("spinquant", nlohmann::json::object(), *ms, nullptr);
  EXPECT_NE(err.find("list spinquant before the other [[quant]] recipes"), std::string::npos) << err;
}

// A8 recipes keep the LM head's output (the logits) at 16 bits by default, as AIMET's LLM
// recipes do; `logits_bw = 8` (or 0: activation_bw) puts it back at 8. Every other
// activation follows activation_bw, the KV cache kv_bw.
TEST(ActivationEncodings, LogitsKeptAt16BitsInA8Recipes) {
  auto calib = calibration(kTiny, 1, 16);
  std::string logits;
  for (const std::string recipe : {"minmax", "lpbq", "seqmse"})
    for (int logits_bw : {-1, 8, 0}) {  // -1: the option left out (default 16)
      auto ms = host::load_source_model(kTiny + "/model.onnx", "");
      if (logits.empty())
        for (const auto& n : ms->graphs[0]->nodes)
          if (n->op_type == "MatMul" && n->inputs.size() == 2 && n->inputs[1] == "onnx::MatMul_1217") logits = n->outputs[0];
      ASSERT_FALSE(logits.empty()) << "no LM head MatMul in tiny_llama";
      nlohmann::json o = {{"activation_bw", 8}};
      if (recipe == "seqmse") o["num_candidates"] = 2;
      if (logits_bw >= 0) o["logits_bw"] = logits_bw;
      ASSERT_EQ(apply_recipe(recipe, o, *ms, calib.get()), "") << recipe;
      const int expect_logits = logits_bw < 0 ? 16 : 8;
      size_t at8 = 0;
      for (const auto& [name, enc] : ms->encodings) {
        if (enc.view.enc_type != NF_ENC_PER_TENSOR || name.find("present.") == 0 || name.find("past_key_values.") == 0)
          continue;
        if (name == logits) EXPECT_EQ(enc.view.bw, expect_logits) << recipe << " logits_bw " << logits_bw;
        else {
          EXPECT_EQ(enc.view.bw, 8) << recipe << " " << name;
          ++at8;
        }
      }
      EXPECT_TRUE(ms->encodings.count(logits)) << recipe;
      EXPECT_GT(at8, 20u) << recipe;
    }
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  EXPECT_NE(apply_recipe("lpbq", {{"logits_bw", 4}}, *ms, calib.get()).find("schema"), std::string::npos);
}

namespace {

// Builds tiny_llama with `quant_and_transforms` and [calibration] on heldout.txt in
// work/name; returns the package directory ("" on failure).
fs::path build_tiny(const fs::path& work, const std::string& name, const std::string& quant_and_transforms,
                    const std::string& calib_text, const std::string& cache_dir = "") {
  const fs::path dir = work / name;
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.toml") << "[model]\n"
                                       << "onnx = \"" << kTiny << "/model.onnx\"\n"
                                       << "tokenizer = \"" << kTiny << "/tokenizer.json\"\n\n"
                                       << "[calibration]\ntext = \"" << calib_text << "\"\n"
                                       << "num_samples = 2\nsequence_length = 32\n\n"
                                       << quant_and_transforms << "\n"
                                       << "[targets.cpu]\nbackend = \"cpu\"\n";
  std::vector<std::string> args = {"build", (dir / "manifest.toml").string(), "--out", (dir / "out").string()};
  if (cache_dir.empty()) args.push_back("--no-cache");
  else {
    args.push_back("--cache-dir");
    args.push_back(cache_dir);
  }
  auto r = test::npuforge(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return {};
  return dir / "out" / "cpu";
}

// Values of every graph that should carry an encoding but do not: each linear layer's
// constant weight, its input and output, the KV cache inputs and outputs.
std::vector<std::string> missing_encodings(const ir::ModelSet& ms) {
  std::vector<std::string> missing;
  auto need = [&](const ir::Graph& g, const std::string& v) {
    if (!ms.encodings.count(v)) missing.push_back(g.name + ": " + v);
  };
  for (const auto& g : ms.graphs) {
    for (const auto& n : g->nodes) {
      if ((n->op_type != "MatMul" && n->op_type != "Gemm") || n->inputs.size() < 2) continue;
      const ir::Tensor* w = g->initializer(n->inputs[1]);
      if (!w || w->dims.size() != 2) continue;
      need(*g, n->inputs[1]);
      need(*g, n->inputs[0]);
      need(*g, n->outputs[0]);
    }
    for (const auto& i : g->inputs)
      if (i.find("past_key_values") != std::string::npos) need(*g, i);
    for (const auto& o : g->outputs)
      if (o.find("present") != std::string::npos) need(*g, o);
  }
  return missing;
}

// Checks an encodings.json against the AIMET 1.0.0 format: field names, types, and array
// lengths per enc_type (PER_TENSOR 1; PER_CHANNEL channels; PER_BLOCK and LPBQ as the
// weight's shape says). Returns the problems found.
std::vector<std::string> validate_aimet_1_0_0(const nlohmann::json& j, const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::vector<std::string> bad;
  if (j.value("version", "") != "1.0.0") bad.push_back("version is not 1.0.0");
  for (const char* section : {"activation_encodings", "param_encodings"}) {
    if (!j.contains(section) || !j[section].is_array()) {
      bad.push_back(std::string(section) + " is not a list");
      continue;
    }
    for (const auto& e : j[section]) {
      std::string name = e.value("name", "");
      auto need = [&](const char* k, bool ok) {
        if (!e.contains(k) || !ok) bad.push_back(name + ": field " + k);
      };
      need("name", e.contains("name") && e["name"].is_string());
      need("enc_type", e.contains("enc_type") && e["enc_type"].is_string());
      need("dtype", e.contains("dtype") && (e["dtype"] == "INT" || e["dtype"] == "FLOAT"));
      need("bw", e.contains("bw") && e["bw"].is_number_integer());
      need("is_sym", e.contains("is_sym") && e["is_sym"].is_boolean());
      need("scale", e.contains("scale") && e["scale"].is_array());
      need("offset", e.contains("offset") && e["offset"].is_array());
      if (!e.contains("scale") || !e.contains("offset") || !e.contains("enc_type")) continue;
      std::string type = e["enc_type"];
      size_t n = e["scale"].size();
      if (e["offset"].size() != n) bad.push_back(name + ": offset and scale lengths differ");
      bool param = std::string(section) == "param_encodings";
      if (type == "PER_TENSOR") {
        if (n != 1) bad.push_back(name + ": PER_TENSOR with " + std::to_string(n) + " scales");
      } else if (!param || !shapes.count(name)) {
        bad.push_back(name + ": " + type + " on something that is not a known weight");
      } else {
        const auto& d = shapes.at(name);
        int axis = e.value("axis", 1);
        int64_t ch = d[static_cast<size_t>(axis)], in = d[static_cast<size_t>(1 - axis)];
        if (type == "PER_CHANNEL") {
          if (static_cast<int64_t>(n) != ch) bad.push_back(name + ": PER_CHANNEL scales != channels");
        } else if (type == "PER_BLOCK" || type == "LPBQ") {
          int64_t bs = e.value("block_size", 0);
          if (bs <= 0 || in % bs != 0) {
            bad.push_back(name + ": block_size");
            continue;
          }
          if (type == "PER_BLOCK" && static_cast<int64_t>(n) != ch * (in / bs)) bad.push_back(name + ": PER_BLOCK scales");
          if (type == "LPBQ") {
            if (static_cast<int64_t>(n) != ch) bad.push_back(name + ": LPBQ scales != channels");
            if (!e.contains("compressed_bw") || !e.contains("per_block_int_scale") ||
                static_cast<int64_t>(e["per_block_int_scale"].size()) != ch * (in / bs))
              bad.push_back(name + ": LPBQ compressed_bw / per_block_int_scale");
          }
        } else {
          bad.push_back(name + ": unknown enc_type " + type);
        }
      }
    }
  }
  return bad;
}

}  // namespace

// seqmse (per block) + lpbq, A8: the package's encodings.json is AIMET 1.0.0 with LPBQ,
// PER_CHANNEL (LM head) and PER_TENSOR entries of the right lengths, and every linear
// layer's weight, input and output and every KV input/output has an encoding.
TEST(QuantPackage, EncodingsFileIsAimet100AndCoversTheGraph) {
  test::WorkDir work("recipes_aimet");
  fs::path pkg = build_tiny(work.path, "aimet",
                            "[[quant]]\nrecipe = \"seqmse\"\ngranularity = \"per_block\"\nblock_size = 64\n"
                            "num_candidates = 8\n\n[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\nactivation_bw = 8\n",
                            kTiny + "/heldout.txt");
  ASSERT_FALSE(pkg.empty());
  fs::path model = pkg / "artifacts" / "model";
  auto j = nlohmann::json::parse(test::slurp(model / "encodings.json"));
  auto ms = onnx_io::load_model_set(model.string());
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : ms->graphs[0]->initializers) shapes[name] = t->tensor.dims;
  auto bad = validate_aimet_1_0_0(j, shapes);
  EXPECT_TRUE(bad.empty()) << bad.size() << " problems, first: " << (bad.empty() ? "" : bad[0]);
  std::map<std::string, int> types;
  for (const auto& e : j["param_encodings"]) types[e["enc_type"]]++;
  EXPECT_EQ(types["LPBQ"], 28);
  EXPECT_EQ(types["PER_CHANNEL"], 1);
  // A8, except the logits (logits_bw = 16 by default): the logits, and the same head on the
  // last row alone (logits.last_row, which carries the logits' encoding) are 16-bit.
  std::set<std::string> at16;
  for (const auto& e : j["activation_encodings"]) {
    EXPECT_TRUE(e["bw"] == 8 || e["bw"] == 16) << e["name"];
    if (e["bw"] == 16) at16.insert(e["name"]);
  }
  EXPECT_EQ(at16, (std::set<std::string>{"logits", "logits.last_row"}));
}

// Transforms carry encodings: after arcl (two AR variants) every weight, linear input and
// output and KV input/output of every final graph still has its encoding.
TEST(QuantPackage, ArclKeepsEveryEncoding) {
  test::WorkDir work("recipes_arcl");
  fs::path pkg = build_tiny(work.path, "arcl",
                            "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\nactivation_bw = 8\n\n"
                            "[[transform]]\nplugin = \"arcl\"\narn = [1, 16]\ncontext_length = [64]\n",
                            kTiny + "/heldout.txt");
  ASSERT_FALSE(pkg.empty());
  auto ms = onnx_io::load_model_set((pkg / "artifacts" / "model").string());
  ASSERT_GE(ms->graphs.size(), 2u);
  auto missing = missing_encodings(*ms);
  EXPECT_TRUE(missing.empty()) << missing.size() << " values without an encoding, first: "
                               << (missing.empty() ? "" : missing[0]);
}

// The stage-cache key holds the calibration text: the same manifest over another text
// rebuilds the quant stage instead of replaying the cached one.
TEST(QuantPackage, CalibrationTextIsPartOfTheCacheKey) {
  test::WorkDir work("recipes_cachekey");
  const fs::path& dir = work.path;
  std::string text = test::slurp(kTiny + "/heldout.txt");
  std::ofstream(dir / "a.txt") << text;
  std::ofstream(dir / "b.txt") << text.substr(text.size() / 2) << text.substr(0, text.size() / 2);
  const std::string quant = "[[quant]]\nrecipe = \"minmax\"\n";
  auto stage_of = [&](const fs::path& pkg) {
    auto meta = nlohmann::json::parse(test::slurp(pkg / "package.json"));
    return meta["stages"][0];
  };
  fs::path a1 = build_tiny(dir, "cache_a1", quant, (dir / "a.txt").string(), (dir / "cache").string());
  fs::path a2 = build_tiny(dir, "cache_a2", quant, (dir / "a.txt").string(), (dir / "cache").string());
  fs::path b = build_tiny(dir, "cache_b", quant, (dir / "b.txt").string(), (dir / "cache").string());
  ASSERT_FALSE(a1.empty() || a2.empty() || b.empty());
  EXPECT_FALSE(stage_of(a1)["cached"].get<bool>());
  EXPECT_TRUE(stage_of(a2)["cached"].get<bool>()) << "same text, same options: replayed";
  EXPECT_FALSE(stage_of(b)["cached"].get<bool>()) << "another calibration text must not replay the cached stage";
  EXPECT_NE(stage_of(a1)["key"], stage_of(b)["key"]);
}

namespace {

// Runs a shell command, returning its stdout ("" and *ok = false on a non-zero exit).
std::string shell(const std::string& cmd, bool* ok) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *ok = ::pclose(p) == 0;
  return out;
}

// Logits of one prefill of `ids` through the package's artifacts on the cpu backend
// (encodings on: the quantized numerics `npuforge eval` uses).
std::vector<float> package_logits(const fs::path& pkg, const std::vector<int64_t>& ids) {
  auto session = host::BackendSession::open_artifacts(cpu(), nlohmann::json::object(), (pkg / "artifacts").string());
  auto ms = onnx_io::load_model_set((pkg / "artifacts" / "model").string());
  const int64_t T = static_cast<int64_t>(ids.size());
  auto i64 = [](std::vector<int64_t> dims, const std::vector<int64_t>& v) {
    return ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, std::move(dims), v));
  };
  std::vector<int64_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
  std::vector<host::NamedTensor> in = {{"input_ids", i64({1, T}, ids)},
                                       {"attention_mask", i64({1, T}, std::vector<int64_t>(ids.size(), 1))},
                                       {"position_ids", i64({1, T}, pos)}};
  for (int l = 0; l < 4; ++l)
    for (const char* kv : {"key", "value"})
      in.push_back({"past_key_values." + std::to_string(l) + "." + kv,
                    ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, 4, 0, 32}))});
  auto out = session->run(ms->graphs[0]->name, in, {"logits"});
  const float* p = out[0]->tensor.as<float>();
  return std::vector<float>(p, p + out[0]->tensor.numel());
}

}  // namespace

// QDQ export run by ONNX Runtime (bench/node_modules/onnxruntime-node) matches the package's
// quantized logits: W8 per-channel A8 (uint8 Q/DQ pairs) and LPBQ W4 A16 (int8
// DequantizeLinear of q * i_blk; uint16 Q/DQ pairs in the com.microsoft domain). Skipped without Node.js or
// onnxruntime-node, unless NPUFORGE_REQUIRE_ORT=1 (scripts/test.sh installs both into bench/).
TEST(QdqExport, OnnxRuntimeMatchesQuantizedEval) {
  const std::string modules = std::string(NPUFORGE_SOURCE_DIR) + "/bench/node_modules";
  bool ok = false;
  shell("node --version >/dev/null 2>&1", &ok);
  if (!ok || !fs::exists(modules + "/onnxruntime-node")) {
    const char* req = std::getenv("NPUFORGE_REQUIRE_ORT");  // CI sets it (as tests/ort does)
    if (req && std::string(req) == "1") FAIL() << "NPUFORGE_REQUIRE_ORT=1 but node or " << modules << "/onnxruntime-node is missing";
    GTEST_SKIP() << "needs node and " << modules << "/onnxruntime-node";
  }
  const std::vector<int64_t> ids = {2046, 83, 76, 301, 45, 1021, 12, 590, 33, 7, 881, 64, 1500, 9, 250, 31};
  test::WorkDir work("recipes_qdq");
  std::string id_list;
  for (auto i : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(i);
  struct Case {
    std::string name, quant;
  };
  for (const Case& c : {Case{"w8a8", "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\nactivation_bw = 8\n"},
                        Case{"lpbq_a16", "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\n"}}) {
    fs::path pkg = build_tiny(work.path, "qdq_" + c.name, c.quant, kTiny + "/heldout.txt");
    ASSERT_FALSE(pkg.empty());
    fs::path out = pkg.parent_path().parent_path() / "qdq";
    auto r = test::npuforge({"export-qdq", pkg.string(), "--out", out.string(), "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto summary = nlohmann::json::parse(r.out);
    ASSERT_EQ(summary.size(), 1u);
    EXPECT_EQ(summary[0]["weights_dequantize_linear"], 29) << summary.dump();
    EXPECT_GT(summary[0]["activations_qdq"], 0) << summary.dump();
    EXPECT_EQ(summary[0]["activations_emulated"], 0) << "every activation is a real Q/DQ pair: " << summary.dump();
    std::string ort = shell("node " + test::quote(std::string(NPUFORGE_SOURCE_DIR) + "/tests/quant/ort_logits.mjs") +
                                " " + test::quote(modules) + " " + test::quote(summary[0]["file"].get<std::string>()) +
                                " " + id_list + " 2>&1",
                            &ok);
    ASSERT_TRUE(ok) << ort.substr(0, 2000);
    auto j = nlohmann::json::parse(ort);
    std::vector<float> theirs = j["logits"].get<std::vector<float>>();
    std::vector<float> ours = package_logits(pkg, ids);
    ASSERT_EQ(theirs.size(), ours.size());
    auto [d, m] = max_diff(ours, theirs);
    size_t vocab = 2048, agree = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      auto a = std::max_element(ours.begin() + t * vocab, ours.begin() + (t + 1) * vocab) - ours.begin();
      auto b = std::max_element(theirs.begin() + t * vocab, theirs.begin() + (t + 1) * vocab) - theirs.begin();
      agree += a == b;
    }
    std::printf("QDQ %s: ORT vs npuforge quantized logits max |diff| %.4g (max |logit| %.3g), top-1 %zu/%zu; %s\n",
                c.name.c_str(), d, m, agree, ids.size(), summary[0].dump().c_str());
    EXPECT_LT(d, 0.02 * m) << c.name;
    EXPECT_GE(agree, ids.size() - 1) << c.name;
  }
}

namespace {

// Every file under `dir` (relative path -> bytes).
std::map<std::string, std::string> files_under(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = test::slurp(e.path());
  return files;
}

using CheckpointHook = std::function<void(const std::string& stage, const std::string& name)>;

// `toml` (written as <work>/manifest.toml) built in this process into <work>/<out>, with the
// stage cache <work>/cache or none; `hook` sees every checkpoint saved.
host::BuildResult build_in_process(const fs::path& work, const std::string& toml, const std::string& out, bool cache,
                                   CheckpointHook hook) {
  auto m = manifest::parse_manifest_string(toml, (work / "manifest.toml").string());
  host::Registry registry;
  auto errors = host::load_and_validate(m, registry);
  if (!errors.empty()) throw std::runtime_error(errors[0]);
  host::BuildRequest req;
  req.out_dir = work / out;
  req.use_cache = cache;
  req.cache_root = work / "cache";
  req.on_checkpoint = std::move(hook);
  return host::build(m, registry, req);
}

}  // namespace

// A seqmse stage interrupted after some layer groups resumes from their checkpoints on the
// rerun (the stage cache holds them under the stage's key) and writes the same package as
// an uninterrupted build; a damaged checkpoint is redone, not trusted.
TEST(SeqMseRecipe, InterruptedBuildResumesFromItsCheckpoints) {
  const fs::path work = fs::temp_directory_path() / ("nf_recipes_resume_" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string toml = "[model]\nonnx = \"" + kTiny + "/model.onnx\"\ntokenizer = \"" + kTiny +
                           "/tokenizer.json\"\n\n[calibration]\ntext = \"" + kTiny +
                           "/heldout.txt\"\nnum_samples = 2\nsequence_length = 32\n\n"
                           "[[quant]]\nrecipe = \"seqmse\"\ngranularity = \"per_block\"\nblock_size = 64\n"
                           "num_candidates = 8\n\n[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\n\n"
                           "[targets.cpu]\nbackend = \"cpu\"\n";
  auto build = [&](const std::string& out, bool cache, CheckpointHook hook) {
    return build_in_process(work, toml, out, cache, std::move(hook));
  };
  const auto reference = build("plain", false, {});
  EXPECT_EQ(reference.checkpoints_loaded, 0u);
  EXPECT_FALSE(fs::exists(work / "cache" / "checkpoints")) << "no stage cache, no checkpoints";

  // Interrupted after the third layer group's checkpoint.
  size_t saved = 0;
  EXPECT_THROW(build("resumed", true,
                     [&](const std::string& stage, const std::string& name) {
                       EXPECT_EQ(stage, "quant seqmse");
                       EXPECT_EQ(name, "group-" + std::to_string(saved));
                       if (++saved == 3) throw std::runtime_error("interrupted");
                     }),
               std::exception);
  ASSERT_EQ(saved, 3u);
  std::vector<fs::path> stage_dirs;
  for (const auto& e : fs::directory_iterator(work / "cache" / "checkpoints")) stage_dirs.push_back(e.path());
  ASSERT_EQ(stage_dirs.size(), 1u);
  for (const char* g : {"group-0", "group-1", "group-2"}) EXPECT_TRUE(fs::exists(stage_dirs[0] / g / "data")) << g;
  EXPECT_FALSE(fs::exists(work / "resumed" / "cpu")) << "an interrupted build writes no package";

  // One checkpoint damaged on disk: the rerun redoes that group and takes the other two.
  const fs::path damaged = stage_dirs[0] / "group-1" / "data";
  std::string bytes = test::slurp(damaged);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;

  const auto resumed = build("resumed", true, {});
  EXPECT_EQ(resumed.checkpoints_loaded, 2u);
  EXPECT_FALSE(fs::exists(stage_dirs[0])) << "the finished stage's checkpoints are removed";
  const auto a = files_under(reference.packages.at(0) / "artifacts"), b = files_under(resumed.packages.at(0) / "artifacts");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [rel, content] : a) EXPECT_TRUE(b.count(rel) && b.at(rel) == content) << rel << " differs";
  fs::remove_all(work);
}

// An lpbq part encodes a share of the weights besides calibrating its batches; apply takes
// every encoding from the parts and makes what it alone makes. A part's encoding that is
// another weight's is refused and the weight encoded again.
TEST(LpbqRecipe, PartsEncodeTheirShareOfTheWeights) {
  const host::PluginInfo* p = registry().find(NF_KIND_QUANT, "lpbq");
  ASSERT_NE(p, nullptr);
  const std::string options = "{}";
  auto calib = calibration(kTiny, 2, 16);
  auto reference = host::load_source_model(kTiny + "/model.onnx", "");
  nf_context plain{"quant lpbq", {}};
  ASSERT_EQ(p->quant()->apply(options.c_str(), host::handle(reference.get()), calib.get(), &plain), nullptr);

  struct Store : host::CheckpointStore {
    std::map<std::string, std::string> saved;
    size_t loaded = 0;
    void save(const std::string& name, const void* data, size_t bytes) override {
      saved[name].assign(static_cast<const char*>(data), bytes);
    }
    bool load(const std::string& name, std::string* bytes) override {
      auto it = saved.find(name);
      if (it == saved.end()) return false;
      *bytes = it->second;
      ++loaded;
      return true;
    }
  } store;
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  nf_context ctx{"quant lpbq", {}, &store};
  for (size_t k = 0; k < 2; ++k)
    ASSERT_EQ(p->quant()->apply_shard(options.c_str(), host::handle(ms.get()), calib.get(), &ctx, k, 2), nullptr);
  EXPECT_TRUE(ms->encodings.empty()) << "a part leaves the model set as it was";
  std::vector<std::string> weights;
  for (const auto& [name, bytes] : store.saved)
    if (name.starts_with("weight-")) weights.push_back(name);
  ASSERT_GT(weights.size(), 10u);
  store.saved[weights[0]] = store.saved[weights[1]];  // another weight's encoding

  ASSERT_EQ(p->quant()->apply(options.c_str(), host::handle(ms.get()), calib.get(), &ctx), nullptr);
  EXPECT_EQ(store.loaded, weights.size() + 2) << "every weight and both batches from the parts";
  ASSERT_EQ(ms->encodings.size(), reference->encodings.size());
  for (const auto& [name, want] : reference->encodings) {
    const ir::Encoding& got = ms->encodings.at(name);
    EXPECT_EQ(got.view.enc_type, want.view.enc_type) << name;
    EXPECT_EQ(got.scale, want.scale) << name;
    EXPECT_EQ(got.offset, want.offset) << name;
    EXPECT_EQ(got.per_block_int_scale, want.per_block_int_scale) << name;
  }
}

// seqmse splits into parts only where each layer's search stands alone: symfp captures the
// float model's inputs; symqt and asym capture each layer on the ones before it, quantized.
TEST(SeqMseRecipe, OnlyFloatInputSearchesSplitIntoParts) {
  const host::PluginInfo* p = registry().find(NF_KIND_QUANT, "seqmse");
  ASSERT_NE(p, nullptr);
  ASSERT_NE(p->quant()->shard_count, nullptr);
  ASSERT_NE(p->quant()->apply_shard, nullptr);
  auto count = [&](const std::string& symmetry, size_t wanted) {
    const std::string options = nlohmann::json{{"inp_symmetry", symmetry}}.dump();
    size_t n = 0;
    nf_status* st = p->quant()->shard_count(options.c_str(), wanted, &n);
    EXPECT_EQ(st, nullptr);
    return n;
  };
  EXPECT_EQ(count("symfp", 8), 8u);
  EXPECT_EQ(count("symfp", 1), 1u);
  EXPECT_EQ(count("symqt", 8), 1u);
  EXPECT_EQ(count("asym", 8), 1u);

  // A part asked of options that do not split is refused, and the model set is untouched.
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  auto calib = calibration(kTiny, 1, 16);
  const std::string options = nlohmann::json{{"inp_symmetry", "symqt"}}.dump();
  nf_context ctx{"quant seqmse", {}};
  nf_status* st = p->quant()->apply_shard(options.c_str(), host::handle(ms.get()), calib.get(), &ctx, 0, 2);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(host::host_api()->status_code(st), NF_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(host::host_api()->status_message(st)).find("do not split"), std::string::npos);
  host::host_api()->status_release(st);
  EXPECT_TRUE(ms->encodings.empty());
}

// Each calibration batch's activation ranges are a checkpoint of the stage (what a part of a
// split stage leaves): an lpbq stage interrupted after the first batch's resumes from it and
// writes the package an uninterrupted build writes.
TEST(LpbqRecipe, InterruptedCalibrationResumesFromItsBatches) {
  const fs::path work = fs::temp_directory_path() / ("nf_recipes_batches_" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  const std::string toml = "[model]\nonnx = \"" + kTiny + "/model.onnx\"\ntokenizer = \"" + kTiny +
                           "/tokenizer.json\"\n\n[calibration]\ntext = \"" + kTiny +
                           "/heldout.txt\"\nnum_samples = 3\nsequence_length = 32\n\n"
                           "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\n\n[targets.cpu]\nbackend = \"cpu\"\n";
  auto build = [&](const std::string& out, bool cache, CheckpointHook hook) {
    return build_in_process(work, toml, out, cache, std::move(hook));
  };
  const auto reference = build("plain", false, {});
  std::vector<std::string> saved;
  EXPECT_THROW(build("resumed", true,
                     [&](const std::string& stage, const std::string& name) {
                       EXPECT_EQ(stage, "quant lpbq");
                       saved.push_back(name);
                       throw std::runtime_error("interrupted");
                     }),
               std::exception);
  ASSERT_EQ(saved, std::vector<std::string>{"activation-ranges-0"});
  const auto resumed = build("resumed", true, {});
  EXPECT_EQ(resumed.checkpoints_loaded, 1u);
  const auto a = files_under(reference.packages.at(0) / "artifacts"), b = files_under(resumed.packages.at(0) / "artifacts");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [rel, content] : a) EXPECT_TRUE(b.count(rel) && b.at(rel) == content) << rel << " differs";

  // A checkpoint whose digest holds but whose contents lack the ranges (hostile or from
  // another version) is calibrated again, not read past its end.
  saved.clear();
  fs::remove_all(work / "cache");
  EXPECT_THROW(build("hostile", true, [&](const std::string&, const std::string& name) {
                 saved.push_back(name);
                 throw std::runtime_error("interrupted");
               }),
               std::exception);
  fs::path entry;
  for (const auto& e : fs::recursive_directory_iterator(work / "cache" / "checkpoints"))
    if (e.path().filename() == "activation-ranges-0") entry = e.path();
  ASSERT_FALSE(entry.empty());
  nlohmann::json j = nlohmann::json::from_cbor(test::slurp(entry / "data"));
  j.erase("lo");
  const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(j);
  std::ofstream(entry / "data", std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(cbor.data()), cbor.size());
  std::ofstream(entry / "digest.json", std::ios::trunc)
      << nlohmann::json{{"bytes", cbor.size()}, {"hash", host::hash_bytes(cbor.data(), cbor.size())}}.dump() << "\n";
  const auto redone = build("hostile", true, {});
  const auto c = files_under(redone.packages.at(0) / "artifacts");
  ASSERT_EQ(a.size(), c.size());
  for (const auto& [rel, content] : a) EXPECT_TRUE(c.count(rel) && c.at(rel) == content) << rel << " differs";
  fs::remove_all(work);
}
