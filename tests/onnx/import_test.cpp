#include "test_util.h"

#include <chrono>
#include <set>

using namespace nf;
using namespace nf::onnx_test;
using onnx_io::load_model;
using onnx_io::load_model_from_bytes;
using onnx_io::ModelError;

namespace {

// One initializer "w" feeding an Identity: the smallest model a tensor test needs.
onnx::ModelProto model_with(const onnx::TensorProto& w) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  *g->add_initializer() = w;
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->add_input(w.name());
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(w.data_type());
  return m;
}

onnx::TensorProto external_tensor(const std::string& location, int64_t n, uint64_t offset = 0) {
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(n);
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = t.add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  return t;
}

std::string save_proto(const onnx::ModelProto& m, const std::string& path) {
  std::string bytes = m.SerializeAsString();
  write_file(path, bytes);
  return path;
}

}  // namespace

TEST(Import, TorchExportStructure) {
  auto g = load_model((data_dir() / "tiny_decoder.onnx").string());
  EXPECT_EQ(g->producer_name, "pytorch");
  EXPECT_EQ(g->ir_version, 8);
  EXPECT_EQ(g->opsets.at(""), 17);
  ASSERT_EQ(g->inputs.size(), 7u);
  EXPECT_EQ(g->inputs[0], "input_ids");
  EXPECT_EQ(g->inputs[3], "past_key_values.0.key");
  ASSERT_EQ(g->outputs.size(), 5u);
  EXPECT_EQ(g->outputs[0], "logits");
  EXPECT_EQ(g->outputs[4], "present.1.value");
  EXPECT_EQ(g->nodes.size(), 467u);
  EXPECT_EQ(g->initializers.size(), 21u);

  const auto& kv = g->types.at("past_key_values.0.key");
  EXPECT_EQ(kv.dtype, NF_DTYPE_FLOAT32);
  ASSERT_TRUE(kv.shape);
  ASSERT_EQ(kv.shape->size(), 4u);
  EXPECT_EQ((*kv.shape)[0].param, "batch_size");
  EXPECT_LT((*kv.shape)[0].value, 0);
  EXPECT_EQ((*kv.shape)[1].value, 2);
  EXPECT_EQ((*kv.shape)[2].param, "past_sequence_length");
  EXPECT_EQ((*kv.shape)[3].value, 8);
  EXPECT_EQ(g->types.at("input_ids").dtype, NF_DTYPE_INT64);

  // Constant nodes stay nodes, their values as tensor attributes.
  size_t constants = 0;
  for (const auto& n : g->nodes)
    if (n->op_type == "Constant") {
      ++constants;
      ASSERT_EQ(n->attrs.count("value"), 1u);
      EXPECT_EQ(n->attrs.at("value").type, NF_ATTR_TENSOR);
    }
  EXPECT_EQ(constants, 166u);
  const ir::Tensor* emb = g->initializer("model.embed_tokens.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(emb->nbytes(), 64u * 32 * 4);
}

TEST(Import, ExternalDataIsOneMappingAndMatchesInline) {
  auto inl = load_model((data_dir() / "tiny_decoder.onnx").string());
  auto ext = load_model((data_dir() / "tiny_decoder_ext.onnx").string());
  const ir::Buffer* mapping = nullptr;
  for (const auto& [name, ref] : ext->initializers) {
    auto* mf = dynamic_cast<const ir::MappedFile*>(ref->tensor.buffer.get());
    ASSERT_TRUE(mf) << name << " is not a view of the data file";
    if (!mapping) mapping = mf;
    EXPECT_EQ(mapping, mf) << "each data file is mapped once";
    EXPECT_TRUE(same_tensor(name, ref->tensor, *inl->initializer(name)));
  }
  EXPECT_TRUE(mapping);
}

TEST(Import, TypedFieldsAndPackingRules) {
  auto g = load_model((data_dir() / "typed_fields.onnx").string());
  auto vals = [&](const char* name) { return g->initializer(name); };
  EXPECT_EQ(std::vector<float>(vals("f32")->as<float>(), vals("f32")->as<float>() + 6),
            (std::vector<float>{0.5f, -1, 2, 3.25f, 4, 5}));
  const uint16_t* h = vals("f16")->as<uint16_t>();
  EXPECT_EQ(h[0], 0x3e00);  // 1.5
  EXPECT_EQ(h[1], 0xc000);  // -2
  EXPECT_EQ(h[2], 0x7bff);  // 65504
  EXPECT_EQ(vals("bf16")->as<uint16_t>()[0], 0x3f80);
  EXPECT_EQ(vals("bf16")->as<uint16_t>()[1], 0xc040);
  const int8_t* i8 = vals("i8")->as<int8_t>();
  EXPECT_EQ(i8[0], -128);
  EXPECT_EQ(i8[3], 127);
  EXPECT_EQ(vals("u8")->as<uint8_t>()[2], 255);
  EXPECT_EQ(vals("i16")->as<int16_t>()[0], -30000);
  EXPECT_EQ(vals("u16")->as<uint16_t>()[1], 65535);
  EXPECT_EQ(vals("i32")->as<int32_t>()[1], 1 << 30);
  EXPECT_EQ(vals("b")->nbytes(), 3u);
  EXPECT_EQ(vals("b")->as<uint8_t>()[0], 1);
  EXPECT_EQ(vals("b")->as<uint8_t>()[1], 0);
  EXPECT_EQ(vals("i64")->as<int64_t>()[0], -(int64_t{1} << 40));
  EXPECT_EQ(vals("f64")->as<double>()[1], -0.25);
  EXPECT_EQ(vals("u32")->as<uint32_t>()[0], 4000000000u);
  EXPECT_EQ(vals("u64")->as<uint64_t>()[0], ~uint64_t{0});
  EXPECT_EQ(vals("s")->strings, (std::vector<std::string>{"hello", "world"}));
  EXPECT_EQ(vals("raw")->as<float>()[299], 299.f);
  EXPECT_EQ(vals("empty")->numel(), 0);
  EXPECT_EQ(vals("empty")->dims, (std::vector<int64_t>{0, 4}));
}

// keep_initializers_as_inputs=True (and IR < 4 files) list every weight among the graph
// inputs as well: such an input is its initializer's constant, not a runtime input.
TEST(Import, InitializersListedAsInputsAreConstants) {
  onnx::TensorProto w;
  w.set_name("w");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_dims(2);
  w.add_float_data(1.f);
  w.add_float_data(2.f);
  onnx::ModelProto m = model_with(w);
  auto* x = m.mutable_graph()->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* listed = m.mutable_graph()->add_input();
  listed->set_name("w");
  listed->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  TempDir d;
  auto g = load_model(save_proto(m, d / "inits_as_inputs.onnx"));
  EXPECT_EQ(g->inputs, std::vector<std::string>{"x"});
  ASSERT_NE(g->initializer("w"), nullptr);
  EXPECT_EQ(g->initializer("w")->as<float>()[1], 2.f);
}

// Model-local functions as exporters write them (a module per function, calls by domain and
// name): two calls of Block, whose body calls Act with an attribute reference; an output
// one call leaves out; a function returning its input unchanged.
onnx::ModelProto model_with_functions() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* ex = m.add_opset_import();
  ex->set_domain("mods");
  ex->set_version(1);
  auto node = [](auto* parent, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                 const std::string& name, const std::string& domain = "") {
    auto* n = parent->add_node();
    n->set_op_type(op);
    n->set_domain(domain);
    n->set_name(name);
    for (auto& v : in) n->add_input(v);
    for (auto& v : out) n->add_output(v);
    return n;
  };
  auto function = [&](const std::string& name, std::vector<std::string> in, std::vector<std::string> out) {
    auto* f = m.add_functions();
    f->set_name(name);
    f->set_domain("mods");
    for (auto& v : in) f->add_input(v);
    for (auto& v : out) f->add_output(v);
    f->add_opset_import()->set_version(17);
    auto* imp = f->add_opset_import();
    imp->set_domain("mods");
    imp->set_version(1);
    return f;
  };
  auto* act = function("Act", {"x"}, {"y"});
  act->add_attribute("slope");
  auto* leaky = node(act, "LeakyRelu", {"x"}, {"y"}, "leaky");
  auto* ref = leaky->add_attribute();
  ref->set_name("alpha");
  ref->set_ref_attr_name("slope");
  ref->set_type(onnx::AttributeProto::FLOAT);
  auto* block = function("Block", {"x", "w"}, {"y", "t"});
  node(block, "MatMul", {"x", "w"}, {"t"}, "mm");
  auto* call_act = node(block, "Act", {"t"}, {"y"}, "act", "mods");
  auto* slope = call_act->add_attribute();
  slope->set_name("slope");
  slope->set_type(onnx::AttributeProto::FLOAT);
  slope->set_f(0.25f);
  function("Same", {"x"}, {"x"});

  auto* g = m.mutable_graph();
  g->set_name("g");
  auto add_value = [](auto* list, const std::string& name, std::vector<int64_t> dims) {
    auto* v = list->Add();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  add_value(g->mutable_input(), "x", {1, 2});
  onnx::TensorProto w;
  w.set_name("w");
  w.set_data_type(onnx::TensorProto::FLOAT);
  w.add_dims(2);
  w.add_dims(2);
  for (float v : {1.f, -1.f, 2.f, -2.f}) w.add_float_data(v);
  *g->add_initializer() = w;
  node(g, "Block", {"x", "w"}, {"h", "t0"}, "block0", "mods");
  node(g, "Block", {"h", "w"}, {"y"}, "block1", "mods");
  node(g, "Same", {"y"}, {"z"}, "same", "mods");
  add_value(g->mutable_output(), "t0", {1, 2});
  add_value(g->mutable_output(), "z", {1, 2});
  return m;
}

TEST(Import, ModelLocalFunctionsAreInlined) {
  TempDir d;
  auto g = load_model(save_proto(model_with_functions(), d / "functions.onnx"));
  std::vector<std::string> ops;
  std::set<std::string> made;
  for (const auto& n : g->nodes) {
    ops.push_back(n->op_type);
    EXPECT_EQ(n->domain, "") << n->name;
    for (const auto& o : n->outputs) EXPECT_TRUE(made.insert(o).second) << o << " is made twice";
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"MatMul", "LeakyRelu", "MatMul", "LeakyRelu", "Identity"}));
  EXPECT_EQ(g->nodes[0]->inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(g->nodes[0]->outputs, (std::vector<std::string>{"t0"}));  // the call's own name for t
  EXPECT_EQ(g->nodes[1]->outputs, (std::vector<std::string>{"h"}));
  EXPECT_EQ(g->nodes[2]->inputs, (std::vector<std::string>{"h", "w"}));
  EXPECT_NE(g->nodes[2]->outputs[0], g->nodes[0]->outputs[0]);  // block1 leaves t out: a name of its own
  EXPECT_EQ(g->nodes[3]->outputs, (std::vector<std::string>{"y"}));
  EXPECT_EQ(g->nodes[1]->attrs.at("alpha").f, 0.25f);  // the reference bound to the call's slope
  EXPECT_EQ(g->nodes[3]->attrs.at("alpha").f, 0.25f);
  EXPECT_EQ(g->nodes[4]->inputs, (std::vector<std::string>{"y"}));
  EXPECT_EQ(g->nodes[4]->outputs, (std::vector<std::string>{"z"}));
  EXPECT_EQ(g->opsets.count("mods"), 0u);  // the functions' domain names no operator any more
}

