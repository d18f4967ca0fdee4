// Encodings follow the per-head slices: tiny_llama quantized by the lpbq recipe (LPBQ
// W4 on every linear layer, int8 per-channel LM head), then arcl, with and without
// mha2sha. Every per-head weight carries the slice of its source's encoding, and the
// quantized runs agree.
#include <gtest/gtest.h>

#include "manifest/schema.h"
#include "support/packages.h"
#include "pipeline/pipeline.h"
#include "runner/static_runner.h"

namespace nf::test {
namespace {

void apply(nf_plugin_kind kind, const std::string& name, nlohmann::json options, ir::ModelSet& ms) {
  const host::PluginInfo* p = plugins().find(kind, name);
  ASSERT_NE(p, nullptr) << name << " is not built";
  auto errors = manifest::validate_json(p->schema, options);
  ASSERT_TRUE(errors.empty()) << errors[0].message;
  nf_context ctx{name, [](uint64_t, uint64_t, const std::string&) { return false; }};
  std::string json = options.dump();
  nf_status* st = kind == NF_KIND_QUANT ? p->quant()->apply(json.c_str(), host::handle(&ms), nullptr, &ctx)
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

}  // namespace
}  // namespace nf::test
