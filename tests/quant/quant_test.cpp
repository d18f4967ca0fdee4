// Quant recipes and host calibration: the LPBQ formula against hand-computed cases, the
// recipes' encodings and errors through the plugin ABI, calibration errors, and builds of
// tests/models/tiny_llama with minmax (W8) and lpbq (W4) whose perplexity is compared
// with the float model's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "calibration/calibration.h"
#include "calibration/segments.h"
#include "cli/cli_support.h"
#include "lpbq/lpbq_math.h"
#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "runner/runner.h"
#include "runtime/package.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/tiny_llama";

// The built-in plugins, loaded once (libraries stay loaded for the process).
host::Registry& registry() {
  static host::Registry* reg = [] {
    auto* r = new host::Registry;
    r->load_directories({host::Registry::builtin_dir()});
    return r;
  }();
  return *reg;
}

// A calibration on tiny_llama's held-out text: `samples` windows of `len` tokens.
std::unique_ptr<host::TextCalibration> tiny_calibration(int samples, int len) {
  const host::PluginInfo* cpu = registry().find(NF_KIND_BACKEND, "cpu");
  if (!cpu) throw std::runtime_error("the cpu backend is not built");
  manifest::Manifest::Calibration c;
  c.text = kTiny + "/heldout.txt";
  c.num_samples = samples;
  c.sequence_length = len;
  return std::make_unique<host::TextCalibration>(c, kTiny + "/tokenizer.json", *cpu);
}

// A model set of one graph: Y = X @ W, W = [K, N] given row-major.
std::unique_ptr<ir::ModelSet> matmul_model(int64_t K, int64_t N, const std::vector<float>& w) {
  auto g = std::make_unique<ir::Graph>();
  g->name = "model";
  g->opsets[""] = 17;
  g->inputs = {"X"};
  g->outputs = {"logits"};
  g->types["X"] = {NF_DTYPE_FLOAT32, std::vector<ir::Dim>{{1, ""}, {K, ""}}};
  g->types["logits"] = {NF_DTYPE_FLOAT32, std::vector<ir::Dim>{{1, ""}, {N, ""}}};
  g->initializers["W"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {K, N}, w));
  auto node = std::make_unique<ir::Node>();
  node->op_type = "MatMul";
  node->name = "mm";
  node->inputs = {"X", "W"};
  node->outputs = {"Y"};
  g->nodes.push_back(std::move(node));
  // Y goes through an Identity to "logits", so the MatMul is the LM head.
  auto id = std::make_unique<ir::Node>();
  id->op_type = "Identity";
  id->inputs = {"Y"};
  id->outputs = {"logits"};
  g->nodes.push_back(std::move(id));
  auto ms = std::make_unique<ir::ModelSet>();
  ms->graphs.push_back(std::move(g));
  return ms;
}

// Applies quant recipe `name` with `options` (schema defaults filled in); returns the
// error message, "" on success.
std::string apply_recipe(const std::string& name, nlohmann::json options, ir::ModelSet& ms) {
  const host::PluginInfo* p = registry().find(NF_KIND_QUANT, name);
  if (!p) return "no plugin " + name;
  auto errors = manifest::validate_json(p->schema, options);
  if (!errors.empty()) return "schema: " + errors[0].message;
  nf_context ctx{"quant " + name, [](uint64_t, uint64_t, const std::string&) { return false; }};
  std::string json = options.dump();
  nf_status* st = p->quant()->apply(json.c_str(), host::handle(&ms), nullptr, &ctx);
  if (!st) return "";
  std::string msg = host::host_api()->status_message(st);
  host::host_api()->status_release(st);
  return msg;
}

}  // namespace

