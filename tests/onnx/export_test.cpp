#include "test_util.h"

#include <cstdlib>

using namespace nf;
using namespace nf::onnx_test;
using onnx_io::load_model;
using onnx_io::save_model;
using onnx_io::SaveOptions;

namespace {

onnx::ModelProto parse(const std::string& path) {
  onnx::ModelProto m;
  std::string bytes = read_file(path);
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

std::string external_value(const onnx::TensorProto& t, const std::string& key) {
  for (const auto& e : t.external_data())
    if (e.key() == key) return e.value();
  return "";
}

// onnx.checker from Debian's python (onnx 1.12); empty string when it passes.
bool have_python_onnx() { return std::system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0; }
int run_checker(const std::string& path) {
  std::string cmd = "/usr/bin/python3 -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1], full_check=True)' '" +
                    path + "'";
  return std::system(cmd.c_str());
}

}  // namespace

TEST(Export, RoundTripKeepsStructureAndEveryWeightByte) {
  TempDir d;
  for (const char* name : {"tiny_decoder.onnx", "tiny_decoder_ext.onnx", "typed_fields.onnx"}) {
    auto a = load_model((data_dir() / name).string());
    save_model(*a, d / name);
    auto b = load_model(d / name);
    EXPECT_TRUE(same_graph(*a, *b)) << name;
    EXPECT_EQ(a->opsets, b->opsets);
    EXPECT_EQ(a->ir_version, b->ir_version);
    EXPECT_EQ(a->producer_name, b->producer_name);
    // Inline only, too.
    SaveOptions inline_all;
    inline_all.external_data_file = "";
    save_model(*a, d / "inline.onnx", inline_all);
    EXPECT_FALSE(fs::exists(d.path / "inline.onnx.data"));
    EXPECT_TRUE(same_graph(*a, *load_model(d / "inline.onnx"))) << name;
  }
}

TEST(Export, LargeTensorsGoToAlignedExternalData) {
  TempDir d;
  auto g = load_model((data_dir() / "tiny_decoder.onnx").string());
  save_model(*g, d / "model.onnx");
  ASSERT_TRUE(fs::exists(d.path / "model.onnx.data"));
  auto m = parse(d / "model.onnx");
  size_t external = 0, external_bytes = 0;
  for (const auto& t : m.graph().initializer()) {
    size_t n = g->initializer(t.name())->nbytes();
    if (n >= 1024) {
      external_bytes += n;
      ASSERT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
      EXPECT_FALSE(t.has_raw_data());
      EXPECT_EQ(external_value(t, "location"), "model.onnx.data");
      EXPECT_EQ(std::stoull(external_value(t, "offset")) % 64, 0u) << t.name();
      EXPECT_EQ(std::stoull(external_value(t, "length")), n);
      ++external;
    } else {
      EXPECT_NE(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
      EXPECT_EQ(t.raw_data().size(), n);
    }
  }
  EXPECT_EQ(external, 16u);  // embedding, 14 projections, lm_head
  // The proto holds no weight bytes beyond the small ones.
  EXPECT_LT(fs::file_size(d.path / "model.onnx") + 40000, read_file(data_dir() / "tiny_decoder.onnx").size());
  EXPECT_GE(fs::file_size(d.path / "model.onnx.data"), external_bytes);
  EXPECT_LE(fs::file_size(d.path / "model.onnx.data"), external_bytes + 64 * external);

  // A custom file name and a threshold.
  SaveOptions o;
  o.external_data_file = "w.bin";
  o.external_threshold = 5000;
  save_model(*g, d / "other.onnx", o);
  auto m2 = parse(d / "other.onnx");
  for (const auto& t : m2.graph().initializer())
    EXPECT_EQ(t.data_location() == onnx::TensorProto::EXTERNAL, g->initializer(t.name())->nbytes() >= 5000);
  EXPECT_TRUE(same_graph(*g, *load_model(d / "other.onnx")));
}

TEST(Export, SharedWeightViewsAreWrittenOnce) {
  TempDir d;
  ir::Graph g;
  g.name = "shared";
  auto w = std::make_shared<ir::TensorRef>();
  w->tensor = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1024});
  g.initializers["a"] = w;
  g.initializers["b"] = ir::make_tensor_ref(w->tensor);
  g.inputs = {};
  g.outputs = {"a", "b"};
  save_model(g, d / "m.onnx");
  EXPECT_EQ(fs::file_size(d.path / "m.onnx.data"), 4096u);
}

