// The decoder-family conformance matrix: every model in tests/models (our generator's five
// and the family zoo of tests/models/zoo, exported by torch.onnx from HF-faithful code)
// through every transform chain that applies to it. Each package must give torch's greedy
// tokens exactly and its last logits within 1e-4 (float), through `npuforge run`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "support/packages.h"

namespace nf::test {
namespace {

const std::string kArcl = "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 32\n\n";
const std::string kSplit = "[[transform]]\nplugin = \"split\"\nnum_splits = 3\n\n";
const std::string kMha2sha = "[[transform]]\nplugin = \"mha2sha\"\n\n";
const std::string kMoe = "[[transform]]\nplugin = \"moe\"\n\n";

// Every model folder with a golden.json: "llama_gqa", ..., "zoo/phi3", ...
std::vector<std::string> models() {
  std::vector<std::string> r;
  const fs::path root = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "models";
  for (const fs::path& base : {root, root / "zoo"}) {
    if (!fs::is_directory(base)) continue;
    for (const auto& e : fs::directory_iterator(base))
      if (fs::exists(e.path() / "golden.json") && fs::exists(e.path() / "model.onnx"))
        r.push_back(fs::relative(e.path(), root).string());
  }
  std::sort(r.begin(), r.end());
  return r;
}

bool is_moe(const std::string& model) {
  nlohmann::json c = nlohmann::json::parse(slurp(model_dir(model) + "/config.json"));
  for (const char* key : {"num_local_experts", "num_experts"})
    if (c.contains(key) && c[key].is_number_integer() && c[key].get<int64_t>() > 0) return true;
  return false;
}

struct Chain {
  std::string name, stages;
  bool moe_only = false;
};

const std::vector<Chain> kChains = {
    {"arcl", kArcl},
    {"arcl+split", kArcl + kSplit},
    {"arcl+split+mha2sha", kArcl + kSplit + kMha2sha},
    {"arcl+moe", kArcl + kMoe, true},
    {"arcl+split+mha2sha+moe", kArcl + kSplit + kMha2sha + kMoe, true},
};

struct Case {
  std::string model;
  const Chain* chain;
};

// Every model with every chain that applies to it (moe only where there is an MoE block).
std::vector<Case> cases() {
  std::vector<Case> r;
  for (const std::string& m : models())
    for (const Chain& c : kChains)
      if (!c.moe_only || is_moe(m)) r.push_back({m, &c});
  return r;
}

std::string label(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.model + "_" + info.param.chain->name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class Family : public ::testing::TestWithParam<Case> {};

TEST_P(Family, KeepsTorchGreedy) {
  const Case& c = GetParam();
  std::string tag = c.chain->name;
  std::replace(tag.begin(), tag.end(), '+', '_');
  expect_golden_package(c.model, c.chain->stages, tag);
}

INSTANTIATE_TEST_SUITE_P(Matrix, Family, ::testing::ValuesIn(cases()), label);

}  // namespace
}  // namespace nf::test