// Hand-computed LPBQ of one weight, K = 4 input channels in blocks of 2, N = 3 output
// channels, bw 4, decompressed bw 8 (so 2^(dbw-bw) = 16, block qmax = 7):
//  channel 0: blocks [0.7, -0.3] and [0.07, 0.014]
//    s_blk = 0.7/7 = 0.1 and 0.07/7 = 0.01; s_ch = 0.1/16 = 0.00625
//    i_blk = round(0.1/0.00625) = 16, round(0.01/0.00625) = round(1.6) = 2
//    q = round(0.7/0.1) = 7, round(-0.3/0.1) = -3; round(0.07/0.0125) = round(5.6) = 6,
//        round(0.014/0.0125) = round(1.12) = 1
//  channel 1: blocks [0.7, 0.1] and [0.001, 0]
//    s_blk = 0.1 and 0.001/7; s_ch = 0.00625; i_blk = 16, round(0.0229) = 0 -> clamped to 1
//    q = 7, 1; round(0.001/0.00625) = round(0.16) = 0, 0
//  channel 2: all zeros -> s_ch = 1, i_blk = 1, q = 0
TEST(LpbqMath, HandComputed) {
  // [K=4, N=3] row-major (MatMul B layout): row k holds channels 0..2.
  std::vector<float> w = {0.7f, 0.7f, 0.f,   //
                          -0.3f, 0.1f, 0.f,  //
                          0.07f, 0.001f, 0.f,
                          0.014f, 0.f, 0.f};
  auto r = quant::lpbq_quantize(w.data(), 4, 3, false, 2, 4, 8);
  ASSERT_EQ(r.blocks, 2);
  EXPECT_FLOAT_EQ(r.channel_scale[0], 0.00625f);
  EXPECT_FLOAT_EQ(r.channel_scale[1], 0.00625f);
  EXPECT_FLOAT_EQ(r.channel_scale[2], 1.f);
  EXPECT_EQ(r.block_ints, (std::vector<int32_t>{16, 2, 16, 1, 1, 1}));
  EXPECT_EQ(r.q, (std::vector<int32_t>{7, -3, 6, 1, 7, 1, 0, 0, 0, 0, 0, 0}));
  // q * i_blk is on the int8 per-channel grid of s_ch.
  for (size_t n = 0; n < 3; ++n)
    for (size_t k = 0; k < 4; ++k) {
      int v = r.q[n * 4 + k] * r.block_ints[n * 2 + k / 2];
      EXPECT_GE(v, -128);
      EXPECT_LE(v, 127);
    }
  // Without codes (what the recipe asks for): the same scales and integers.
  auto scales_only = quant::lpbq_quantize(w.data(), 4, 3, false, 2, 4, 8, /*codes=*/false);
  EXPECT_EQ(scales_only.channel_scale, r.channel_scale);
  EXPECT_EQ(scales_only.block_ints, r.block_ints);
  EXPECT_TRUE(scales_only.q.empty());
}

// One channel stored [N, K] (Gemm transB), K = 4 in blocks of 2: [0.7, -0.7 | 0.07, 0.014].
// s_blk = 0.1, 0.01; s_ch = 0.00625; i_blk = 16, 2; q = 7, -7 | round(5.6) = 6, round(1.12) = 1.
TEST(LpbqMath, TransposedLayoutAndNegativeRange) {
  std::vector<float> nk = {0.7f, -0.7f, 0.07f, 0.014f};  // one channel, K = 4
  auto r = quant::lpbq_quantize(nk.data(), 4, 1, true, 2, 4, 8);
  EXPECT_FLOAT_EQ(r.channel_scale[0], 0.00625f);
  EXPECT_EQ(r.block_ints, (std::vector<int32_t>{16, 2}));
  EXPECT_EQ(r.q, (std::vector<int32_t>{7, -7, 6, 1}));
}