TEST(Import, SubgraphsAndAttributeKinds) {
  auto g = load_model((data_dir() / "typed_fields.onnx").string());
  EXPECT_EQ(g->opsets.at("com.example"), 1);
  auto node = [&](const std::string& name) -> const ir::Node& {
    for (const auto& n : g->nodes)
      if (n->name == name) return *n;
    throw std::runtime_error("no node " + name);
  };
  const auto& iff = node("the_if");
  ASSERT_EQ(iff.attrs.at("then_branch").type, NF_ATTR_GRAPH);
  const ir::Graph& then_g = *iff.attrs.at("then_branch").g;
  EXPECT_EQ(then_g.name, "then_branch");
  EXPECT_EQ(then_g.outputs, (std::vector<std::string>{"then_out"}));
  const ir::Graph& else_g = *iff.attrs.at("else_branch").g;
  ASSERT_EQ(else_g.nodes.size(), 1u);
  EXPECT_EQ(else_g.nodes[0]->op_type, "Constant");
  EXPECT_EQ(else_g.nodes[0]->attrs.at("value").t->tensor.as<float>()[5], 6.f);
  const ir::Graph& body = *node("the_loop").attrs.at("body").g;
  EXPECT_EQ(body.inputs.size(), 3u);
  EXPECT_EQ(body.initializer("one")->as<float>()[0], 1.f);
  EXPECT_EQ(body.types.at("acc_in").shape->at(0).param, "n");

  EXPECT_EQ(node("leaky").attrs.at("alpha").type, NF_ATTR_FLOAT);
  EXPECT_EQ(node("leaky").attrs.at("alpha").f, 0.25f);
  EXPECT_EQ(node("tr").attrs.at("perm").ints, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(node("cast").attrs.at("to").i, NF_DTYPE_FLOAT16);
  EXPECT_EQ(node("const_trip").attrs.at("value_int").type, NF_ATTR_INT);
  EXPECT_EQ(node("const_floats").attrs.at("value_floats").floats, (std::vector<float>{1, 2}));
  EXPECT_EQ(node("const_strings").attrs.at("value_strings").strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(node("custom").domain, "com.example");
  EXPECT_EQ(node("custom").attrs.at("mode").s, "fast");
  EXPECT_EQ(node("custom").attrs.at("names").type, NF_ATTR_STRINGS);
  // Unknown dims: no value and no param.
  const auto& xc = *g->types.at("xc").shape;
  EXPECT_EQ(xc[1].value, -1);
  EXPECT_EQ(xc[1].param, "");
  EXPECT_FALSE(g->types.at("custom").shape.has_value());
}

TEST(Import, FromBytesMatchesFromFile) {
  std::string bytes = read_file(data_dir() / "tiny_decoder_ext.onnx");
  auto a = load_model_from_bytes(bytes, data_dir().string());
  auto b = load_model((data_dir() / "tiny_decoder_ext.onnx").string());
  EXPECT_TRUE(same_graph(*a, *b));
}

// ---- refusals: each is one ModelError line naming the file ----------------------------

TEST(Refuse, AbsoluteExternalLocation) {
  TempDir d;
  write_file(d.path / "secret.bin", std::string(64, 'x'));
  std::string path = save_proto(model_with(external_tensor((d.path / "secret.bin").string(), 4)), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "absolute");
}

TEST(Refuse, DotDotExternalLocation) {
  TempDir d;
  fs::create_directories(d.path / "sub");
  write_file(d.path / "outside.bin", std::string(64, 'x'));
  std::string path = save_proto(model_with(external_tensor("../outside.bin", 4)), d / "sub/m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "'..'");
  path = save_proto(model_with(external_tensor("x/../../outside.bin", 4)), d / "sub/m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "'..'");
}

TEST(Refuse, SymlinkOutOfModelFolder) {
  TempDir d;
  fs::create_directories(d.path / "model");
  write_file(d.path / "outside.bin", std::string(64, 'x'));
  fs::create_symlink(d.path / "outside.bin", d.path / "model/w.bin");
  std::string path = save_proto(model_with(external_tensor("w.bin", 4)), d / "model/m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "outside the model folder");
  // A symlink that stays inside is fine.
  write_file(d.path / "model/real.bin", std::string(64, 'x'));
  fs::create_symlink("real.bin", d.path / "model/inside.bin");
  path = save_proto(model_with(external_tensor("inside.bin", 4)), d / "model/m2.onnx");
  EXPECT_EQ(load_model(path)->initializer("w")->nbytes(), 16u);
}

TEST(Refuse, MissingExternalDataNamesTheFile) {
  TempDir d;
  std::string path = save_proto(model_with(external_tensor("weights_gone.bin", 4)), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "weights_gone.bin");
}

TEST(Refuse, ExternalOffsetPastEnd) {
  TempDir d;
  write_file(d.path / "w.bin", std::string(64, 'x'));
  std::string path = save_proto(model_with(external_tensor("w.bin", 16, 8)), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "past the end");
  path = save_proto(model_with(external_tensor("w.bin", 1, ~uint64_t{0} - 1)), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "past the end");
}

TEST(Refuse, ExternalLengthDisagreesWithDims) {
  TempDir d;
  write_file(d.path / "w.bin", std::string(64, 'x'));
  auto t = external_tensor("w.bin", 4);
  auto* e = t.add_external_data();
  e->set_key("length");
  e->set_value("12");
  std::string path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "dims need 16");
}

TEST(Refuse, TruncatedFile) {
  TempDir d;
  std::string bytes = read_file(data_dir() / "tiny_decoder.onnx");
  write_file(d.path / "m.onnx", bytes.substr(0, bytes.size() / 2));
  EXPECT_MODEL_ERROR(load_model(d / "m.onnx"), d / "m.onnx", "not an ONNX model");
}

TEST(Refuse, NotProtobuf) {
  TempDir d;
  write_file(d.path / "m.onnx", "this is a text file, not a model\n");
  EXPECT_MODEL_ERROR(load_model(d / "m.onnx"), d / "m.onnx", "not an ONNX model");
  write_file(d.path / "empty.onnx", "");
  EXPECT_MODEL_ERROR(load_model(d / "empty.onnx"), d / "empty.onnx", "not an ONNX model");
  EXPECT_MODEL_ERROR(load_model(d / "absent.onnx"), d / "absent.onnx", "No such file");
  EXPECT_MODEL_ERROR(load_model(d.path.string()), d.path.string(), "not a regular file");
}

TEST(Refuse, RawDataShapeLie) {
  TempDir d;
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(1000);
  t.set_raw_data(std::string(16, '\0'));
  std::string path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "has 16 bytes but its dims need 4000");
}

TEST(Refuse, TypedFieldShapeLie) {
  TempDir d;
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT16);
  t.add_dims(3);
  t.add_int32_data(1);
  std::string path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "has 1 values but its dims need 3");
}

TEST(Refuse, NegativeDimsHugeDimsUnknownDtype) {
  TempDir d;
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(-4);
  std::string path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "negative dimension");
  t.set_dims(0, int64_t{1} << 40);
  t.add_dims(int64_t{1} << 40);
  path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "impossibly large");
  t.clear_dims();
  t.set_data_type(77);
  path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "unsupported data type 77");
}