TEST(Export, OverwritingTheLoadedModelKeepsItsBytes) {
  // The data file being rewritten is mapped by the graph: it must be replaced, not truncated.
  TempDir d;
  auto g = load_model((data_dir() / "tiny_decoder.onnx").string());
  save_model(*g, d / "m.onnx");
  auto mapped = load_model(d / "m.onnx");
  save_model(*mapped, d / "m.onnx");
  EXPECT_TRUE(same_graph(*g, *mapped));
  EXPECT_TRUE(same_graph(*g, *load_model(d / "m.onnx")));
}

TEST(Export, OnnxCheckerAcceptsOutput) {
  if (!have_python_onnx()) GTEST_SKIP() << "/usr/bin/python3 has no onnx";
  TempDir d;
  for (const char* name : {"tiny_decoder.onnx", "typed_fields.onnx"}) {
    auto g = load_model((data_dir() / name).string());
    save_model(*g, d / name);
    EXPECT_EQ(run_checker(d / name), 0) << name;
  }
  // A model-set graph whose weights all live in the shared weights.bin.
  ir::ModelSet ms;
  ms.graphs.push_back(load_model((data_dir() / "tiny_decoder.onnx").string()));
  ms.graphs[0]->name = "ar1_cl32_1_of_1";
  fs::create_directories(d.path / "set");
  onnx_io::save_model_set(ms, d / "set");
  EXPECT_EQ(run_checker(d / "set/ar1_cl32_1_of_1.onnx"), 0);
}

TEST(Export, RefusesDataFileOutsideModelFolder) {
  TempDir d;
  auto g = load_model((data_dir() / "typed_fields.onnx").string());
  SaveOptions o;
  o.external_data_file = "../x.bin";
  EXPECT_MODEL_ERROR(save_model(*g, d / "m.onnx", o), d / "m.onnx", "plain file name");
}

TEST(Export, InlineProtoOver64MBLoads) {
  // protobuf's default coded-stream limit is 64 MB; import raises it to the 2 GB format limit.
  TempDir d;
  ir::Graph g;
  g.name = "big";
  auto w = std::make_shared<ir::TensorRef>();
  w->tensor = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {65, 1024, 256});  // 65 MiB
  w->tensor.mutable_as<float>()[12345] = 7.f;
  g.initializers["w"] = w;
  g.outputs = {"w"};
  SaveOptions inline_all;
  inline_all.external_data_file = "";
  save_model(g, d / "big.onnx", inline_all);
  EXPECT_GT(fs::file_size(d.path / "big.onnx"), 65u << 20);
  auto back = load_model(d / "big.onnx");
  EXPECT_EQ(back->initializer("w")->as<float>()[12345], 7.f);
}

TEST(Export, RefusesInlineWeightsOver2GB) {
  // A 2.25 GB tensor over a sparse mapped file: no memory or disk is spent, and the refusal
  // comes before any proto is built.
  TempDir d;
  {
    std::ofstream f(d.path / "sparse.bin", std::ios::binary);
  }
  fs::resize_file(d.path / "sparse.bin", (size_t{9} << 28));
  ir::Graph g;
  g.name = "huge";
  auto w = std::make_shared<ir::TensorRef>();
  w->tensor.dtype = NF_DTYPE_UINT8;
  w->tensor.dims = {int64_t{9} << 28};
  w->tensor.buffer = std::make_shared<ir::MappedFile>((d.path / "sparse.bin").string());
  g.initializers["w"] = w;
  SaveOptions inline_all;
  inline_all.external_data_file = "";
  EXPECT_MODEL_ERROR(save_model(g, d / "m.onnx", inline_all), d / "m.onnx", "2 GB protobuf limit");
  EXPECT_FALSE(fs::exists(d.path / "m.onnx"));
}
