// split in process: every test model, arcl then split, run through the static runner on
// the cpu backend: greedy tokens equal the torch goldens and every step's logits equal
// the unsplit arcl graphs' within 1e-4 relative; the parts share the weights of the
// unsplit graphs (same bytes, nothing copied); each invalid option gets one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "runner/generate.h"
#include "split_support.h"

namespace split_test {
namespace {

struct Case {
  std::string name, model;
  nlohmann::json arcl, split;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

const nlohmann::json kAr14Cl32 = {{"arn", {1, 4}}, {"context_length", 32}};
const nlohmann::json kSwaScl = {{"arn", {1, 4}}, {"context_length", 512}, {"sliding_context_length", 256}};

std::unique_ptr<nf::ir::ModelSet> arcl_model(const Case& c) {
  auto ms = load_model(c.model);
  std::string e = apply(*ms, "arcl", c.arcl);
  if (!e.empty()) throw std::runtime_error("arcl: " + e);
  return ms;
}

// Distinct weight bytes of a model set (shared buffers counted once).
std::pair<size_t, std::set<const void*>> weight_bytes(const nf::ir::ModelSet& ms) {
  std::set<const void*> seen;
  size_t bytes = 0;
  for (const auto& g : ms.graphs)
    for (const auto& [name, ref] : g->initializers)
      if (seen.insert(ref->tensor.data()).second) bytes += ref->tensor.nbytes();
  return {bytes, seen};
}

class SplitGolden : public ::testing::TestWithParam<Case> {};

TEST_P(SplitGolden, TokensEqualGoldenAndLogitsEqualUnsplit) {
  const Case& c = GetParam();
  if (!model_exists(c.model)) GTEST_SKIP() << c.model << "/model.onnx is not there";
  auto split_ms = arcl_model(c);
  auto [bytes_before, buffers_before] = weight_bytes(*split_ms);
  ASSERT_EQ(apply(*split_ms, "split", c.split), "");

  // Weights: the same buffers, no new ones.
  auto [bytes_after, buffers_after] = weight_bytes(*split_ms);
  EXPECT_EQ(bytes_after, bytes_before);
  for (const void* p : buffers_after) EXPECT_TRUE(buffers_before.count(p)) << "a part has a weight the unsplit graphs did not";

  // Names and metadata: every variant in n parts named {variant}_{i}_of_{n}.
  nlohmann::json io = nlohmann::json::parse(split_ms->metadata.at("io"));
  const int64_t n = io.at("split").at("num_splits");
  ASSERT_GT(n, 1);
  for (const auto& v : io.at("variants")) {
    ASSERT_EQ(v.at("splits"), n);
    for (int64_t i = 1; i <= n; ++i) {
      std::string name = v.at("graph").get<std::string>() + "_" + std::to_string(i) + "_of_" + std::to_string(n);
      EXPECT_NE(split_ms->find(name), nullptr) << name;
      EXPECT_EQ(v.at("parts").at(i - 1).at("graph"), name);
    }
  }
  EXPECT_EQ(split_ms->graphs.size(), io.at("variants").size() * static_cast<size_t>(n));
  // Every layer's KV comes out of exactly one part.
  std::multiset<int64_t> layers;
  for (const auto& part : io.at("split").at("part_layers"))
    for (const auto& l : part) layers.insert(l.get<int64_t>());
  for (int64_t l = 0; l < io.at("layers"); ++l) EXPECT_EQ(layers.count(l), 1u) << "layer " << l;

  Model whole = open_runner(arcl_model(c));
  Model parts = open_runner(std::move(split_ms));
  nlohmann::json g = golden(c.model);
  auto prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  auto want = g.at("generated_ids").get<std::vector<int32_t>>();

  // Prefill with every row's logits, then greedy decode one token a pass.
  std::vector<float> a = whole.runner->append(prompt, true), b = parts.runner->append(prompt, true);
  double worst = relative_error(b, a);
  std::vector<int32_t> got;
  std::vector<float> last(b.end() - static_cast<long>(whole.runner->vocab_size()), b.end());
  for (size_t i = 0; i < want.size(); ++i) {
    got.push_back(nf::host::argmax(last));
    if (i + 1 == want.size()) break;
    a = whole.runner->append({&got.back(), 1});
    b = parts.runner->append({&got.back(), 1});
    worst = std::max(worst, relative_error(b, a));
    last = b;
  }
  EXPECT_EQ(got, want);
  EXPECT_LT(worst, 1e-4) << "split logits differ from the unsplit graphs'";
  double golden_err = relative_error(last, g.at("last_logits").get<std::vector<float>>());
  EXPECT_LT(golden_err, 1e-4);
  EXPECT_EQ(parts.runner->forward_passes(), whole.runner->forward_passes());

  // The row call across parts: a tree of rows, then commit a path, as speculative decoders do.
  whole.runner->reset();
  parts.runner->reset();
  whole.runner->append(prompt);
  parts.runner->append(prompt);
  const std::vector<int32_t> tokens{want[0], want[1], 7, want[2]}, parents{-1, 0, 0, 1};
  const size_t vocab = whole.runner->vocab_size();
  std::vector<float> ta(tokens.size() * vocab), tb(tokens.size() * vocab);
  whole.runner->forward(tokens.data(), parents.data(), tokens.size(), ta.data());
  parts.runner->forward(tokens.data(), parents.data(), tokens.size(), tb.data());
  double tree_err = relative_error(tb, ta);
  EXPECT_LT(tree_err, 1e-4) << "row call";
  const std::vector<int32_t> path{0, 1, 3};
  whole.runner->commit(path.data(), path.size());
  parts.runner->commit(path.data(), path.size());
  EXPECT_EQ(parts.runner->n_past(), prompt.size() + 3);
  double after_commit = relative_error(parts.runner->append({&want[3], 1}), whole.runner->append({&want[3], 1}));
  EXPECT_LT(after_commit, 1e-4) << "after commit";

  std::printf("%s: %lld parts, %zu tokens == golden, split vs unsplit max rel %.3g, vs torch %.3g\n", c.name.c_str(),
              static_cast<long long>(n), got.size(), worst, golden_err);
}

const nlohmann::json kFour = {{"num_splits", 4}};

INSTANTIATE_TEST_SUITE_P(
    Models, SplitGolden,
    ::testing::Values(Case{"llama_gqa", "llama_gqa", kAr14Cl32, kFour}, Case{"qwen2", "qwen2", kAr14Cl32, kFour},
                      Case{"mixtral_moe", "mixtral_moe", kAr14Cl32, kFour},
                      Case{"mistral_swa", "mistral_swa", kAr14Cl32, kFour},
                      Case{"mistral_swa_scl", "mistral_swa", kSwaScl, kFour},
                      Case{"tiny_llama", "tiny_llama", kAr14Cl32, kFour},
                      Case{"llama_gqa_default", "llama_gqa", kAr14Cl32, nlohmann::json::object()},
                      Case{"llama_gqa_htp_layout", "llama_gqa",
                           {{"arn", {1, 4}}, {"context_length", 32}, {"kv_layout", "htp"}}, kFour},
                      Case{"llama_gqa_no_embedding_no_lm_head", "llama_gqa", kAr14Cl32,
                           {{"num_splits", 2}, {"split_embedding", false}, {"split_lm_head", false}}},
                      Case{"qwen2_regex", "qwen2", kAr14Cl32,
                           {{"num_splits", 3}, {"split_embedding", false}, {"layer_boundary_name_regex", "/layers\\.[0-9]+/Add_1$"}}}),
    [](const auto& info) { return info.param.name; });

// ---- structure ------------------------------------------------------------------------

TEST(SplitStructure, PartsChainHiddenStateAndKv) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  auto ms = arcl_model({"", "llama_gqa", kAr14Cl32, {}});
  ASSERT_EQ(apply(*ms, "split", {{"num_splits", 4}}), "");
  nlohmann::json io = nlohmann::json::parse(ms->metadata.at("io"));
  const auto& parts = io.at("variants").at(0).at("parts");
  ASSERT_EQ(parts.size(), 4u);
  // 1: embedding (input_ids only) -> hidden state; 4: LM head -> logits.
  EXPECT_EQ(parts[0].at("inputs_from_runner"), nlohmann::json({"input_ids"}));
  EXPECT_EQ(parts[0].at("outputs_to_parts").size(), 1u);
  EXPECT_TRUE(parts[0].at("layers").empty());
  EXPECT_EQ(parts[3].at("outputs"), nlohmann::json({"logits"}));
  EXPECT_TRUE(parts[3].at("inputs_from_runner").empty());
  // Decoder parts take exactly one value from the part before and give one to the next.
  for (size_t i = 1; i < 4; ++i) {
    ASSERT_EQ(parts[i].at("inputs_from_parts").size(), 1u) << i;
    EXPECT_EQ(parts[i].at("inputs_from_parts")[0].at("part"), i);
    EXPECT_EQ(parts[i].at("inputs_from_parts")[0].at("name"), parts[i - 1].at("outputs_to_parts")[0]);
  }
  // Layers balanced: 3 layers in 2 decoder parts.
  EXPECT_EQ(parts[1].at("layers").size() + parts[2].at("layers").size(), 3u);
  for (const char* in : {"position_ids", "attention_mask", "past_key_values.0.key"})
    EXPECT_NE(std::find(parts[1].at("inputs_from_runner").begin(), parts[1].at("inputs_from_runner").end(), in),
              parts[1].at("inputs_from_runner").end())
        << in;
  // Same part of two variants: the same weight bytes (the small constants arcl folds per
  // variant, shapes and scalars, are each variant's own).
  const nf::ir::Graph* a = ms->find("ar1_cl32_2_of_4");
  const nf::ir::Graph* b = ms->find("ar4_cl32_2_of_4");
  ASSERT_TRUE(a && b);
  size_t weights = 0;
  for (const auto& [name, ref] : a->initializers) {
    if (ref->tensor.nbytes() < 1024) continue;
    ++weights;
    auto it = b->initializers.find(name);
    ASSERT_NE(it, b->initializers.end()) << name;
    EXPECT_EQ(it->second->tensor.data(), ref->tensor.data()) << name;
  }
  EXPECT_GE(weights, 4u);  // layer 0 or 0-1: q, k, v, o, gate, up, down projections
}

// ---- errors -----------------------------------------------------------------------------

std::string split_error(const nlohmann::json& options, const std::string& model = "llama_gqa", bool with_arcl = true) {
  auto ms = load_model(model);
  if (with_arcl) {
    std::string e = apply(*ms, "arcl", kAr14Cl32);
    if (!e.empty()) return "arcl: " + e;
  }
  return apply(*ms, "split", options);
}

void expect_error(const std::string& e, const std::vector<std::string>& parts) {
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' not in: " << e;
}

TEST(SplitErrors, MoreSplitsThanLayers) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  expect_error(split_error({{"num_splits", 9}}), {"num_splits", "9", "at most 5"});
}
TEST(SplitErrors, NoPartLeftForTheLayers) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  expect_error(split_error({{"num_splits", 2}}), {"num_splits", "at least 3"});
  expect_error(split_error({{"num_splits", 1}, {"split_lm_head", false}}), {"num_splits", "at least 2"});
}
TEST(SplitErrors, RegexMatchesNothing) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  expect_error(split_error({{"layer_boundary_name_regex", "no_such_node"}}), {"layer_boundary_name_regex", "matches no node"});
}
TEST(SplitErrors, BadRegex) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  expect_error(split_error({{"layer_boundary_name_regex", "layers.(["}}), {"layer_boundary_name_regex", "not a valid regex"});
}
TEST(SplitErrors, RegexBoundariesOutOfSequence) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  // The rotary tables do not depend on input_ids: they are not on the hidden-state path.
  expect_error(split_error({{"num_splits", 2}, {"split_embedding", false}, {"split_lm_head", false},
                            {"layer_boundary_name_regex", "^/model/rotary/Cos$|/layers\\.2/Add_1$"}}),
               {"not on the hidden-state path"});
}
TEST(SplitErrors, BeforeArcl) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  expect_error(split_error(nlohmann::json::object(), "llama_gqa", false), {"run arcl before split"});
}
TEST(SplitErrors, Twice) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  auto ms = load_model("llama_gqa");
  ASSERT_EQ(apply(*ms, "arcl", kAr14Cl32), "");
  ASSERT_EQ(apply(*ms, "split", {{"num_splits", 3}}), "");
  expect_error(apply(*ms, "split", {{"num_splits", 3}}), {"already split"});
}

TEST(SplitOptions, NumSplitsOneKeepsGraphsWhole) {
  if (!model_exists("llama_gqa")) GTEST_SKIP();
  auto ms = load_model("llama_gqa");
  ASSERT_EQ(apply(*ms, "arcl", kAr14Cl32), "");
  ASSERT_EQ(apply(*ms, "split", {{"num_splits", 1}, {"split_embedding", false}, {"split_lm_head", false}}), "");
  EXPECT_NE(ms->find("ar1_cl32"), nullptr);
  EXPECT_EQ(ms->graphs.size(), 2u);
}

}  // namespace
}  // namespace split_test