TEST(Refuse, FunctionsThatCannotBeInlined) {
  TempDir d;
  auto calls_itself = model_with_functions();
  auto* again = calls_itself.mutable_functions(0)->add_node();  // Act calls Act
  again->set_op_type("Act");
  again->set_domain("mods");
  again->add_input("y");
  again->add_output("y2");
  EXPECT_MODEL_ERROR(load_model(save_proto(calls_itself, d / "recursive.onnx")), d / "recursive.onnx",
                     "model-local function 'Act' calls itself or nests deeper than 64 levels");

  auto too_many = model_with_functions();
  too_many.mutable_graph()->mutable_node(2)->add_input("x");  // Same takes one input
  EXPECT_MODEL_ERROR(load_model(save_proto(too_many, d / "inputs.onnx")), d / "inputs.onnx",
                     "node 'same' calls function 'Same' with 2 inputs; it takes 1");

  auto other_opset = model_with_functions();
  other_opset.mutable_functions(1)->mutable_opset_import(0)->set_version(13);
  EXPECT_MODEL_ERROR(load_model(save_proto(other_opset, d / "opset.onnx")), d / "opset.onnx",
                     "model-local function 'Block' imports opset 13 of domain '' and the model opset 17");
}

TEST(Refuse, ControlCharactersStayOnOneLine) {
  TempDir d;
  onnx::TensorProto t;
  t.set_name("evil\nname\r");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(2);
  std::string path = save_proto(model_with(t), d / "m.onnx");
  EXPECT_MODEL_ERROR(load_model(path), path, "evil name");
}

