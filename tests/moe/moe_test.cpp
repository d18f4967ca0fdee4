// moe end to end on tests/models/mixtral_moe (4 experts, top-2, renormalised): packages
// built with arcl + moe (and + mha2sha) reproduce the torch goldens through the CLI; the
// routing is a float gate mask (no TopK indices are read); expert subselection removes
// experts from the graph; options fail clearly.
#include <gtest/gtest.h>

#include <set>

#include "support/packages.h"
#include "pipeline/pipeline.h"

namespace nf::test {
namespace {

const std::string kArcl = "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 32\n\n";
const std::string kMoe = "[[transform]]\nplugin = \"moe\"\n\n";
const std::string kMha2sha = "[[transform]]\nplugin = \"mha2sha\"\n\n";

TEST(Moe, ArclMoeGolden) { expect_golden_package("mixtral_moe", kArcl + kMoe, "arcl+moe"); }
TEST(Moe, ArclMoeMha2shaGolden) { expect_golden_package("mixtral_moe", kArcl + kMoe + kMha2sha, "arcl+moe+mha2sha"); }
TEST(Moe, ArclMha2shaMoeGolden) { expect_golden_package("mixtral_moe", kArcl + kMha2sha + kMoe, "arcl+mha2sha+moe"); }
TEST(Moe, ArclSplitMoeMha2shaGolden) {
  if (!split_available()) GTEST_SKIP() << "the split transform is not in the tree yet";
  expect_golden_package("mixtral_moe", kArcl + "[[transform]]\nplugin = \"split\"\nnum_splits = 4\n\n" + kMoe + kMha2sha,
                        "arcl+split+moe+mha2sha");
}
TEST(Moe, BeforeArclOnTheDynamicGraph) {
  // moe does not need static shapes: on the source graph, then arcl.
  expect_golden_package("mixtral_moe", kMoe + kArcl, "moe+arcl");
}

struct GraphCounts {
  int topk = 0, equal = 0, expert_matmuls = 0, gate_where = 0;
  bool reads_indices = false;
};

GraphCounts counts(const fs::path& pkg, const std::string& graph) {
  auto ms = host::load_source_model((pkg / "artifacts" / "model" / (graph + ".onnx")).string(), "");
  GraphCounts c;
  const ir::Graph& g = *ms->graphs.at(0);
  std::set<std::string> indices;
  for (const auto& n : g.nodes)
    if (n->op_type == "TopK") {
      ++c.topk;
      indices.insert(n->outputs.at(1));
    }
  for (const auto& n : g.nodes) {
    c.equal += n->op_type == "Equal";
    c.gate_where += n->op_type == "Where";
    c.expert_matmuls += n->op_type == "MatMul" && n->name.find("/experts.") != std::string::npos;
    for (const auto& in : n->inputs) c.reads_indices |= indices.count(in) > 0;
  }
  return c;
}

TEST(Moe, GateMaskAndSubselection) {
  WorkDir work("moe_graphs");
  fs::path all = build_package(work.path / "all", "mixtral_moe", kArcl + kMoe);
  ASSERT_FALSE(HasFailure());
  GraphCounts c = counts(all, "ar4_cl32");
  EXPECT_EQ(c.topk, 2);  // one per layer, values only
  EXPECT_FALSE(c.reads_indices);
  EXPECT_EQ(c.equal, 0);  // no one-hot
  EXPECT_EQ(c.gate_where, 2);
  EXPECT_EQ(c.expert_matmuls, 2 * 4 * 3);

  // Keep experts 0, 1, 3 everywhere, and drop layer 1's expert 0 by name as well.
  fs::path some = build_package(work.path / "some", "mixtral_moe",
                                kArcl + "[[transform]]\nplugin = \"moe\"\noverridden_subselection = [0, 1, 3]\n"
                                        "remove_op_predicate = 'layers\\.1/block_sparse_moe/experts\\.0/'\n");
  ASSERT_FALSE(HasFailure());
  c = counts(some, "ar4_cl32");
  EXPECT_EQ(c.expert_matmuls, (3 + 2) * 3);
  // Still a working model (a different one: experts are gone).
  nlohmann::json g = test::golden("mixtral_moe");
  auto tokens = cli_greedy(some, g.at("prompt_ids").get<std::vector<int32_t>>(), 8);
  EXPECT_EQ(tokens.size(), 8u);

  // Keeping every expert explicitly is the full model.
  fs::path listed = build_package(work.path / "listed", "mixtral_moe",
                                  kArcl + "[[transform]]\nplugin = \"moe\"\noverridden_subselection = { \"0\" = [0, 1, 2, 3] }\n");
  ASSERT_FALSE(HasFailure());
  auto want = g.at("generated_ids").get<std::vector<int32_t>>();
  EXPECT_EQ(cli_greedy(listed, g.at("prompt_ids").get<std::vector<int32_t>>(), want.size()), want);
}

std::string build_error(const std::string& model, const std::string& stages) {
  WorkDir work("moe_err");
  fs::path m = fs::path(test::model_dir(model));
  std::ofstream(work.path / "manifest.toml") << "[model]\nonnx = \"" + (m / "model.onnx").string() + "\"\n\n" + stages +
                                                    "\n[targets.cpu]\nbackend = \"cpu\"\n";
  auto r = test::npuforge({"build", (work.path / "manifest.toml").string(), "--out", (work.path / "out").string(), "--no-cache"});
  EXPECT_NE(r.exit_code, 0);
  return r.err;
}

TEST(MoeOptions, ClearErrors) {
  std::string e = build_error("llama_gqa", kArcl + kMoe);
  EXPECT_NE(e.find("moe: found no top-k routed expert block"), std::string::npos) << e;
  e = build_error("mixtral_moe", kArcl + "[[transform]]\nplugin = \"moe\"\noverridden_subselection = [0, 7]\n");
  EXPECT_NE(e.find("names expert 7 but layer 0 has 4 experts"), std::string::npos) << e;
  e = build_error("mixtral_moe", kArcl + "[[transform]]\nplugin = \"moe\"\noverridden_subselection = [2]\n");
  EXPECT_NE(e.find("fewer than the top-k (2)"), std::string::npos) << e;
  e = build_error("mixtral_moe", kArcl + "[[transform]]\nplugin = \"moe\"\noverridden_subselection = { \"5\" = [0, 1] }\n");
  EXPECT_NE(e.find("names layer 5, which has no MoE block"), std::string::npos) << e;
  e = build_error("mixtral_moe", kArcl + "[[transform]]\nplugin = \"moe\"\nremove_op_predicate = 'experts\\.9/'\n");
  EXPECT_NE(e.find("matches no expert's node"), std::string::npos) << e;
  e = build_error("mixtral_moe", kArcl + "[[transform]]\nplugin = \"moe\"\nremove_op_predicate = '('\n");
  EXPECT_NE(e.find("'remove_op_predicate' is not a valid regex"), std::string::npos) << e;
  e = build_error("mixtral_moe", kArcl + "[[transform]]\nplugin = \"moe\"\noverridden_subselection = \"all\"\n");
  EXPECT_NE(e.find("overridden_subselection"), std::string::npos) << e;
}

}  // namespace
}  // namespace nf::test
