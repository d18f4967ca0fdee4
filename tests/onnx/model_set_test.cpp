#include "test_util.h"

using namespace nf;
using namespace nf::onnx_test;
using nlohmann::json;
using onnx_io::encodings_from_json;
using onnx_io::encodings_to_json;
using onnx_io::load_model;
using onnx_io::load_model_set;
using onnx_io::save_model_set;

namespace {

std::unique_ptr<ir::ModelSet> two_variants() {
  auto ms = std::make_unique<ir::ModelSet>();
  auto g = load_model((data_dir() / "tiny_decoder.onnx").string());
  auto c = g->clone();
  g->name = "ar1_cl64_1_of_1";
  c->name = "ar32_cl64_1_of_1";
  c->nodes.pop_back();  // variants differ in structure, not in weights
  c->outputs = {c->nodes.back()->outputs[0]};  // what the last node left computes
  ms->graphs.push_back(std::move(g));
  ms->graphs.push_back(std::move(c));
  ms->metadata["tokenizer"] = R"({"bos":1,"eos":[2,3]})";
  ms->metadata["note"] = R"("hello")";
  return ms;
}

ir::Encoding make_enc(nf_enc_type type, std::vector<float> scale, std::vector<int32_t> offset, int bw = 8) {
  ir::Encoding e;
  e.view.struct_size = sizeof(nf_encoding);
  e.view.enc_type = type;
  e.view.bw = bw;
  e.view.is_sym = 1;
  e.view.block_axis = -1;
  e.scale = std::move(scale);
  e.offset = std::move(offset);
  e.relink();
  return e;
}

void add_encodings(ir::ModelSet& ms) {
  ms.encodings["logits"] = make_enc(NF_ENC_PER_TENSOR, {0.5f}, {-32768}, 16);
  ms.encodings["logits"].view.is_sym = 0;
  ms.encodings["model.embed_tokens.weight"] = make_enc(NF_ENC_PER_CHANNEL, {0.1f, 0.2f}, {-128, -128});
  ms.encodings["model.embed_tokens.weight"].view.axis = 0;
  auto blk = make_enc(NF_ENC_PER_BLOCK, {1, 2, 3, 4}, {-8, -8, -8, -8}, 4);
  blk.view.block_size = 16;
  blk.view.axis = 1;
  blk.view.block_axis = 0;
  ms.encodings["onnx::MatMul_535"] = blk;
  auto lpbq = make_enc(NF_ENC_LPBQ, {0.5f, 0.25f}, {-128, -128}, 8);
  lpbq.view.block_size = 64;
  lpbq.view.compressed_bw = 4;
  lpbq.view.axis = 1;
  lpbq.view.block_axis = 0;
  lpbq.per_block_int_scale = {1, 2, 3, 16};
  lpbq.relink();
  ms.encodings["onnx::MatMul_538"] = lpbq;
  auto fl = make_enc(NF_ENC_PER_TENSOR, {}, {}, 16);
  fl.view.is_float = 1;
  ms.encodings["/model/norm/Mul_output_0"] = fl;
}

bool same_encoding(const ir::Encoding& a, const ir::Encoding& b) {
  const auto &x = a.view, &y = b.view;
  return x.enc_type == y.enc_type && x.is_float == y.is_float && x.bw == y.bw && x.is_sym == y.is_sym &&
         x.axis == y.axis && x.block_axis == y.block_axis && x.block_size == y.block_size &&
         x.compressed_bw == y.compressed_bw && a.scale == b.scale && a.offset == b.offset &&
         a.per_block_int_scale == b.per_block_int_scale && y.num_scales == b.scale.size() &&
         y.scale == b.scale.data();
}

}  // namespace