TEST(LpbqRecipe, WritesLpbqEncodingAndKeepsLmHeadInt8) {
  const int64_t K = 4, N = 3;
  std::vector<float> w = {0.7f, 0.7f, 0.f, -0.3f, 0.1f, 0.f, 0.07f, 0.001f, 0.f, 0.014f, 0.f, 0.f};
  {
    auto ms = matmul_model(K, N, w);
    ASSERT_EQ(apply_recipe("lpbq", {{"block_size", 2}, {"exclude_lm_head", false}}, *ms), "");
    ASSERT_TRUE(ms->encodings.count("W"));
    const nf_encoding& e = ms->encodings.at("W").view;
    EXPECT_EQ(e.enc_type, NF_ENC_LPBQ);
    EXPECT_EQ(e.bw, 8);
    EXPECT_EQ(e.compressed_bw, 4);
    EXPECT_EQ(e.is_sym, 1);
    EXPECT_EQ(e.axis, 1);        // MatMul B [K, N]: output channels
    EXPECT_EQ(e.block_axis, 0);  // input channels
    EXPECT_EQ(e.block_size, 2);
    ASSERT_EQ(e.num_scales, 3u);
    EXPECT_FLOAT_EQ(e.scale[0], 0.00625f);
    EXPECT_EQ(e.offset[0], -128);
    ASSERT_EQ(e.num_block_ints, 6u);
    EXPECT_EQ(std::vector<int32_t>(e.per_block_int_scale, e.per_block_int_scale + 6),
              (std::vector<int32_t>{16, 2, 16, 1, 1, 1}));
  }
  {
    // Default: the MatMul producing logits is the LM head: int8 per channel, absmax/127.
    auto ms = matmul_model(K, N, w);
    ASSERT_EQ(apply_recipe("lpbq", {{"block_size", 2}}, *ms), "");
    const nf_encoding& e = ms->encodings.at("W").view;
    EXPECT_EQ(e.enc_type, NF_ENC_PER_CHANNEL);
    EXPECT_EQ(e.bw, 8);
    EXPECT_FLOAT_EQ(e.scale[0], 0.7f / 127);
    EXPECT_FLOAT_EQ(e.scale[1], 0.7f / 127);
    EXPECT_EQ(e.offset[0], -128);
  }
}

// A tied LM head, MatMul(h, Transpose(E)) on the embedding table E [V, H] itself: lpbq
// encodes E (int8, one scale per vocabulary row, axis 0) so the device stores one table for
// the lookup and the head, and the decoder's other weights get LPBQ.
TEST(LpbqRecipe, TiedLmHeadEncodesTheTableOncePerRow) {
  const int64_t V = 5, H = 4;
  std::vector<float> table(V * H), w(H * H, 0.25f);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.01f * float(i + 1) * (i % 2 ? -1.f : 1.f);
  auto ms = matmul_model(H, H, w);  // x @ W -> Identity -> logits
  ir::Graph& g = *ms->graphs[0];
  g.nodes[1]->op_type = "Transpose";  // the Identity becomes Transpose(E) ...
  g.nodes[1]->inputs = {"E"};
  g.nodes[1]->outputs = {"Et"};
  g.nodes[0]->outputs = {"h"};
  auto head = std::make_unique<ir::Node>();  // ... and the head reads it: logits = h @ E^T
  head->op_type = "MatMul";
  head->name = "/lm_head/MatMul";
  head->inputs = {"h", "Et"};
  head->outputs = {"logits"};
  g.nodes.push_back(std::move(head));
  g.initializers["E"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {V, H}, table));
  ASSERT_EQ(apply_recipe("lpbq", {{"block_size", 2}}, *ms), "");
  ASSERT_TRUE(ms->encodings.count("E"));
  const nf_encoding& e = ms->encodings.at("E").view;
  EXPECT_EQ(e.enc_type, NF_ENC_PER_CHANNEL);
  EXPECT_EQ(e.bw, 8);
  EXPECT_EQ(e.axis, 0);  // one scale per row of E: per output channel of the head
  ASSERT_EQ(e.num_scales, static_cast<size_t>(V));
  for (int64_t r = 0; r < V; ++r) EXPECT_FLOAT_EQ(e.scale[r], std::fabs(table[r * H + H - 1]) / 127) << r;
  EXPECT_EQ(ms->encodings.at("W").view.enc_type, NF_ENC_LPBQ);
}

TEST(LpbqRecipe, BlockSizeMustDivideInputChannels) {
  auto ms = matmul_model(6, 2, std::vector<float>(12, 0.5f));
  std::string err = apply_recipe("lpbq", {{"block_size", 4}, {"exclude_lm_head", false}}, *ms);
  EXPECT_NE(err.find("block_size 4 does not divide the 6 input channels of weight 'W'"), std::string::npos) << err;
  EXPECT_NE(err.find("indivisible = \"per_channel\""), std::string::npos) << err;
  EXPECT_TRUE(ms->encodings.empty());
}

