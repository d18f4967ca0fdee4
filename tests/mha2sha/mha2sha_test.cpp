// mha2sha end to end: packages built by `npuforge build` with arcl then mha2sha (and with
// split in between once that plugin exists) reproduce the torch goldens through
// `npuforge run`; the graphs have one attention per head; options fail clearly.
#include <gtest/gtest.h>

#include "onnx/onnx_io.h"
#include "support/packages.h"

namespace nf::test {
namespace {

const std::string kArcl = "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 32\n\n";
const std::string kMha2sha = "[[transform]]\nplugin = \"mha2sha\"\n\n";
const std::string kSplit = "[[transform]]\nplugin = \"split\"\nnum_splits = 4\n\n";

class ArclMha2sha : public ::testing::TestWithParam<std::string> {};
TEST_P(ArclMha2sha, GoldenThroughCli) { expect_golden_package(GetParam(), kArcl + kMha2sha, "arcl+mha2sha"); }
INSTANTIATE_TEST_SUITE_P(Models, ArclMha2sha,
                         ::testing::Values("llama_gqa", "qwen2", "mixtral_moe", "mistral_swa", "tiny_llama"));

class ArclSplitMha2sha : public ::testing::TestWithParam<std::string> {};
TEST_P(ArclSplitMha2sha, GoldenThroughCli) {
  if (!split_available()) GTEST_SKIP() << "the split transform is not in the tree yet";
  expect_golden_package(GetParam(), kArcl + kSplit + kMha2sha, "arcl+split+mha2sha");
}
INSTANTIATE_TEST_SUITE_P(Models, ArclSplitMha2sha,
                         ::testing::Values("llama_gqa", "qwen2", "mixtral_moe", "mistral_swa", "tiny_llama"));

TEST(Mha2sha, PermutedKvCacheIo) {
  // hf cache IO turned into the HTP layout by mha2sha; and arcl's htp layout kept as is.
  expect_golden_package("llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\npermute_kv_cache_io = true\n",
                        "arcl+mha2sha(permute)");
  expect_golden_package("qwen2",
                        "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 32\nkv_layout = \"htp\"\n\n" + kMha2sha,
                        "arcl(htp)+mha2sha");
}

TEST(Mha2sha, SlidingContextVariants) {
  expect_golden_package("mistral_swa",
                        "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 512\nsliding_context_length = 256\n\n" +
                            kMha2sha,
                        "arcl(scl)+mha2sha");
}

// The package's graphs: one Softmax per query head and layer, per-head weights shared by
// every variant, KV inputs in the layout the metadata says.
TEST(Mha2sha, OneAttentionPerHeadAndSharedWeights) {
  WorkDir work("m2s_graphs");
  fs::path pkg = build_package(work.path, "llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\npermute_kv_cache_io = true\n");
  ASSERT_FALSE(HasFailure());
  auto meta = host::open_package(pkg).meta;
  EXPECT_EQ(meta.at("metadata").at("io").at("kv_layout"), "htp");
  auto ms = host::load_source_model((pkg / "artifacts" / "model" / "ar4_cl32.onnx").string(), "");
  // (load_source_model reads one graph file; the set's weights.bin holds the data.)
  const ir::Graph& g = *ms->graphs.at(0);
  int softmax = 0, split = 0;
  for (const auto& n : g.nodes) {
    softmax += n->op_type == "Softmax";
    split += n->op_type == "Split";
  }
  EXPECT_EQ(softmax, 3 * 4);  // llama_gqa: 3 layers x 4 query heads
  EXPECT_EQ(split, 3 * 2);    // each layer's key and value cache cut into its 2 KV heads
  int per_head = 0;
  for (const auto& [name, t] : g.initializers) per_head += name.find(".head") != std::string::npos;
  EXPECT_EQ(per_head, 3 * (4 + 2 + 2));  // q per query head, k and v per KV head
  auto dims = [&](const std::string& v) {
    std::vector<int64_t> d;
    for (const auto& x : *g.types.at(v).shape) d.push_back(x.value);
    return d;
  };
  EXPECT_EQ(dims("past_key_values.0.key"), (std::vector<int64_t>{2, 1, 16, 28}));
  EXPECT_EQ(dims("past_key_values.0.value"), (std::vector<int64_t>{2, 1, 28, 16}));
  EXPECT_EQ(dims("present.2.key"), (std::vector<int64_t>{2, 1, 16, 4}));
  EXPECT_EQ(dims("present.2.value"), (std::vector<int64_t>{2, 1, 4, 16}));
}

// An attention mha2sha cannot follow (a Relu between Qwen-3's q_norm and the head
// transpose works on no single head's values) stays multi-head: the build goes on and says
// so in one warning with the count and the first reason; MoE routers' Softmaxes are not counted.
TEST(Mha2sha, WarnsOfAttentionLeftMultiHead) {
  WorkDir work("m2s_left");
  auto g = onnx_io::load_model(test::model_dir("zoo/qwen3") + "/model.onnx");
  auto& nodes = g->nodes;
  auto at = std::find_if(nodes.begin(), nodes.end(), [](const auto& n) { return n->name == "/model/layers.0/self_attn/Transpose"; });
  ASSERT_NE(at, nodes.end());
  auto relu = std::make_unique<ir::Node>();
  relu->op_type = "Relu";
  relu->name = "inserted_relu";
  relu->inputs.push_back((*at)->inputs[0]);
  relu->outputs.push_back("inserted_relu_out");
  (*at)->inputs[0] = "inserted_relu_out";
  nodes.insert(at, std::move(relu));
  onnx_io::save_model(*g, (work.path / "model.onnx").string());
  fs::copy_file(test::model_dir("zoo/qwen3") + "/config.json", work.path / "config.json");
  std::ofstream(work.path / "manifest.toml") << "[model]\nonnx = \"model.onnx\"\n\n" << kArcl << kMha2sha
                                             << "[targets.cpu]\nbackend = \"cpu\"\n";
  auto r = test::npuforge({"build", (work.path / "manifest.toml").string(), "--out", (work.path / "out").string(), "--no-cache"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Layer 0's attention in each of the two AR variants; layer 1's is split.
  EXPECT_NE(r.err.find("mha2sha: 2 attention block(s) left multi-head (first: ar1_cl32: /model/layers.0/self_attn/Softmax:"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("2 attention blocks in 2 graphs split"), std::string::npos) << r.err;
  // A router's Softmax is no attention left behind.
  WorkDir moe("m2s_moe");
  build_package(moe.path, "mixtral_moe", kArcl + kMha2sha);
}

// A view that folds the heads into the rows (ONNX Runtime GenAI's q/k norms,
// legacy/qwen3_genai) is read per head only when every op on it works along the last axis: a
// mean over the rows x heads axis, put before layer 0's q norm, mixes heads, so that
// attention stays multi-head (one warning) while layer 1's is split, and the package
// computes what arcl alone computes.
TEST(Mha2sha, HeadsFoldedIntoRowsAreSplitOnlyWhenEveryOpIsPerHead) {
  WorkDir work("m2s_rows");
  auto g = onnx_io::load_model(test::model_dir("legacy/qwen3_genai") + "/model.onnx");
  auto& nodes = g->nodes;
  auto norm = std::find_if(nodes.begin(), nodes.end(), [](const auto& n) {
    return n->name == "/model/layers.0/attn/q_norm/SimplifiedLayerNormalization";
  });
  ASSERT_NE(norm, nodes.end());
  const std::string rows = (*norm)->inputs[0];  // [1, rows x heads, head_dim]
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto n = std::make_unique<ir::Node>();
    n->op_type = op;
    n->name = "inserted_" + out;
    n->inputs = std::move(in);
    n->outputs = {out};
    return n;
  };
  auto mean = add("ReduceMean", {rows, "/model/constants/INT64/[1]"}, "mean_over_heads");
  auto centered = add("Sub", {rows, "mean_over_heads"}, "centered");
  (*norm)->inputs[0] = "centered";
  norm = nodes.insert(norm, std::move(centered));
  nodes.insert(norm, std::move(mean));
  onnx_io::save_model(*g, (work.path / "model.onnx").string());
  fs::copy_file(test::model_dir("legacy/qwen3_genai") + "/config.json", work.path / "config.json");
  auto build = [&](const std::string& name, const std::string& stages) {
    std::ofstream(work.path / (name + ".toml")) << "[model]\nonnx = \"model.onnx\"\n\n" << stages
                                                << "[targets.cpu]\nbackend = \"cpu\"\n";
    return test::npuforge({"build", (work.path / (name + ".toml")).string(), "--out", (work.path / name).string(), "--no-cache"});
  };
  auto r = build("split", kArcl + kMha2sha);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("mha2sha: 2 attention block(s) left multi-head (first: ar1_cl32: "
                       "/model/layers.0/attn/GroupQueryAttention/Softmax:"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("2 attention blocks in 2 graphs split"), std::string::npos) << r.err;
  ASSERT_EQ(build("arcl", kArcl).exit_code, 0);
  const std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 250};
  const auto arcl_only = cli_greedy(work.path / "arcl" / "cpu", prompt, 12);
  ASSERT_EQ(arcl_only.size(), 12u);
  EXPECT_EQ(cli_greedy(work.path / "split" / "cpu", prompt, 12), arcl_only);
}

// ---- options and their errors -----------------------------------------------------

std::string build_error(const std::string& model, const std::string& stages) {
  WorkDir work("m2s_err");
  fs::path m = fs::path(test::model_dir(model));
  std::ofstream(work.path / "manifest.toml") << "[model]\nonnx = \"" + (m / "model.onnx").string() + "\"\n\n" + stages +
                                                    "\n[targets.cpu]\nbackend = \"cpu\"\n";
  auto r = test::npuforge({"build", (work.path / "manifest.toml").string(), "--out", (work.path / "out").string(), "--no-cache"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(work.path / "out" / "cpu")) << "a failed build leaves no package";
  return r.err;
}

TEST(Mha2shaOptions, NeedsStaticGraphs) {
  std::string e = build_error("llama_gqa", kMha2sha);
  EXPECT_NE(e.find("run arcl before mha2sha"), std::string::npos) << e;
}

TEST(Mha2shaOptions, UnknownStartPoint) {
  std::string e = build_error("llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\nm2s_additional_start_points = [\"/no/such/node\"]\n");
  EXPECT_NE(e.find("m2s_additional_start_points"), std::string::npos) << e;
  EXPECT_NE(e.find("no node named '/no/such/node'"), std::string::npos) << e;
}

TEST(Mha2shaOptions, StartPointThatIsNotAttention) {
  std::string e = build_error(
      "llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\nm2s_additional_start_points = [\"/model/layers.0/mlp/down_proj/MatMul\"]\n");
  EXPECT_NE(e.find("'/model/layers.0/mlp/down_proj/MatMul'"), std::string::npos) << e;
  EXPECT_NE(e.find("is not the Softmax, score MatMul or value MatMul"), std::string::npos) << e;
}

TEST(Mha2shaOptions, WrongTypesAreSchemaErrors) {
  std::string e = build_error("llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\npermute_kv_cache_io = \"yes\"\n");
  EXPECT_NE(e.find("permute_kv_cache_io"), std::string::npos) << e;
  e = build_error("llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\npermute_kv_cache_i = true\n");
  EXPECT_NE(e.find("permute_kv_cache_i"), std::string::npos) << e;
}

TEST(Mha2shaOptions, StartPointOfAnAttentionAlreadyFound) {
  // Naming a cached attention's Softmax changes nothing.
  expect_golden_package("llama_gqa",
                        kArcl + "[[transform]]\nplugin = \"mha2sha\"\nm2s_additional_start_points = [\"/model/layers.1/self_attn/Softmax\"]\n",
                        "arcl+mha2sha(start point)");
}

}  // namespace
}  // namespace nf::test