TEST(ModelSet, ClonesShareOneCopyOfWeights) {
  TempDir d;
  auto ms = two_variants();
  add_encodings(*ms);
  save_model_set(*ms, d.path.string());
  for (const char* f : {"model_set.json", "ar1_cl64_1_of_1.onnx", "ar32_cl64_1_of_1.onnx", "weights.bin", "encodings.json"})
    EXPECT_TRUE(fs::exists(d.path / f)) << f;
  size_t one_copy = 0;
  for (const auto& [_, ref] : ms->graphs[0]->initializers) one_copy += ref->tensor.nbytes();
  size_t size = fs::file_size(d.path / "weights.bin");
  EXPECT_GE(size, one_copy);
  EXPECT_LE(size, one_copy + 64 * ms->graphs[0]->initializers.size());
  // No weight bytes inside the graph files.
  EXPECT_LT(fs::file_size(d.path / "ar1_cl64_1_of_1.onnx"), 80000u);

  json manifest = json::parse(read_file(d.path / "model_set.json"));
  EXPECT_EQ(manifest["format"], "npuforge-model-set");
  EXPECT_EQ(manifest["version"], 1);
  EXPECT_EQ(manifest["graphs"][1]["name"], "ar32_cl64_1_of_1");
  EXPECT_EQ(manifest["graphs"][1]["file"], "ar32_cl64_1_of_1.onnx");
  EXPECT_EQ(manifest["metadata"]["tokenizer"]["eos"][1], 3);

  auto back = load_model_set(d.path.string());
  ASSERT_EQ(back->graphs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_graph(*ms->graphs[i], *back->graphs[i]));
  // Every initializer of both graphs views the one mapping of weights.bin; shared weights share bytes.
  const ir::Buffer* mapping = back->graphs[0]->initializers.begin()->second->tensor.buffer.get();
  auto* mf = dynamic_cast<const ir::MappedFile*>(mapping);
  ASSERT_TRUE(mf);
  EXPECT_EQ(fs::path(mf->path()).filename(), "weights.bin");
  for (const auto& g : back->graphs)
    for (const auto& [name, ref] : g->initializers) {
      EXPECT_EQ(ref->tensor.buffer.get(), mapping) << name;
      EXPECT_EQ(ref->tensor.data(), back->graphs[0]->initializer(name)->data()) << name;
    }
  EXPECT_EQ(json::parse(back->metadata.at("tokenizer")), json::parse(ms->metadata.at("tokenizer")));
  EXPECT_EQ(back->metadata.at("note"), "\"hello\"");
  ASSERT_EQ(back->encodings.size(), ms->encodings.size());
  for (const auto& [name, e] : ms->encodings) EXPECT_TRUE(same_encoding(e, back->encodings.at(name))) << name;

  // Saving what was loaded again still writes one copy.
  TempDir d2;
  fs::create_directories(d2.path / "again");
  save_model_set(*back, (d2.path / "again").string());
  EXPECT_EQ(fs::file_size(d2.path / "again/weights.bin"), size);
}

// A 1B model's per-block LPBQ scales make encodings.json ~200 MB: past the 64 MiB cap of
// other JSON files, a model set holding them could not be read back (a cached lpbq stage, an
// aries compile's source, a cpu package of a 1B). This one writes ~100 MB of them.
TEST(ModelSet, EncodingsLargerThanAJsonFileAreReadBack) {
  TempDir d;
  auto ms = two_variants();
  const size_t n = size_t{6} << 20;
  std::vector<float> scale(n);
  std::vector<int32_t> offset(n, -8);
  for (size_t i = 0; i < n; ++i) scale[i] = 1e-3f * static_cast<float>(i % 997 + 1) / 3.0f;
  auto blk = make_enc(NF_ENC_PER_BLOCK, scale, offset, 4);
  blk.view.block_size = 64;
  blk.view.axis = 1;
  blk.view.block_axis = 0;
  ms->encodings["onnx::MatMul_535"] = blk;
  save_model_set(*ms, d.path.string());
  ASSERT_GT(fs::file_size(d.path / "encodings.json"), uint64_t{64} << 20);
  auto back = load_model_set(d.path.string());
  ASSERT_EQ(back->encodings.count("onnx::MatMul_535"), 1u);
  EXPECT_TRUE(same_encoding(back->encodings.at("onnx::MatMul_535"), blk));
}

TEST(ModelSet, NoEncodingsNoFile) {
  TempDir d;
  auto ms = two_variants();
  save_model_set(*ms, d.path.string());
  EXPECT_FALSE(fs::exists(d.path / "encodings.json"));
  EXPECT_TRUE(load_model_set(d.path.string())->encodings.empty());
}