TEST(LpbqRecipe, IndivisibleWeightsFallBackToPerChannelWhenAsked) {
  auto ms = matmul_model(6, 2, std::vector<float>(12, 0.5f));
  ASSERT_EQ(apply_recipe("lpbq", {{"block_size", 4}, {"exclude_lm_head", false}, {"indivisible", "per_channel"}}, *ms), "");
  const nf_encoding& e = ms->encodings.at("W").view;
  EXPECT_EQ(e.enc_type, NF_ENC_PER_CHANNEL);
  EXPECT_EQ(e.bw, 8);
  EXPECT_FLOAT_EQ(e.scale[0], 0.5f / 127);
}

TEST(LpbqRecipe, AsymmetricIsRejected) {
  auto ms = matmul_model(4, 2, std::vector<float>(8, 0.5f));
  std::string err = apply_recipe("lpbq", {{"symmetric", false}}, *ms);
  EXPECT_NE(err.find("LPBQ is symmetric only"), std::string::npos) << err;
}

TEST(MinmaxRecipe, SymmetricPerChannelAndOverrides) {
  // W [K=2, N=2]: channel 0 absmax 0.5, channel 1 absmax 2.54.
  std::vector<float> w = {0.5f, -2.54f, -0.25f, 1.f};
  auto ms = matmul_model(2, 2, w);
  ASSERT_EQ(apply_recipe("minmax", nlohmann::json::object(), *ms), "");
  const nf_encoding& e = ms->encodings.at("W").view;
  EXPECT_EQ(e.enc_type, NF_ENC_PER_CHANNEL);
  EXPECT_EQ(e.axis, 1);
  EXPECT_EQ(e.bw, 8);
  EXPECT_EQ(e.is_sym, 1);
  EXPECT_FLOAT_EQ(e.scale[0], 0.5f / 127);
  EXPECT_FLOAT_EQ(e.scale[1], 2.54f / 127);
  EXPECT_EQ(e.offset[1], -128);

  auto ms4 = matmul_model(2, 2, w);
  ASSERT_EQ(apply_recipe("minmax", {{"weight_bw", 4}, {"weight_granularity", "per_tensor"}}, *ms4), "");
  const nf_encoding& t = ms4->encodings.at("W").view;
  EXPECT_EQ(t.enc_type, NF_ENC_PER_TENSOR);
  EXPECT_EQ(t.bw, 4);
  EXPECT_FLOAT_EQ(t.scale[0], 2.54f / 7);
  EXPECT_EQ(t.offset[0], -8);

  auto mso = matmul_model(2, 2, w);
  ASSERT_EQ(apply_recipe("minmax", {{"weight_bw", 4}, {"overrides", {{{"pattern", "^W$"}, {"weight_bw", 8}}}}}, *mso),
            "");
  EXPECT_EQ(mso->encodings.at("W").view.bw, 8);
}

TEST(Calibration, TooManySamplesSaysHowManyTheTextHolds) {
  std::vector<int32_t> ids(130, 1);
  try {
    host::TextCalibration::make_batches(ids, 3, 64, "calib.txt");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "calib.txt: 130 tokens hold 2 samples of 64 tokens, but num_samples = 3");
  }
  auto b = host::TextCalibration::make_batches(ids, 2, 64, "calib.txt");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].size(), 64u);
}

