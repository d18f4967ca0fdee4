// The transformed graphs a package holds (artifacts/model/*.onnx, written by the cpu
// backend) load and run in ONNX Runtime (onnxruntime-node, CPU) and give the outputs the
// cpu backend gives on the same inputs, within 1e-4 of each output's largest magnitude.
//
// ONNX Runtime comes from bench/node_modules (scripts/test.sh runs `npm install
// --ignore-scripts` in bench/). Without node or the module the tests skip, unless
// NPUFORGE_REQUIRE_ORT=1 (what CI sets): then they fail.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "support/packages.h"

namespace nf::test {
namespace {

const fs::path kBench = fs::path(NPUFORGE_SOURCE_DIR) / "bench";
const fs::path kScript = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "ort" / "run_graph.mjs";

std::string ort_missing() {
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed (apt install nodejs npm)";
  if (!fs::exists(kBench / "node_modules" / "onnxruntime-node" / "package.json"))
    return "onnxruntime-node is not installed (cd bench && npm install --ignore-scripts)";
  return "";
}

#define REQUIRE_ORT()                                                                        \
  do {                                                                                       \
    std::string why = ort_missing();                                                         \
    if (!why.empty()) {                                                                      \
      const char* req = std::getenv("NPUFORGE_REQUIRE_ORT");                                 \
      if (req && std::string(req) == "1") FAIL() << "NPUFORGE_REQUIRE_ORT=1 but " << why;    \
      GTEST_SKIP() << "ONNX Runtime check skipped: " << why;                                 \
    }                                                                                        \
  } while (0)

const char* dtype_str(nf_dtype t) {
  switch (t) {
    case NF_DTYPE_FLOAT32: return "float32";
    case NF_DTYPE_INT64: return "int64";
    case NF_DTYPE_INT32: return "int32";
    case NF_DTYPE_BOOL: return "bool";
    default: return nullptr;
  }
}

// Inputs like a runner's: positions after 5 cached tokens, a mask that shows those 5
// slots and the new rows causally, random caches and hidden states.
std::vector<host::NamedTensor> make_inputs(const nlohmann::json& spec, int64_t vocab, std::mt19937& rng) {
  std::vector<host::NamedTensor> in;
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t cached = 5;
  for (const auto& e : spec.at("inputs")) {
    std::string name = e.at("name");
    nf_dtype dt = NF_DTYPE_UNDEFINED;
    for (nf_dtype t : {NF_DTYPE_FLOAT32, NF_DTYPE_INT64, NF_DTYPE_INT32, NF_DTYPE_BOOL})
      if (e.at("dtype") == dtype_str(t)) dt = t;
    if (dt == NF_DTYPE_UNDEFINED) throw std::runtime_error(name + ": dtype " + e.at("dtype").dump() + " not handled");
    std::vector<int64_t> dims = e.at("shape").get<std::vector<int64_t>>();
    ir::Tensor t = ir::Tensor::zeros(dt, dims);
    const int64_t n = t.numel();
    if (name == "input_ids") {
      for (int64_t i = 0; i < n; ++i) t.mutable_as<int64_t>()[i] = static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab));
    } else if (name == "position_ids") {
      for (int64_t i = 0; i < n; ++i) t.mutable_as<int64_t>()[i] = cached + i;
    } else if (name == "attention_mask" || name == "sliding_attention_mask") {
      const int64_t ar = dims[2], cols = dims[3], slots = cols - ar;
      float* m = t.mutable_as<float>();
      for (int64_t r = 0; r < ar; ++r)
        for (int64_t c = 0; c < cols; ++c)
          m[r * cols + c] = (c < slots ? c < cached : c - slots <= r) ? 0.f : -65504.f;
    } else if (dt == NF_DTYPE_FLOAT32) {
      for (int64_t i = 0; i < n; ++i) t.mutable_as<float>()[i] = normal(rng);
    }
    in.push_back({name, ir::make_tensor_ref(std::move(t))});
  }
  return in;
}

