#include <npuforge/hf_config.hpp>

#include "test_util.h"

using namespace nf;
using namespace nf::onnx_test;
using nlohmann::json;

TEST(Inspect, TinyDecoderCounts) {
  TempDir d;
  // Through an export, as `npuforge inspect` would see a saved model.
  auto src = onnx_io::load_model((data_dir() / "tiny_decoder.onnx").string());
  onnx_io::save_model(*src, d / "m.onnx");
  json info = onnx_io::inspect(*onnx_io::load_model(d / "m.onnx"));
  EXPECT_EQ(info["parameters"], 19616);  // embedding 64x32, 2 layers of 7744, norm 32, lm_head 32x64
  EXPECT_EQ(info["parameter_bytes"], 19616 * 4);
  EXPECT_EQ(info["layers"], 2);
  EXPECT_EQ(info["kv_heads"], 2);
  EXPECT_EQ(info["head_dim"], 8);
  EXPECT_EQ(info["heads"], 4);
  EXPECT_EQ(info["kv_inputs"], json({"past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key",
                                     "past_key_values.1.value"}));
  EXPECT_EQ(info["kv_outputs"].size(), 4u);
  EXPECT_EQ(info["inputs"].size(), 7u);
  EXPECT_EQ(info["inputs"][0], json({{"name", "input_ids"}, {"dtype", "int64"}, {"shape", {"batch_size", "sequence_length"}}}));
  EXPECT_EQ(info["inputs"][3]["shape"], json({"batch_size", 2, "past_sequence_length", 8}));
  EXPECT_EQ(info["outputs"][0]["name"], "logits");
  EXPECT_EQ(info["opset"], json({{"ai.onnx", 17}}));
  EXPECT_EQ(info["ops"]["MatMul"], 19);
  EXPECT_EQ(info["ops"]["Constant"], 166);
  EXPECT_EQ(info["nodes"], 467);

  std::string text = onnx_io::format_inspect(info);
  EXPECT_NE(text.find("parameters      19,616 (76.6 KiB)"), std::string::npos) << text;
  EXPECT_NE(text.find("past_key_values.0.key"), std::string::npos);
  EXPECT_NE(text.find("[batch_size, 2, past_sequence_length, 8]"), std::string::npos) << text;
  EXPECT_NE(text.find("heads           4"), std::string::npos) << text;
}

TEST(Inspect, LayersFromNamePrefixesWithoutKv) {
  auto g = onnx_io::load_model((data_dir() / "tiny_decoder.onnx").string());
  // Drop the KV IO: layers must come from names like /layers.N/ alone.
  g->inputs.resize(3);
  g->outputs.resize(1);
  json info = onnx_io::inspect(*g);
  EXPECT_EQ(info["layers"], 2);
  EXPECT_FALSE(info.contains("heads"));
  EXPECT_TRUE(info["kv_inputs"].empty());
}

TEST(Inspect, FusedQkvAndEmptyGraph) {
  ir::Graph g;
  g.inputs = {"past_key_values.0.key"};
  g.types["past_key_values.0.key"] = {NF_DTYPE_FLOAT32, std::vector<ir::Dim>{{-1, "b"}, {2, ""}, {-1, "p"}, {16, ""}}};
  auto w = std::make_shared<ir::TensorRef>();
  w->tensor = ir::Tensor::zeros(NF_DTYPE_FLOAT16, {64, (8 + 2 * 2) * 16});
  g.initializers["W"] = w;
  g.nodes.push_back(std::make_unique<ir::Node>(ir::Node{"MatMul", "", "/layers.0/attn/qkv_proj/MatMul", {"x", "W"}, {"y"}, {}}));
  json info = onnx_io::inspect(g);
  EXPECT_EQ(info["heads"], 8);
  EXPECT_EQ(info["kv_heads"], 2);
  EXPECT_EQ(info["layers"], 1);
  EXPECT_EQ(info["parameter_bytes"], 64 * 192 * 2);
  EXPECT_FALSE(onnx_io::format_inspect(onnx_io::inspect(ir::Graph{})).empty());
}