TEST(Calibration, MissingEmptyAndShortTextAreClearErrors) {
  const host::PluginInfo* cpu = registry().find(NF_KIND_BACKEND, "cpu");
  ASSERT_NE(cpu, nullptr);
  auto dir = fs::temp_directory_path() / ("nf_quant_calib_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  manifest::Manifest::Calibration c;
  c.num_samples = 4;
  c.sequence_length = 64;
  auto error_of = [&] {
    try {
      host::TextCalibration calib(c, kTiny + "/tokenizer.json", *cpu);
      return std::string();
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
  };
  c.text = (dir / "missing.txt").string();
  EXPECT_EQ(error_of(), "calibration text " + c.text + ": no such file");
  c.text = (dir / "empty.txt").string();
  std::ofstream(c.text) << "\n";
  EXPECT_EQ(error_of(), "calibration text " + c.text + ": the file is empty");
  c.text = (dir / "short.txt").string();
  std::ofstream(c.text) << "SQLite is a small database.";
  std::string err = error_of();
  EXPECT_NE(err.find("hold 0 samples of 64 tokens, but num_samples = 4"), std::string::npos) << err;
  c.text = kTiny + "/heldout.txt";
  EXPECT_EQ(error_of(), "");

  // A JSONL dataset: its documents' text, tokenized as one text joined by blank lines.
  c.text.clear();
  c.jsonl = (dir / "data.jsonl").string();
  {
    std::ifstream held(kTiny + "/heldout.txt");
    std::ofstream out(c.jsonl);
    for (std::string line; std::getline(held, line);)
      if (!line.empty()) out << nlohmann::json{{"text", line}, {"id", 1}}.dump() << "\n";
  }
  EXPECT_EQ(error_of(), "");
  c.text_field = "content";
  EXPECT_EQ(error_of(), "calibration dataset " + c.jsonl + ":1: no string field \"content\" (set [calibration] text_field)");
  c.text_field = "text";
  std::ofstream(c.jsonl, std::ios::app) << "[1, 2]\n";
  err = error_of();
  EXPECT_NE(err.find(": not a JSON object"), std::string::npos) << err;

  // Pre-tokenized ids: an array, or an array of documents; no tokenizer needed.
  c.jsonl.clear();
  c.ids = (dir / "ids.json").string();
  std::ofstream(c.ids) << "[[1, 2, 3], [4, 5, 6, 7, 8]]";
  c.num_samples = 2;
  c.sequence_length = 4;
  host::TextCalibration ids(c, "", *cpu);
  ASSERT_EQ(ids.batch_count(), 2u);
  EXPECT_EQ(ids.batch(1), (std::vector<int32_t>{5, 6, 7, 8}));
  std::ofstream(c.ids) << "[1, -2]";
  EXPECT_EQ(error_of(), "calibration ids " + c.ids + ": element [1] is not a token id (a non-negative integer)");
  fs::remove_all(dir);
}

// Intermediate values come back by name, with the batch's sequence length.
TEST(Calibration, RunReturnsIntermediateValues) {
  auto calibration = tiny_calibration(2, 16);
  host::TextCalibration& calib = *calibration;
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  std::string hidden;  // the first MatMul's activation input
  for (const auto& n : ms->graphs[0]->nodes)
    if (n->op_type == "MatMul" && ms->graphs[0]->initializers.count(n->inputs[1])) {
      hidden = n->inputs[0];
      break;
    }
  ASSERT_FALSE(hidden.empty());
  const char* names[] = {hidden.c_str(), "logits"};
  nf_tensor* out[2] = {nullptr, nullptr};
  calib.run(*ms, 1, names, 2, out);
  auto h = host::adopt_tensor_handle(out[0]);
  auto logits = host::adopt_tensor_handle(out[1]);
  EXPECT_EQ(h->tensor.dims, (std::vector<int64_t>{1, 16, 256}));
  EXPECT_EQ(logits->tensor.dims, (std::vector<int64_t>{1, 16, 2048}));
  EXPECT_EQ(ms->graphs[0]->outputs.size(), 9u) << "the caller's graph is not changed";
  const char* bad[] = {"no_such_value"};
  nf_tensor* none = nullptr;
  EXPECT_THROW(calib.run(*ms, 0, bad, 1, &none), std::runtime_error);
  EXPECT_EQ(none, nullptr);
}

// Calibration runs the graph segment by segment (one decoder layer's weights at a time) and
// gives exactly the values of one whole-graph cpu session on the same batch.
TEST(Calibration, SegmentsGiveTheWholeGraphsValues) {
  auto calibration = tiny_calibration(3, 16);
  host::TextCalibration& calib = *calibration;
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  const ir::Graph& g = *ms->graphs[0];

  auto cut = host::cut_into_segments(g);
  const size_t layers = 4;  // tiny_llama
  ASSERT_EQ(cut.segments.size(), layers + 1);
  for (const auto& seg : cut.segments)
    for (const auto& v : seg.carried)
      EXPECT_FALSE(ms->graphs[0]->initializers.count(v)) << v;
  for (const auto& seg : cut.segments) {  // computed values crossing a boundary (graph inputs left out)
    size_t computed = 0;
    for (const auto& v : seg.carried) computed += cut.segment_of.count(v);
    EXPECT_LE(computed, 8u) << "only the residual stream, the attention inputs and the rotary/mask values cross: "
                            << nlohmann::json(seg.carried).dump();
  }

  // Every linear layer's input and output, the KV outputs and the logits.
  std::vector<std::string> names;
  for (const auto& n : g.nodes)
    if (n->op_type == "MatMul" && g.initializers.count(n->inputs[1]))
      for (const auto& v : {n->inputs[0], n->outputs[0]})
        if (std::find(names.begin(), names.end(), v) == names.end()) names.push_back(v);
  for (const auto& o : g.outputs) names.push_back(o);

  // The reference: the whole graph on one session, fed and configured as calibration's are
  // (weights multiplied where they are stored: a packed copy runs another GEMM, whose sums
  // may differ in the last bit).
  auto whole = ms->clone();
  whole->graphs[0]->outputs = names;
  const host::PluginInfo* cpu = registry().find(NF_KIND_BACKEND, "cpu");
  auto session =
      host::BackendSession::open_model_set(*cpu, {{"use_encodings", false}, {"stream_weights", true}}, *whole);
  host::DecoderIO io = host::DecoderIO::from_spec(host::graph_specs(*ms)[0]);
  for (size_t b = 0; b < calib.batch_count(); ++b) {
    const auto& ids = calib.batch(b);
    const int64_t T = static_cast<int64_t>(ids.size());
    std::vector<host::NamedTensor> in;
    auto ints = [&](std::vector<int64_t> v) {
      return ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {1, T}, v));
    };
    std::vector<int64_t> tokens(ids.begin(), ids.end()), ones(ids.size(), 1), pos(ids.size());
    for (int64_t i = 0; i < T; ++i) pos[static_cast<size_t>(i)] = i;
    in.push_back({io.input_ids, ints(tokens)});
    in.push_back({io.attention_mask, ints(ones)});
    in.push_back({io.position_ids, ints(pos)});
    for (size_t l = 0; l < io.past_keys.size(); ++l)
      for (const auto& past : {io.past_keys[l], io.past_values[l]})
        in.push_back({past, ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, io.kv_heads, 0, io.head_dim}))});
    auto expected = session->run(g.name, in, names);

    std::vector<const char*> cnames;
    for (const auto& n : names) cnames.push_back(n.c_str());
    std::vector<nf_tensor*> out(names.size(), nullptr);
    calib.run(*ms, b, cnames.data(), cnames.size(), out.data());
    for (size_t i = 0; i < names.size(); ++i) {
      auto got = host::adopt_tensor_handle(out[i]);
      ASSERT_EQ(got->tensor.dims, expected[i]->tensor.dims) << names[i];
      EXPECT_EQ(std::memcmp(got->tensor.data(), expected[i]->tensor.data(), got->tensor.nbytes()), 0)
          << names[i] << " differs from the whole graph's value, batch " << b;
    }
  }
  EXPECT_EQ(ms->graphs[0]->outputs.size(), 9u) << "the caller's graph is not changed";
}