TEST(ModelSet, Refusals) {
  TempDir d;
  auto ms = two_variants();
  EXPECT_MODEL_ERROR(save_model_set(*ms, d / "missing"), d / "missing", "does not exist");
  write_file(d.path / "junk", "x");
  EXPECT_MODEL_ERROR(save_model_set(*ms, d.path.string()), d.path.string(), "not empty");
  fs::remove(d.path / "junk");
  ms->graphs[1]->name = "../escape";
  EXPECT_MODEL_ERROR(save_model_set(*ms, d.path.string()), d.path.string(), "not a safe file name");
  ms->graphs[1]->name = ms->graphs[0]->name;
  EXPECT_MODEL_ERROR(save_model_set(*ms, d.path.string()), d.path.string(), "two graphs");
  ms->graphs[1]->name = "ok";
  ms->metadata["bad"] = "{not json";
  EXPECT_MODEL_ERROR(save_model_set(*ms, d.path.string()), d.path.string(), "metadata 'bad'");

  // Loading: a graph file that points outside the folder is refused.
  write_file(d.path / "model_set.json",
             R"({"format":"npuforge-model-set","version":1,"graphs":[{"name":"g","file":"../g.onnx"}]})");
  EXPECT_MODEL_ERROR(load_model_set(d.path.string()), (d.path / "model_set.json").string(), "not a plain file name");
  write_file(d.path / "model_set.json", R"({"format":"something-else"})");
  EXPECT_MODEL_ERROR(load_model_set(d.path.string()), (d.path / "model_set.json").string(), "not a model set");
  write_file(d.path / "model_set.json", "{");
  EXPECT_MODEL_ERROR(load_model_set(d.path.string()), (d.path / "model_set.json").string(), "invalid JSON");
}

TEST(ModelSet, BadEncodingsFileNamesFileAndEntry) {
  TempDir d;
  auto ms = two_variants();
  add_encodings(*ms);
  save_model_set(*ms, d.path.string());
  json j = json::parse(read_file(d.path / "encodings.json"));
  j["param_encodings"][0]["scale"].push_back(1.0);
  write_file(d.path / "encodings.json", j.dump());
  EXPECT_MODEL_ERROR(load_model_set(d.path.string()), (d.path / "encodings.json").string(), "param_encodings[0]");

  // The file is read entry by entry: each malformed shape still gets its own line.
  const std::string file = (d.path / "encodings.json").string();
  auto load_with = [&](const json& bad) {
    write_file(d.path / "encodings.json", bad.dump());
    load_model_set(d.path.string());
  };
  json second_not_object = json::parse(read_file(d.path / "encodings.json"));
  second_not_object["param_encodings"][0]["scale"].erase(second_not_object["param_encodings"][0]["scale"].size() - 1);
  second_not_object["param_encodings"].insert(second_not_object["param_encodings"].begin() + 1, 3);
  EXPECT_MODEL_ERROR(load_with(second_not_object), file, "param_encodings[1] is not an object");
  json section_object = second_not_object;
  section_object["param_encodings"] = {{"x", second_not_object["param_encodings"][0]}};
  EXPECT_MODEL_ERROR(load_with(section_object), file, "param_encodings must be an array");
  json no_version = section_object;
  no_version.erase("version");
  no_version["param_encodings"] = json::array();
  EXPECT_MODEL_ERROR(load_with(no_version), file, "version must be");
  json twice = second_not_object;
  twice["param_encodings"][1] = twice["param_encodings"][0];
  EXPECT_MODEL_ERROR(load_with(twice), file, "param_encodings[1]");
  write_file(d.path / "encodings.json", second_not_object.dump().substr(0, 100));
  EXPECT_MODEL_ERROR(load_model_set(d.path.string()), file, "invalid JSON");
}

// The package writer streams encodings.json entry by entry; its bytes must be the tree's dump.
TEST(Encodings, StreamedFileIsTheTreesDump) {
  ir::ModelSet ms;
  ms.graphs.push_back(load_model((data_dir() / "tiny_decoder.onnx").string()));
  for (bool with_activations : {true, false}) {
    SCOPED_TRACE(with_activations ? "both sections" : "empty activation section");
    add_encodings(ms);
    if (!with_activations) {
      ms.encodings.erase("logits");
      ms.encodings.erase("/model/norm/Mul_output_0");
    }
    std::ostringstream streamed;
    onnx_io::write_encodings(ms, streamed);
    EXPECT_EQ(streamed.str(), encodings_to_json(ms).dump(2));
  }
  ms.encodings.clear();
  std::ostringstream empty;
  onnx_io::write_encodings(ms, empty);
  EXPECT_EQ(empty.str(), encodings_to_json(ms).dump(2));
}