// A tied LM head that torch's constant folding stored as a transposed copy of the embedding
// table is one parameter to HF: the zoo's tied Gemma counts 262,464 as its README says, not
// 278,848 with the copy (an untied head of the same shape would count twice: a table's
// transpose is compared element by element).
TEST(Inspect, TiedHeadCopyCountedOnce) {
  json info = onnx_io::inspect(*onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/zoo/gemma/model.onnx"));
  EXPECT_EQ(info["parameters"], 262464);
  EXPECT_EQ(info["tied_head_copy_parameters"], 256 * 64);
  EXPECT_NE(onnx_io::format_inspect(info).find("the tied LM head is also stored transposed: 16,384 more"), std::string::npos);
  json untied = onnx_io::inspect(*onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/zoo/llama3/model.onnx"));
  EXPECT_EQ(untied["parameters"], 180672);
  EXPECT_FALSE(untied.contains("tied_head_copy_parameters"));
}

// ONNX Runtime GenAI's int4 export holds each linear weight as MatMulNBits codes and scales:
// K x N parameters each, as many as its fp32 export of the same model.
TEST(Inspect, NBitsWeightsCountAsTheirMatrix) {
  const std::string legacy = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/legacy/";
  json int4 = onnx_io::inspect(*onnx_io::load_model(legacy + "llama3_genai_int4/model.onnx"));
  json fp32 = onnx_io::inspect(*onnx_io::load_model(legacy + "llama3_genai/model.onnx"));
  EXPECT_EQ(int4["parameters"], fp32["parameters"]);
  EXPECT_LT(int4["parameter_bytes"].get<double>(), fp32["parameter_bytes"].get<double>() / 3);
  // transformers.js's q4: the table a GatherBlockQuantized too; the GenAI tied form's table the
  // head's own codes (counted once, as HF counts a tied table).
  json q4 = onnx_io::inspect(*onnx_io::load_model(legacy + "llama3_q4/model.onnx"));
  json zoo = onnx_io::inspect(*onnx_io::load_model(legacy + "../zoo/llama3/model.onnx"));
  EXPECT_EQ(q4["parameters"], zoo["parameters"]);
  EXPECT_EQ(q4["heads"], zoo["heads"]);
  json shared = onnx_io::inspect(*onnx_io::load_model(legacy + "qwen2_genai_int4_shared/model.onnx"));
  json tied = onnx_io::inspect(*onnx_io::load_model(legacy + "qwen2_genai_tied/model.onnx"));
  EXPECT_EQ(shared["parameters"], tied["parameters"]);
}

// Query heads from the fused projections of GPT-2 (c_attn, a Gemm by W [in, 3 x hidden]),
// GPT-NeoX and Falcon (query_key_value; Falcon's holds one KV head): each has 4.
TEST(Inspect, HeadsOfFusedProjections) {
  for (const char* m : {"gpt2", "gpt_neox", "falcon"}) {
    json info = onnx_io::inspect(*onnx_io::load_model(std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/zoo/" + m + "/model.onnx"));
    EXPECT_EQ(info.value("heads", 0), 4) << m;
  }
}

// The heads come from what the graph computes, not from its names or node order: every
// decoder of tests/models with its nodes reversed and every node, initializer and
// intermediate value renamed gives the config's head count (by the names alone, such a
// graph had none).
TEST(Inspect, HeadsByStructureWhateverTheNames) {
  const fs::path root = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "models";
  int checked = 0;
  for (const fs::path& base : {root, root / "zoo", root / "legacy"}) {
    for (const auto& e : fs::directory_iterator(base)) {
      if (!fs::exists(e.path() / "model.onnx") || !fs::exists(e.path() / "config.json")) continue;
      json config = json::parse(std::ifstream(e.path() / "config.json"));
      const int64_t heads = nf::hf_config::get_int(config, "num_attention_heads").value_or(-1);  // any family's key
      auto g = onnx_io::load_model((e.path() / "model.onnx").string());
      // optimum's merged decoder is one If here; `npuforge inspect` reads its cache branch
      // first, as a build does (Inspect.MergedDecoderAsABuildReadsIt in cli_test).
      if (g->nodes.size() == 1 && g->nodes[0]->op_type == "If") continue;
      std::set<std::string> io(g->inputs.begin(), g->inputs.end());
      io.insert(g->outputs.begin(), g->outputs.end());
      std::map<std::string, std::string> renamed;
      auto rename = [&](const std::string& v, const char* prefix) {
        if (v.empty() || io.count(v)) return v;
        auto [it, added] = renamed.try_emplace(v, prefix + std::to_string(renamed.size()));
        return it->second;
      };
      std::map<std::string, std::shared_ptr<ir::TensorRef>> inits;
      for (auto& [name, ref] : g->initializers) inits[rename(name, "w")] = ref;
      g->initializers = inits;
      std::reverse(g->nodes.begin(), g->nodes.end());
      for (size_t i = 0; i < g->nodes.size(); ++i) {
        ir::Node& n = *g->nodes[i];
        n.name = "n" + std::to_string(i);
        for (auto& v : n.inputs) v = rename(v, "v");
        for (auto& v : n.outputs) v = rename(v, "v");
      }
      json info = onnx_io::inspect(*g);
      EXPECT_EQ(info.value("heads", -1), heads) << e.path();
      ++checked;
    }
  }
  EXPECT_GE(checked, 50);
}