// One calibration serves model set after model set (recipes in a row, tests): a model
// loaded where a freed one was gets its own weights, never the old graph's nodes.
TEST(Calibration, ServesOneModelSetAfterAnother) {
  auto calibration = tiny_calibration(1, 16);
  host::TextCalibration& calib = *calibration;
  auto logits = [&](ir::ModelSet& ms) {
    const char* names[] = {"logits"};
    nf_tensor* out = nullptr;
    calib.run(ms, 0, names, 1, &out);
    auto t = host::adopt_tensor_handle(out);
    return std::vector<float>(t->tensor.as<float>(), t->tensor.as<float>() + t->tensor.numel());
  };
  std::vector<float> first;
  {
    auto ms = host::load_source_model(kTiny + "/model.onnx", "");
    first = logits(*ms);
  }
  for (int i = 0; i < 3; ++i) {
    auto ms = host::load_source_model(kTiny + "/model.onnx", "");
    EXPECT_EQ(logits(*ms), first);
  }
}

// A draft's values (a graph of role "draft", run on the target's features) come from one
// draft session for every batch a recipe asks, not one per request; the values are those
// of a fresh session.
TEST(Calibration, OneDraftSessionServesEveryBatch) {
  auto with_draft = [] {
    auto ms = host::load_source_model(kTiny + "/model.onnx", "");
    auto draft = host::load_source_model(kTiny + "/eaglet/draft.onnx", "");
    draft->graphs[0]->name = "eaglet_draft";
    ms->graphs.push_back(std::move(draft->graphs[0]));
    ms->metadata["roles"] = R"({"draft": {"graphs": ["eaglet_draft"]}})";
    return ms;
  };
  auto ms = with_draft();
  const ir::Graph& d = *ms->graphs[1];
  std::string value;  // a draft value the target does not hold: its first MatMul's output
  for (const auto& n : d.nodes)
    if (n->op_type == "MatMul" && value.empty()) value = n->outputs[0];
  ASSERT_FALSE(value.empty());
  ASSERT_FALSE(ms->graphs[0]->producer(value)) << value;
  std::string features;  // the target's LM head input, which the draft reads
  for (const auto& n : ms->graphs[0]->nodes)
    if (n->op_type == "MatMul" && n->outputs[0] == "logits") features = n->inputs[0];
  ASSERT_FALSE(features.empty());

  auto sessions = [&](const std::vector<std::string>& names, std::vector<std::vector<float>>* values) {
    auto calibration = tiny_calibration(3, 16);
    host::TextCalibration& calib = *calibration;
    for (size_t b = 0; b < calib.batch_count(); ++b) {
      std::vector<const char*> c;
      for (const auto& n : names) c.push_back(n.c_str());
      std::vector<nf_tensor*> out(names.size());
      calib.run(*ms, b, c.data(), c.size(), out.data());
      for (nf_tensor* o : out) {
        auto t = host::adopt_tensor_handle(o);
        if (values) values->emplace_back(t->tensor.as<float>(), t->tensor.as<float>() + t->tensor.numel());
      }
    }
    return calib.sessions_opened();
  };
  const size_t target_only = sessions({features}, nullptr);
  std::vector<std::vector<float>> asked;
  EXPECT_EQ(sessions({features, value}, &asked), target_only + 1) << "one draft session for the 3 batches";
  // Batch 2's draft value from a calibration that asked for it alone (a session of its own).
  auto calibration = tiny_calibration(3, 16);
  const char* name[] = {value.c_str(), features.c_str()};
  nf_tensor* out[2] = {nullptr, nullptr};
  calibration->run(*ms, 2, name, 2, out);
  auto fresh = host::adopt_tensor_handle(out[0]);
  host::adopt_tensor_handle(out[1]);
  ASSERT_EQ(asked.size(), 6u);
  EXPECT_EQ(asked[5], std::vector<float>(fresh->tensor.as<float>(), fresh->tensor.as<float>() + fresh->tensor.numel()));
  EXPECT_NE(asked[5], asked[3]) << "batches differ";
}