TEST(Encodings, JsonIsAimet100) {
  ir::ModelSet ms;
  auto g = load_model((data_dir() / "tiny_decoder.onnx").string());
  ms.graphs.push_back(std::move(g));
  add_encodings(ms);
  json j = encodings_to_json(ms);
  EXPECT_EQ(j["version"], "1.0.0");
  ASSERT_EQ(j["activation_encodings"].size(), 2u);
  ASSERT_EQ(j["param_encodings"].size(), 3u);
  json logits;
  for (const auto& e : j["activation_encodings"])
    if (e["name"] == "logits") logits = e;
  EXPECT_EQ(logits["enc_type"], "PER_TENSOR");
  EXPECT_EQ(logits["dtype"], "INT");
  EXPECT_EQ(logits["bw"], 16);
  EXPECT_EQ(logits["is_sym"], false);
  EXPECT_EQ(logits["offset"], json::array({-32768}));
  EXPECT_FALSE(logits.contains("block_size"));
  json lpbq;
  for (const auto& e : j["param_encodings"])
    if (e["name"] == "onnx::MatMul_538") lpbq = e;
  EXPECT_EQ(lpbq["enc_type"], "LPBQ");
  EXPECT_EQ(lpbq["block_size"], 64);
  EXPECT_EQ(lpbq["compressed_bw"], 4);
  EXPECT_EQ(lpbq["per_block_int_scale"], json::array({1, 2, 3, 16}));

  ir::ModelSet back;
  encodings_from_json(j, back);
  ASSERT_EQ(back.encodings.size(), 5u);
  for (const auto& [name, e] : ms.encodings) EXPECT_TRUE(same_encoding(e, back.encodings.at(name))) << name;
}

TEST(Encodings, ValidationNamesTheEntry) {
  json good = {{"name", "w"}, {"enc_type", "PER_CHANNEL"}, {"dtype", "INT"}, {"bw", 8},
               {"is_sym", true},  {"scale", {0.1, 0.2}},     {"offset", {-128, -128}}};
  auto doc = [](json entry) {
    return json{{"version", "1.0.0"}, {"activation_encodings", json::array()}, {"param_encodings", {entry}}};
  };
  auto expect_error = [&](json entry, const std::string& needle) {
    ir::ModelSet ms;
    try {
      encodings_from_json(doc(entry), ms);
      ADD_FAILURE() << "accepted " << entry.dump();
    } catch (const onnx_io::ModelError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("param_encodings[0] 'w'"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos);
    }
  };
  {
    ir::ModelSet ms;
    encodings_from_json(doc(good), ms);
    EXPECT_EQ(ms.encodings.at("w").view.num_scales, 2u);
  }
  json e = good;
  e["bitwidth"] = 8;
  expect_error(e, "unknown field 'bitwidth'");
  e = good;
  e.erase("scale");
  expect_error(e, "'scale' is missing");
  e = good;
  e["offset"] = {-128};
  expect_error(e, "2 scales but 1 offsets");
  e = good;
  e["enc_type"] = "PER_ROW";
  expect_error(e, "enc_type 'PER_ROW'");
  e = good;
  e["dtype"] = "int";
  expect_error(e, "dtype 'int'");
  e = good;
  e["is_sym"] = "True";
  expect_error(e, "is_sym");
  e = good;
  e["bw"] = 0;
  expect_error(e, "'bw' = 0");
  e = good;
  e["enc_type"] = "PER_TENSOR";
  expect_error(e, "PER_TENSOR but has 2 scales");
  e = good;
  e["enc_type"] = "PER_BLOCK";
  expect_error(e, "'block_size'");
  e = good;
  e["enc_type"] = "LPBQ";
  e["block_size"] = 64;
  e["compressed_bw"] = 4;
  e["per_block_int_scale"] = {1, 2, 3};
  expect_error(e, "not a multiple");
  e = good;
  e["scale"] = {0.1, "x"};
  expect_error(e, "must hold numbers");

  ir::ModelSet ms;
  EXPECT_THROW(encodings_from_json(json{{"version", "0.6.1"}}, ms), onnx_io::ModelError);
  json dup = doc(good);
  dup["activation_encodings"].push_back(good);
  EXPECT_THROW(encodings_from_json(dup, ms), onnx_io::ModelError);
}