void write_file(const fs::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// Runs every graph of the package in both runtimes; returns the worst relative error.
double compare_package(const fs::path& pkg) {
  auto open = open_package(pkg);
  const nlohmann::json& meta = open->pkg.meta;
  const int64_t vocab = meta.at("metadata").at("io").at("vocab");
  std::mt19937 rng(1234);
  double worst = 0;
  for (const auto& spec : meta.at("graphs")) {
    const std::string graph = spec.at("name");
    auto inputs = make_inputs(spec, vocab, rng);
    std::vector<std::string> names;
    for (const auto& o : spec.at("outputs")) names.push_back(o.at("name"));
    auto cpu = open->session->run(graph, inputs, names);

    WorkDir io("ort_io_" + graph);
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ir::Tensor& t = inputs[i].tensor->tensor;
      std::string file = "in_" + std::to_string(i) + ".bin";
      write_file(io.path / file, t.data(), t.nbytes());
      list.push_back({{"name", inputs[i].name}, {"dtype", dtype_str(t.dtype)}, {"dims", t.dims}, {"file", file}});
    }
    std::ofstream(io.path / "inputs.json") << list.dump();
    fs::path model = pkg / "artifacts" / "model" / (graph + ".onnx");
    std::string cmd = "node " + test::quote(kScript.string()) + " " + test::quote(kBench.string()) + " " +
                      test::quote(model.string()) + " " + test::quote(io.path.string()) + " >" +
                      test::quote((io.path / "stdout").string()) + " 2>" + test::quote((io.path / "stderr").string());
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << graph << ": ONNX Runtime failed: " << test::slurp(io.path / "stderr");
    if (rc != 0) return INFINITY;
    auto outs = nlohmann::json::parse(test::slurp(io.path / "outputs.json"));
    std::map<std::string, nlohmann::json> by_name;
    for (const auto& o : outs) by_name[o.at("name")] = o;
    for (size_t i = 0; i < names.size(); ++i) {
      const ir::Tensor& want = cpu[i]->tensor;
      auto it = by_name.find(names[i]);
      EXPECT_NE(it, by_name.end()) << graph << ": ONNX Runtime has no output " << names[i];
      if (it == by_name.end()) continue;
      EXPECT_EQ(it->second.at("dims").get<std::vector<int64_t>>(), want.dims) << graph << " " << names[i];
      std::string bytes = test::slurp(io.path / it->second.at("file").get<std::string>());
      EXPECT_EQ(want.dtype, NF_DTYPE_FLOAT32) << names[i];
      EXPECT_EQ(bytes.size(), want.nbytes()) << graph << " " << names[i];
      if (want.dtype != NF_DTYPE_FLOAT32 || bytes.size() != want.nbytes()) continue;
      std::vector<float> got(want.numel());
      std::memcpy(got.data(), bytes.data(), bytes.size());
      std::vector<float> ref(want.as<float>(), want.as<float>() + want.numel());
      double err = relative_error(got, ref);
      EXPECT_LT(err, 1e-4) << graph << " " << names[i];
      worst = std::max(worst, err);
    }
  }
  return worst;
}

void check_chain(const std::string& model, const std::string& stages, const std::string& tag) {
  WorkDir work("ort_" + model);
  fs::path pkg = build_package(work.path, model, stages);
  ASSERT_FALSE(::testing::Test::HasFailure());
  double worst = compare_package(pkg);
  std::printf("%s %s: every graph's outputs in ONNX Runtime within %.3g of the cpu backend's\n", model.c_str(), tag.c_str(), worst);
}

const std::string kArcl = "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 32\n\n";
const std::string kArclHtp = "[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = 32\nkv_layout = \"htp\"\n\n";
const std::string kMha2sha = "[[transform]]\nplugin = \"mha2sha\"\n\n";
const std::string kMoe = "[[transform]]\nplugin = \"moe\"\n\n";
const std::string kSplit = "[[transform]]\nplugin = \"split\"\nnum_splits = 4\n\n";

TEST(Ort, Arcl) {
  REQUIRE_ORT();
  check_chain("qwen2", kArcl, "arcl");
  check_chain("mistral_swa", kArclHtp, "arcl(htp)");
}
TEST(Ort, ArclMha2sha) {
  REQUIRE_ORT();
  check_chain("qwen2", kArcl + kMha2sha, "arcl+mha2sha");
  check_chain("llama_gqa", kArcl + "[[transform]]\nplugin = \"mha2sha\"\npermute_kv_cache_io = true\n", "arcl+mha2sha(permute)");
}
TEST(Ort, ArclMoe) {
  REQUIRE_ORT();
  check_chain("mixtral_moe", kArcl + kMoe, "arcl+moe");
  check_chain("mixtral_moe", kArcl + kMoe + kMha2sha, "arcl+moe+mha2sha");
}
TEST(Ort, ArclSplit) {
  REQUIRE_ORT();
  if (!split_available()) GTEST_SKIP() << "the split transform is not in the tree yet";
  check_chain("llama_gqa", kArcl + kSplit, "arcl+split");
  check_chain("llama_gqa", kArcl + kSplit + kMha2sha, "arcl+split+mha2sha");
}

// torch >= 2.9's default exporter writes opset 20 (F.gelu as one Gelu node, Reduce* axes as
// inputs, equal Splits by num_outputs): ONNX Runtime runs what the transforms make of it, and
// Gelu as the cpu backend does.
TEST(Ort, Opset20Exports) {
  REQUIRE_ORT();
  check_chain("zoo/llama3_opset20", kArcl + kSplit + kMha2sha, "arcl+split+mha2sha");
  check_chain("zoo/gemma3_opset20", kArcl + kMha2sha, "arcl+mha2sha");
  check_chain("zoo/gpt_neox_opset20", kArcl + kSplit, "arcl+split");
  check_chain("zoo/gpt2_opset20", kArcl + kMha2sha, "arcl+mha2sha");
}

}  // namespace
}  // namespace nf::test