// Asked layer by layer, every batch runs each segment once; a replaced weight reruns only
// the segments from the one holding it, and the values follow the weight.
TEST(Calibration, StreamsEachSegmentOncePerBatch) {
  auto calibration = tiny_calibration(3, 16);
  host::TextCalibration& calib = *calibration;
  auto ms = host::load_source_model(kTiny + "/model.onnx", "");
  ir::Graph& g = *ms->graphs[0];
  auto cut = host::cut_into_segments(g);
  std::vector<std::string> per_segment(cut.segments.size());  // a value each segment computes
  for (const auto& [value, s] : cut.segment_of)
    if (per_segment[s].empty() && g.producer(value)->op_type == "MatMul") per_segment[s] = value;
  per_segment.back() = "logits";
  auto run = [&](size_t batch, const std::string& name) {
    const char* names[] = {name.c_str()};
    nf_tensor* out = nullptr;
    calib.run(*ms, batch, names, 1, &out);
    auto t = host::adopt_tensor_handle(out);
    const float* p = t->tensor.as<float>();
    return std::vector<float>(p, p + t->tensor.numel());
  };
  std::vector<float> first_logits;
  for (const auto& name : per_segment)
    for (size_t b = 0; b < calib.batch_count(); ++b) {
      ASSERT_FALSE(name.empty());
      auto v = run(b, name);
      if (name == "logits" && b == 0) first_logits = v;
    }
  EXPECT_EQ(calib.sessions_opened(), cut.segments.size());
  EXPECT_EQ(calib.segments_run(), cut.segments.size() * calib.batch_count());
  EXPECT_EQ(run(0, "logits"), first_logits) << "the same segment run again gives the same values";

  // Replace the LM head (the last MatMul's weight) by zeros: only the last segment reruns.
  std::string head;
  for (const auto& n : g.nodes)
    if (n->op_type == "MatMul" && g.initializers.count(n->inputs[1])) head = n->inputs[1];
  ASSERT_FALSE(head.empty());
  const ir::Tensor& w = g.initializers.at(head)->tensor;
  g.initializers[head] = ir::make_tensor_ref(ir::Tensor::zeros(w.dtype, w.dims));
  const size_t before = calib.segments_run();
  auto zeroed = run(0, "logits");
  EXPECT_EQ(calib.segments_run(), before + 1);
  EXPECT_TRUE(std::all_of(zeroed.begin(), zeroed.end(), [](float v) { return v == 0.f; }));

  // An earlier segment's value after the state moved past it: computed again from the start.
  run(1, per_segment[0]);
  EXPECT_EQ(calib.segments_run(), before + 2);
}