// Real exports under tests/models/*/model.onnx (they appear as other work lands).
TEST(Import, EveryTestModelLoads) {
  fs::path root = fs::path(NPUFORGE_SOURCE_DIR) / "tests/models";
  int n = 0;
  if (fs::is_directory(root))
    for (const auto& e : fs::directory_iterator(root)) {
      fs::path m = e.path() / "model.onnx";
      if (!fs::exists(m)) continue;
      auto t0 = std::chrono::steady_clock::now();
      auto g = load_model(m.string());
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      auto info = onnx_io::inspect(*g);
      std::cout << m << ": " << info["nodes"] << " nodes, " << info["parameters"] << " parameters, " << info["layers"]
                << " layers, loaded in " << ms << " ms\n";
      EXPECT_GT(g->nodes.size(), 0u);
      // inspect agrees with the HF config the model was exported from.
      fs::path cfg_path = e.path() / "config.json";
      if (fs::exists(cfg_path)) {
        auto cfg = nlohmann::json::parse(read_file(cfg_path));
        EXPECT_EQ(info["layers"], cfg["num_hidden_layers"]) << m;
        EXPECT_EQ(info["heads"], cfg["num_attention_heads"]) << m;
        EXPECT_EQ(info["kv_heads"], cfg.value("num_key_value_heads", cfg["num_attention_heads"].get<int>())) << m;
        if (cfg.contains("head_dim")) {
          EXPECT_EQ(info["head_dim"], cfg["head_dim"]) << m;
        }
      }
      ++n;
    }
  if (n == 0) GTEST_SKIP() << "no tests/models/*/model.onnx yet";
}
