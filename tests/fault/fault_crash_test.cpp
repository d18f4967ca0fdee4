// Inputs that used to crash npuforge: deeply nested TOML, graphs no backend can run,
// plugins that break the C ABI contract, weights truncated while mapped. Each now ends in
// an error naming the culprit.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <thread>

#include "fault_support.h"
#include "ir/ir.h"
#include "onnx/onnx_io.h"

using namespace nf::fault;

namespace {

std::string repeat(const std::string& s, int n) {
  std::string r;
  r.reserve(s.size() * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r += s;
  return r;
}

// A manifest whose [[transform]] options hold `options` (TOML lines).
fs::path manifest_with_options(const fs::path& d, const std::string& options) {
  return write_manifest(d, "[[transform]]\nplugin = \"slow_identity\"\n" + options + "\n[plugins]\npaths = [\"" +
                               test_plugins() + "\"]\n");
}

}  // namespace

// ---- TOML nesting ------------------------------------------------------------------

struct DeepToml {
  std::string name;
  std::string text;
};
void PrintTo(const DeepToml& t, std::ostream* os) { *os << t.name; }

class FaultDeepToml : public ::testing::TestWithParam<DeepToml> {};

TEST_P(FaultDeepToml, RefusedBeforeTheParserRecurses) {
  fs::path d = scratch("toml_" + GetParam().name);
  write_file(d / "m.toml", GetParam().text);
  for (auto r : {run({"check", (d / "m.toml").string()}),
                 run({"build", (d / "m.toml").string(), "--out", (d / "out").string()})}) {
    expect_one_error_line(r, "nested deeper than 64 levels");
    EXPECT_NE(r.err.find("m.toml:"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(d / "out"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FaultDeepToml,
    ::testing::Values(
        // The case: one dotted key 30,000 levels deep (60 KB).
        DeepToml{"DottedKey30000", "[model]\nonnx = \"m.onnx\"\n" + std::string("a") + repeat(".a", 30000) + " = 1\n"},
        DeepToml{"DottedKeyInPluginOptions",
                 "[model]\nonnx = \"m.onnx\"\n[[transform]]\nplugin = \"x\"\n" + std::string("o") + repeat(".o", 5000) +
                     " = 1\n"},
        DeepToml{"TableHeader", "[" + std::string("t") + repeat(".t", 20000) + "]\nx = 1\n"},
        DeepToml{"InlineTables", "x = " + repeat("{a = ", 20000) + "1" + repeat("}", 20000) + "\n"},
        DeepToml{"Arrays", "x = " + repeat("[", 50000) + repeat("]", 50000) + "\n"},
        DeepToml{"ArraysOverLines", "x = " + repeat("[\n", 5000) + repeat("]\n", 5000)},
        DeepToml{"QuotedDottedKey", std::string("\"a\"") + repeat(".\"a\"", 10000) + " = 1\n"},
        DeepToml{"NumericDottedKey", std::string("1") + repeat(".1", 10000) + " = 1\n"},
        DeepToml{"MixedKeysAndTables", "x = " + repeat("{a.b.c = ", 2000) + "1" + repeat("}", 2000) + "\n"}),
    [](const ::testing::TestParamInfo<DeepToml>& info) { return info.param.name; });

// What is not nesting stays accepted: floats, dots in strings and comments, long arrays.
TEST(FaultToml, ShallowManifestsWithManyDotsStillParse) {
  fs::path d = scratch("toml_shallow");
  std::string floats = "[";
  for (int i = 0; i < 500; ++i) floats += (i ? ", " : "") + std::to_string(i) + ".5";
  floats += "]";
  auto m = manifest_with_options(d, "steps = 2  # a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z" + repeat(".z", 100));
  auto r = run({"check", m.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A plugin-options table with a long float array and dotted strings parses too (the
  // schema then refuses the unknown key, with its line).
  auto m2 = manifest_with_options(d, "steps = 2\nvalues = " + floats + "\nnote = \"" + repeat("a.", 200) + "\"");
  auto r2 = run({"check", m2.string()});
  EXPECT_EQ(r2.exit_code, 2) << r2.err;
  EXPECT_EQ(r2.err.find("nested deeper"), std::string::npos) << r2.err;
}

TEST(FaultToml, OversizedManifestIsRefused) {
  fs::path d = scratch("toml_big");
  {
    std::ofstream f(d / "big.toml");
    f << "[model]\nonnx = \"m.onnx\"\n";
  }
  fs::resize_file(d / "big.toml", 5 << 20);  // sparse: 5 MiB of zeros after the text
  expect_one_error_line(run({"check", (d / "big.toml").string()}), "larger than 4 MiB");
}

// ---- graphs no backend can run ------------------------------------------------------

namespace {

// tests/models/<model> loaded, changed by `edit`, saved as `dir`/model.onnx.
fs::path edited_model(const fs::path& dir, const std::function<void(nf::ir::Graph&)>& edit,
                      const std::string& model = "llama_gqa") {
  auto g = nf::onnx_io::load_model(nf::test::model_dir(model) + "/model.onnx");
  edit(*g);
  fs::create_directories(dir);
  nf::onnx_io::save_model(*g, (dir / "model.onnx").string());
  return dir / "model.onnx";
}

nf::ir::Node& node_of_type(nf::ir::Graph& g, const std::string& op, int skip = 0) {
  for (auto& n : g.nodes)
    if (n->op_type == op && skip-- == 0) return *n;
  throw std::runtime_error("no " + op + " node");
}

}  // namespace

struct BadGraph {
  std::string name;
  std::function<void(nf::ir::Graph&)> edit;
  std::string expect;
};
void PrintTo(const BadGraph& b, std::ostream* os) { *os << b.name; }

class FaultGraph : public ::testing::TestWithParam<BadGraph> {};

// run, eval, inspect and build each refuse the model with the problem named.
TEST_P(FaultGraph, RefusedBeforeABackendRunsIt) {
  fs::path d = scratch("graph_" + GetParam().name);
  fs::path model = edited_model(d / "model", GetParam().edit);
  fs::copy_file(nf::test::model_dir("tiny_llama") + "/heldout.txt", d / "text.txt");
  expect_one_error_line(run({"run", model.string(), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"}),
                        GetParam().expect);
  expect_one_error_line(run({"inspect", model.string()}), GetParam().expect);
  std::ofstream(d / "m.toml") << "[model]\nonnx = \"" << model.string() << "\"\n[targets.cpu]\nbackend = \"cpu\"\n";
  auto b = run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache"});
  expect_one_error_line(b, GetParam().expect);
  EXPECT_FALSE(fs::exists(d / "out" / "cpu"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FaultGraph,
    ::testing::Values(
        BadGraph{"TwoNodesWriteOneValue",
                 [](nf::ir::Graph& g) {
                   // The second MatMul now also writes the first MatMul's output.
                   node_of_type(g, "MatMul", 1).outputs[0] = node_of_type(g, "MatMul", 0).outputs[0];
                 },
                 "is written by two nodes"},
        BadGraph{"NodeOverwritesAnInput",
                 [](nf::ir::Graph& g) { node_of_type(g, "MatMul", 0).outputs[0] = g.inputs[0]; },
                 "is a graph input or initializer and also written by"},
        BadGraph{"StringEmbedding",
                 [](nf::ir::Graph& g) {
                   auto& gather = node_of_type(g, "Gather");
                   auto& t = g.initializers.at(gather.inputs[0])->tensor;
                   nf::ir::Tensor s;
                   s.dtype = NF_DTYPE_STRING;
                   s.dims = t.dims;
                   s.strings.assign(static_cast<size_t>(t.numel()), "x");
                   t = s;
                 },
                 "a STRING tensor"},
        BadGraph{"FloatGatherIndices",
                 [](nf::ir::Graph& g) {
                   auto& gather = node_of_type(g, "Gather");
                   g.initializers["float_ids"] =
                       nf::ir::make_tensor_ref(nf::ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {1}, {0.5f}));
                   gather.inputs[1] = "float_ids";
                 },
                 "not int32 or int64"},
        BadGraph{"InputNothingDefines",
                 [](nf::ir::Graph& g) { node_of_type(g, "MatMul", 0).inputs[0] = "nowhere"; },
                 "reads 'nowhere', which nothing defines"},
        BadGraph{"OutputNothingComputes", [](nf::ir::Graph& g) { g.outputs.push_back("ghost"); },
                 "graph output 'ghost' is not computed by any node"}),
    [](const ::testing::TestParamInfo<BadGraph>& info) { return info.param.name; });

// A transform that leaves a graph with two writers of one value: the build stops before
// the backend compiles it.
TEST(FaultGraphFromPlugin, TransformMakingTwoWritersStopsTheBuild) {
  fs::path d = scratch("graph_plugin");
  auto m = write_manifest(d, "[[transform]]\nplugin = \"bad_transform\"\n[plugins]\npaths = [\"" +
                                 fault_plugins("two_writers") + "\"]\n");
  auto r = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  expect_one_error_line(r, "is written by two nodes");
  EXPECT_NE(r.err.find("before compile cpu"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "out" / "cpu"));
}

// ---- plugins that break the C ABI contract -------------------------------------------

struct BadPlugin {
  std::string kase;     // folder under NF_FAULT_PLUGIN_DIR
  bool refused_at_load; // else it loads and fails when called
  std::string expect;
};
void PrintTo(const BadPlugin& b, std::ostream* os) { *os << b.kase; }

class FaultPlugin : public ::testing::TestWithParam<BadPlugin> {};

TEST_P(FaultPlugin, RefusedOrReportedNeverACrash) {
  const auto& p = GetParam();
  fs::path d = scratch("plugin_" + p.kase);
  const std::string lib = fault_plugins(p.kase) + "/libnf_fault_plugin_" + p.kase + ".so";
  auto m = write_manifest(d, "[[transform]]\nplugin = \"bad_transform\"\n[plugins]\npaths = [\"" +
                                 fault_plugins(p.kase) + "\"]\n");
  auto r = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache"});
  expect_clean_error(r, p.refused_at_load ? "no transform plugin named 'bad_transform'" : p.expect);
  if (p.refused_at_load) {
    // The warning names the library and why.
    EXPECT_NE(r.err.find(lib + ": " + p.expect), std::string::npos) << r.err;
    auto listed = run({"plugins"}, {{"NPUFORGE_PLUGIN_PATH", fault_plugins(p.kase)}});
    EXPECT_EQ(listed.exit_code, 0) << listed.err;
    EXPECT_NE(listed.err.find(lib), std::string::npos) << listed.err;
  } else {
    EXPECT_NE(r.err.find("transform bad_transform"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(d / "out" / "cpu"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FaultPlugin,
    ::testing::Values(BadPlugin{"descriptors_null", true, "library declares no plugins"},
                      BadPlugin{"descriptor_null", true, "null plugin descriptor"},
                      BadPlugin{"api_null", true, "transform 'bad_transform' has no function table"},
                      BadPlugin{"apply_null", true, "transform 'bad_transform': required entry 'apply' is NULL"},
                      BadPlugin{"abi_throws", true, "npuforge_plugin_abi_version threw an exception"},
                      BadPlugin{"entry_throws", true, "entry point failed: threw an exception across the plugin ABI: entry exploded"},
                      BadPlugin{"entry_throws_int", true, "entry point failed: threw an exception across the plugin ABI"},
                      BadPlugin{"entry_garbage_status", true, "entry point failed: returned an invalid status"},
                      BadPlugin{"garbage_status", false, "returned an invalid status"},
                      BadPlugin{"released_status", false, "returned an invalid status"},
                      BadPlugin{"apply_throws", false, "threw an exception across the plugin ABI: apply exploded"},
                      BadPlugin{"apply_throws_int", false, "threw an exception across the plugin ABI"}),
    [](const ::testing::TestParamInfo<BadPlugin>& info) { return info.param.kase; });

TEST(FaultPluginBackend, CompileThatThrowsIsAnError) {
  fs::path d = scratch("plugin_compile_throws");
  std::ofstream(d / "m.toml") << "[model]\nonnx = \"" << nf::test::model_dir("llama_gqa")
                              << "/model.onnx\"\n[targets.bad]\nbackend = \"bad_backend\"\n[plugins]\npaths = [\""
                              << fault_plugins("compile_throws") << "\"]\n";
  auto r = run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  expect_one_error_line(r, "compile bad: threw an exception across the plugin ABI: compile exploded");
  EXPECT_TRUE(listing(d / "out").empty());
}

// ---- weights truncated while mapped ---------------------------------------------------

TEST(FaultMapped, TruncatedWhileMappedIsAnErrorNotSigbus) {
  fs::path d = scratch("sigbus_unit");
  const fs::path f = d / "weights.bin";
  write_file(f, std::string(1 << 20, '\x7f'));
  nf::ir::MappedFile m(f.string());
  ASSERT_EQ(m.data()[(1 << 20) - 1], 0x7f);
  m.drop_pages(0, m.size());
  fs::resize_file(f, 4096);
  // Reading the lost pages used to kill the process with SIGBUS; now they read as zeros...
  unsigned sum = 0;
  for (size_t i = 0; i < m.size(); i += 4096) sum += m.data()[i];
  EXPECT_EQ(sum, 0x7fu);  // the first page is still the file's
  // ...and the check names the file.
  try {
    nf::ir::check_mapped_files();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(f.string() + ": the file changed while npuforge was using it"),
              std::string::npos)
        << e.what();
  }
}

TEST(FaultMapped, RewrittenInPlaceIsAnError) {
  fs::path d = scratch("rewrite_unit");
  const fs::path f = d / "weights.bin";
  write_file(f, std::string(8192, 'a'));
  nf::ir::MappedFile m(f.string());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(100);
    s.put('b');
  }
  EXPECT_THROW(nf::ir::check_mapped_files(), std::runtime_error);
}

// The CLI: a build whose model's external data is truncated mid-build fails with the file
// named, no package and no SIGBUS.
TEST(FaultMapped, BuildWithWeightsTruncatedMidwayFails) {
  fs::path d = scratch("sigbus_build");
  fs::path model = edited_model(d / "model", [](nf::ir::Graph&) {});  // saved with external data
  const fs::path data = d / "model" / "model.onnx.data";
  ASSERT_TRUE(fs::exists(data));
  std::ofstream(d / "m.toml") << "[model]\nonnx = \"" << model.string() << "\"\n[targets.cpu]\nbackend = \"cpu\"\n"
                              << "[[transform]]\nplugin = \"slow_identity\"\nsteps = 400\n[plugins]\npaths = [\""
                              << test_plugins() << "\"]\n";
  std::thread truncate([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    fs::resize_file(data, fs::file_size(data) / 3);
  });
  auto r = run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  truncate.join();
  expect_one_error_line(r, "model.onnx.data: the file changed while npuforge was using it");
  EXPECT_TRUE(listing(d / "out").empty());
}

// `eval` of a model whose weights are truncated while it scores: a clean error.
TEST(FaultMapped, EvalWithWeightsTruncatedMidwayFails) {
  fs::path d = scratch("sigbus_eval");
  fs::path model = edited_model(d / "model", [](nf::ir::Graph&) {}, "tiny_llama");
  fs::copy_file(nf::test::model_dir("tiny_llama") + "/tokenizer.json", d / "model" / "tokenizer.json");
  const fs::path data = d / "model" / "model.onnx.data";
  const std::string text = nf::test::slurp(nf::test::model_dir("tiny_llama") + "/heldout.txt");
  write_file(d / "long.txt", repeat(text + "\n", 200));  // long enough to score for seconds
  std::thread truncate([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    fs::resize_file(data, 0);
  });
  auto r = run({"eval", model.string(), "--text", (d / "long.txt").string(), "-q"});
  truncate.join();
  expect_one_error_line(r, "the file changed while npuforge was using it");
}