namespace {

double perplexity_of(const std::string& model_or_package) {
  auto r = test::npuforge({"eval", model_or_package, "--text", kTiny + "/heldout.txt", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return NAN;
  return nlohmann::json::parse(r.out).at("perplexity").get<double>();
}

// Builds tiny_llama with one [[quant]] stage and [calibration] on heldout.txt; returns the
// package directory.
fs::path build_quantized(const std::string& name, const std::string& quant_table) {
  auto dir = fs::temp_directory_path() / ("nf_quant_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.toml") << "[model]\n"
                                       << "onnx = \"" << kTiny << "/model.onnx\"\n"
                                       << "config = \"" << kTiny << "/config.json\"\n"
                                       << "tokenizer = \"" << kTiny << "/tokenizer.json\"\n\n"
                                       << "[calibration]\ntext = \"" << kTiny << "/heldout.txt\"\n"
                                       << "num_samples = 4\nsequence_length = 64\n\n"
                                       << quant_table << "\n"
                                       << "[targets.cpu]\nbackend = \"cpu\"\n";
  auto r = test::npuforge({"build", (dir / "manifest.toml").string(), "--out", (dir / "out").string(), "--no-cache"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir / "out" / "cpu";
}

double float_perplexity() {
  static double ppl = perplexity_of(kTiny + "/model.onnx");
  return ppl;
}

}  // namespace

TEST(QuantBuild, MinmaxW8StaysWithinTwoPercentOfFloat) {
  fs::path pkg = build_quantized("minmax", "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\n");
  auto meta = nlohmann::json::parse(test::slurp(pkg / "package.json"));
  auto run = test::npuforge({"run", pkg.string(), "--prompt", "SQLite is a", "--max-new-tokens", "8"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
  double fp = float_perplexity(), q = perplexity_of(pkg.string());
  std::printf("tiny_llama heldout perplexity: float %.4f, minmax W8 %.4f (%+.2f%%)\n", fp, q, 100 * (q / fp - 1));
  EXPECT_LT(std::abs(q / fp - 1), 0.02);
  EXPECT_NE(q, fp) << "the package should run the int8 encodings, not fp32";
  fs::remove_all(pkg.parent_path().parent_path());
}

TEST(QuantBuild, LpbqW4BelowTwiceFloat) {
  fs::path pkg = build_quantized("lpbq", "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\n");
  auto run = test::npuforge({"run", pkg.string(), "--prompt", "SQLite is a", "--max-new-tokens", "8"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  double fp = float_perplexity(), q = perplexity_of(pkg.string());
  std::printf("tiny_llama heldout perplexity: float %.4f, lpbq W4 (block 64, LM head int8) %.4f (%+.2f%%)\n", fp, q,
              100 * (q / fp - 1));
  EXPECT_LT(q, 2 * fp);
  EXPECT_GT(q, fp * 0.98);
  fs::remove_all(pkg.parent_path().parent_path());
}
