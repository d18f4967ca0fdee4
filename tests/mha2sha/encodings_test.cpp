// Encodings follow the per-head slices: tiny_llama quantized by the lpbq recipe (LPBQ
// W4 on every linear layer, int8 per-channel LM head), then arcl, with and without
// mha2sha. Every per-head weight carries the slice of its source's encoding, and the
// quantized runs agree.
#include <gtest/gtest.h>

#include "calibration/calibration.h"
#include "manifest/schema.h"
#include "runtime/package.h"
#include "support/packages.h"
#include "pipeline/pipeline.h"
#include "runner/static_runner.h"

namespace nf::test {
namespace {

void apply(nf_plugin_kind kind, const std::string& name, nlohmann::json options, ir::ModelSet& ms,
           nf_calibration* calib = nullptr) {
  const host::PluginInfo* p = plugins().find(kind, name);
  ASSERT_NE(p, nullptr) << name << " is not built";
  auto errors = manifest::validate_json(p->schema, options);
  ASSERT_TRUE(errors.empty()) << errors[0].message;
  nf_context ctx{name, [](uint64_t, uint64_t, const std::string&) { return false; }};
  std::string json = options.dump();
  nf_status* st = kind == NF_KIND_QUANT ? p->quant()->apply(json.c_str(), host::handle(&ms), calib, &ctx)
                                        : p->transform()->apply(json.c_str(), host::handle(&ms), &ctx);
  if (st) {
    std::string msg = host::host_api()->status_message(st);
    host::host_api()->status_release(st);
    FAIL() << name << ": " << msg;
  }
}

const std::string kTiny = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/tiny_llama";

std::unique_ptr<ir::ModelSet> quantized_static(bool sha) {
  auto ms = host::load_source_model(kTiny + "/model.onnx", kTiny + "/config.json");
  apply(NF_KIND_QUANT, "lpbq", nlohmann::json::object(), *ms);
  apply(NF_KIND_TRANSFORM, "arcl", {{"arn", {1, 4}}, {"context_length", 32}}, *ms);
  if (sha) apply(NF_KIND_TRANSFORM, "mha2sha", nlohmann::json::object(), *ms);
  return ms;
}

Greedy run(ir::ModelSet& ms, const std::vector<int32_t>& prompt, size_t n) {
  const host::PluginInfo* cpu = plugins().find(NF_KIND_BACKEND, "cpu");
  auto session = host::BackendSession::open_model_set(*cpu, {{"threads", 1}}, ms);
  nlohmann::json meta{{"io", nlohmann::json::parse(ms.metadata.at("io"))}};
  auto runner = host::make_runner(*session, host::graph_specs(ms), meta);
  return greedy(*runner, prompt, n);
}

TEST(Mha2shaEncodings, LpbqSlicedPerHeadAndQuantizedRunsAgree) {
  auto plain = quantized_static(false);
  ASSERT_FALSE(HasFatalFailure());
  auto sha = quantized_static(true);
  ASSERT_FALSE(HasFatalFailure());

  // tiny_llama: 4 layers, 8 query heads, 4 KV heads, head_dim 32, hidden 256, LPBQ block 64.
  const int64_t hd = 32, blocks = 256 / 64;
  size_t sliced = 0;
  for (const auto& g : sha->graphs)
    for (const auto& [name, t] : g->initializers) {
      size_t at = name.rfind(".head");
      if (at == std::string::npos) continue;
      auto it = sha->encodings.find(name);
      ASSERT_NE(it, sha->encodings.end()) << name << " lost its encoding";
      const nf_encoding& e = it->second.view;
      const int64_t h = std::stoll(name.substr(at + 5));
      const std::string source = name.substr(0, at);
      ASSERT_TRUE(plain->encodings.count(source)) << source;
      const nf_encoding& s = plain->encodings.at(source).view;
      EXPECT_EQ(e.enc_type, NF_ENC_LPBQ) << name;
      EXPECT_EQ(e.axis, 1);
      EXPECT_EQ(e.block_axis, 0);
      EXPECT_EQ(e.block_size, s.block_size);
      ASSERT_EQ(e.num_scales, static_cast<size_t>(hd)) << name;
      ASSERT_EQ(e.num_block_ints, static_cast<size_t>(hd * blocks)) << name;
      for (int64_t c = 0; c < hd; ++c) {
        EXPECT_EQ(e.scale[c], s.scale[h * hd + c]);
        EXPECT_EQ(e.offset[c], s.offset[h * hd + c]);
        for (int64_t b = 0; b < blocks; ++b)
          EXPECT_EQ(e.per_block_int_scale[c * blocks + b], s.per_block_int_scale[(h * hd + c) * blocks + b]);
      }
      // The source weight is gone from the graphs, and so is its encoding.
      EXPECT_EQ(g->initializers.count(source), 0u) << source;
      EXPECT_EQ(sha->encodings.count(source), 0u) << source;
      ++sliced;
    }
  // Each of the 2 variants lists 4 layers x (8 q + 4 k + 4 v) per-head weights.
  EXPECT_EQ(sliced, 2u * 4 * 16);

  nlohmann::json g = test::golden("tiny_llama");
  auto prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  Greedy a = run(*plain, prompt, 16), b = run(*sha, prompt, 16);
  EXPECT_EQ(a.tokens, b.tokens);
  double err = relative_error(b.last_logits, a.last_logits);
  EXPECT_LT(err, 1e-4);
  // The encodings are really applied: W4 logits are not the float ones.
  double from_float = relative_error(a.last_logits, g.at("last_logits").get<std::vector<float>>());
  EXPECT_GT(from_float, 1e-3);
  std::printf("lpbq tiny_llama: sliced vs unsliced last logits %.3g, quantized vs float %.3g (of the largest |logit|)\n",
              err, from_float);
}

// A fused qkv_proj (Phi-3) is cut by three branches: every per-head q, k and v slice takes
// its columns of the one LPBQ encoding, and the quantized runs agree with the unsliced graph.
TEST(Mha2shaEncodings, FusedQkvSlicesAllKeepTheirEncoding) {
  const std::string phi3 = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/zoo/phi3";
  auto quantized = [&](bool sha) {
    auto ms = host::load_source_model(phi3 + "/model.onnx", phi3 + "/config.json");
    apply(NF_KIND_QUANT, "lpbq", {{"block_size", 32}, {"indivisible", "per_channel"}}, *ms);
    apply(NF_KIND_TRANSFORM, "arcl", {{"arn", {1, 4}}, {"context_length", 32}}, *ms);
    if (sha) apply(NF_KIND_TRANSFORM, "mha2sha", nlohmann::json::object(), *ms);
    return ms;
  };
  auto plain = quantized(false);
  ASSERT_FALSE(HasFatalFailure());
  auto sha = quantized(true);
  ASSERT_FALSE(HasFatalFailure());
  // Per-head slices of the fused weight are named "<weight>.col<first column>.head<h>".
  size_t from_q = 0, from_k_or_v = 0;
  std::vector<std::string> missing;
  for (const auto& g : sha->graphs)
    for (const auto& n : g->nodes) {
      if (n->op_type != "MatMul" || n->inputs.size() < 2 || !g->initializers.count(n->inputs[1])) continue;
      const std::string& w = n->inputs[1];
      if (!sha->encodings.count(w)) missing.push_back(w);
      else if (w.find(".col0.head") != std::string::npos) ++from_q;
      else if (w.find(".col") != std::string::npos) ++from_k_or_v;
    }
  EXPECT_TRUE(missing.empty()) << missing.size() << " linear weights lost their encoding, e.g. " << missing.front();
  EXPECT_GT(from_q, 0u);
  EXPECT_GT(from_k_or_v, 0u);  // the ranges cut after q's keep their encoding too
  nlohmann::json g = test::golden("zoo/phi3");
  auto prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  Greedy a = run(*plain, prompt, 16), b = run(*sha, prompt, 16);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_LT(relative_error(b.last_logits, a.last_logits), 1e-4);
}

// Issue 5, item 7: after arcl, split and mha2sha every weight of a linear layer and every
// activation the recipe encoded (linear inputs/outputs, the KV cache) still has an
// encoding in the final graphs, including the tensors the transforms create (per-head
// slices, KV buffers of each part), and the quantized runs agree.
TEST(TransformEncodings, EveryLinearAndKvTensorKeepsItsEncodingThroughArclSplitMha2sha) {
  if (!plugin_built("split")) GTEST_SKIP() << "split is not built";
  manifest::Manifest::Calibration c;
  c.text = kTiny + "/calibration.txt";
  c.num_samples = 2;
  c.sequence_length = 32;
  host::TextCalibration calib(c, kTiny + "/tokenizer.json", *plugins().find(NF_KIND_BACKEND, "cpu"));
  auto quantized = [&](bool split_and_sha) {
    auto ms = host::load_source_model(kTiny + "/model.onnx", kTiny + "/config.json");
    apply(NF_KIND_QUANT, "lpbq", nlohmann::json::object(), *ms, &calib);
    apply(NF_KIND_TRANSFORM, "arcl", {{"arn", {1, 4}}, {"context_length", 32}}, *ms);
    if (split_and_sha) {
      apply(NF_KIND_TRANSFORM, "split", {{"num_splits", 4}}, *ms);
      apply(NF_KIND_TRANSFORM, "mha2sha", nlohmann::json::object(), *ms);
    }
    return ms;
  };
  auto plain = quantized(false);
  ASSERT_FALSE(HasFatalFailure());
  auto ms = quantized(true);
  ASSERT_FALSE(HasFatalFailure());

  size_t weights = 0, activations = 0, kv = 0;
  std::vector<std::string> missing;
  auto check = [&](const std::string& name, size_t& count) {
    if (ms->encodings.count(name)) ++count;
    else missing.push_back(name);
  };
  for (const auto& g : ms->graphs) {
    for (const auto& n : g->nodes) {
      if (n->op_type != "MatMul" && n->op_type != "Gemm") continue;
      if (n->inputs.size() < 2 || !g->initializers.count(n->inputs[1])) continue;  // attention, not a linear layer
      check(n->inputs[1], weights);
      check(n->inputs[0], activations);
      check(n->outputs[0], activations);
    }
    for (const auto& in : g->inputs)
      if (in.rfind("past_key_values.", 0) == 0) check(in, kv);
    for (const auto& out : g->outputs)
      if (out.rfind("present.", 0) == 0) check(out, kv);
  }
  EXPECT_TRUE(missing.empty()) << missing.size() << " tensors lost their encoding, e.g. " << missing.front();
  // 2 variants x (embedding, 2 layer parts, LM head): every layer's 16 per-head q/k/v + o, gate, up, down.
  EXPECT_GT(weights, 2u * 4 * (16 + 4));
  EXPECT_GT(kv, 0u);

  nlohmann::json g = test::golden("tiny_llama");
  auto prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  Greedy a = run(*plain, prompt, 16), b = run(*ms, prompt, 16);
  EXPECT_EQ(a.tokens, b.tokens);
  const double err = relative_error(b.last_logits, a.last_logits);
  EXPECT_LT(err, 1e-2);
  std::printf("lpbq A16/KV8 tiny_llama after arcl+split+mha2sha: %zu weights, %zu activations, %zu KV tensors encoded; "
              "last logits vs arcl only %.3g\n",
              weights, activations, kv, err);
}

}  // namespace
}  // namespace nf::test
