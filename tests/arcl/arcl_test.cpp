// arcl end to end: static graphs from each test model, run by hand on the cpu backend
// (prefill in AR-4 chunks, decode with AR 1), against the torch goldens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <npuforge/graph_roles.hpp>

#include "onnx/onnx_io.h"
#include "static_decoder.h"
#include "test_support.h"

namespace arcl_test {
namespace {

VariantIO variant(const nlohmann::json& io, int64_t ar) {
  for (const auto& v : io.at("variants"))
    if (v.at("ar") == ar)
      return {v.at("graph"), ar, v.at("cl"), v.at("scl").is_null() ? std::nullopt : std::optional<int64_t>(v.at("scl"))};
  throw std::runtime_error("no variant with AR " + std::to_string(ar));
}

struct DecodeResult {
  std::vector<int32_t> tokens;
  std::vector<float> last_logits;
};

// Greedy decoding through the static graphs as golden.json's procedure describes.
DecodeResult greedy(nf::ir::ModelSet& ms, const nlohmann::json& g) {
  const nlohmann::json io = nlohmann::json::parse(ms.metadata.at("io"));
  const nf::host::PluginInfo* cpu = plugins().find(NF_KIND_BACKEND, "cpu");
  // One kernel thread: the kernels' worker pool can hang when jobs of different widths
  // follow each other (a worker sitting out one job may run the next one twice).
  auto session = nf::host::BackendSession::open_model_set(*cpu, {{"threads", 1}}, ms);
  StaticDecoder dec(*session, io);
  std::vector<int32_t> prompt = g.at("prompt_ids").get<std::vector<int32_t>>();
  const size_t n_new = g.at("generated_ids").size();
  DecodeResult r;
  r.last_logits = dec.prefill(variant(io, 4), prompt);
  r.tokens.push_back(argmax(r.last_logits));
  const VariantIO decode = variant(io, 1);
  while (r.tokens.size() < n_new) {
    int32_t last = r.tokens.back();
    r.last_logits = dec.step(decode, std::span<const int32_t>(&last, 1));
    r.tokens.push_back(argmax(r.last_logits));
  }
  return r;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  return max_err / max_abs;
}

void expect_golden(const std::string& model, const nlohmann::json& options) {
  if (!model_exists(model)) GTEST_SKIP() << model << "/model.onnx is not there";
  auto ms = load_model(model);
  TransformResult applied = apply_arcl(*ms, options);
  ASSERT_EQ(applied.error, "");
  nlohmann::json g = golden(model);
  DecodeResult r = greedy(*ms, g);
  EXPECT_EQ(r.tokens, g.at("generated_ids").get<std::vector<int32_t>>());
  std::vector<float> want = g.at("last_logits").get<std::vector<float>>();
  ASSERT_EQ(r.last_logits.size(), want.size());
  double err = relative_error(r.last_logits, want);
  EXPECT_LT(err, 1e-4);
  std::printf("%s %s: max logit error %.3g (relative to the largest |logit|)\n", model.c_str(), options.dump().c_str(), err);
}

const nlohmann::json kAr14Cl32 = {{"arn", {1, 4}}, {"context_length", 32}};

TEST(ArclGolden, LlamaGqa) { expect_golden("llama_gqa", kAr14Cl32); }
TEST(ArclGolden, Qwen2) { expect_golden("qwen2", kAr14Cl32); }
TEST(ArclGolden, MixtralMoe) { expect_golden("mixtral_moe", kAr14Cl32); }
TEST(ArclGolden, MistralSwaWindowInAttentionMask) { expect_golden("mistral_swa", kAr14Cl32); }
TEST(ArclGolden, TinyLlama) { expect_golden("tiny_llama", kAr14Cl32); }
// GPT-BigCode as exported with transformers < 4.54 (one fused key_value cache per layer, the
// heads folded into the rows): the host reads it as pairs on load (sdk graph/fused_cache.h),
// and its static graphs keep the zoo model's tokens (same weights).
TEST(ArclGolden, GptBigCodeFusedCache) { expect_golden("legacy/gpt_bigcode_fused_kv", kAr14Cl32); }
TEST(ArclGolden, LlamaGqaHtpLayout) {
  expect_golden("llama_gqa", {{"arn", {1, 4}}, {"context_length", 32}, {"kv_layout", "htp"}});
}
TEST(ArclGolden, MistralSwaSlidingContext) {
  // SCL 256 (the smallest: a multiple of 256) needs a CL of at least 256.
  expect_golden("mistral_swa", {{"arn", {1, 4}}, {"context_length", 512}, {"sliding_context_length", 256}});
}

// Which layers slide, by each way configs say it: layer_types, a period (Gemma-3, Cohere2
// before layer_types), a spelled-out period (EXAONE-4.0's "LLLG"); the zoo's Gemma-3 has 3
// layers. A pattern of other letters is refused in one line.
TEST(ArclGraphs, SlidingLayersFromEveryConfigSpelling) {
  nlohmann::json base = nlohmann::json::parse(std::ifstream(model_dir("zoo/gemma3") + "/config.json"));
  base.erase("sliding_window_pattern");
  auto sliding = [&](const nlohmann::json& extra) {
    auto ms = load_model("zoo/gemma3");
    nlohmann::json config = base;
    config.update(extra);
    ms->metadata["config"] = config.dump();
    TransformResult r = apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", 32}});
    if (!r.error.empty()) return nlohmann::json(r.error);
    return nlohmann::json::parse(ms->metadata.at("io")).at("sliding_layers");
  };
  EXPECT_EQ(sliding({{"sliding_window_pattern", 3}}), nlohmann::json({0, 1}));
  EXPECT_EQ(sliding({{"sliding_window_pattern", 2}}), nlohmann::json({0, 2}));
  EXPECT_EQ(sliding({{"sliding_window_pattern", "LG"}}), nlohmann::json({0, 2}));
  EXPECT_EQ(sliding({{"sliding_window_pattern", "GLL"}}), nlohmann::json({1, 2}));
  EXPECT_EQ(sliding({{"layer_types", {"full_attention", "sliding_attention", "full_attention"}}}), nlohmann::json({1}));
  EXPECT_EQ(sliding(nlohmann::json::object()), nlohmann::json({0, 1, 2}));  // Mistral-style: every layer
  EXPECT_NE(sliding({{"sliding_window_pattern", "LLX"}}).dump().find("neither a period nor a string of L"), std::string::npos);
}

// GPT-Neo names its local layers in attention_layers and their window in window_size (no
// sliding_window key); local layers without a window are refused in one line.
TEST(ArclGraphs, GptNeoLocalLayers) {
  nlohmann::json base = nlohmann::json::parse(std::ifstream(model_dir("zoo/gpt_neo") + "/config.json"));
  auto io_of = [&](const nlohmann::json& extra, std::string* error) {
    auto ms = load_model("zoo/gpt_neo");
    nlohmann::json config = base;
    config.update(extra);
    ms->metadata["config"] = config.dump();
    TransformResult r = apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", 32}});
    *error = r.error;
    return r.error.empty() ? nlohmann::json::parse(ms->metadata.at("io")) : nlohmann::json();
  };
  std::string error;
  nlohmann::json io = io_of(nlohmann::json::object(), &error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(io.at("sliding_layers"), nlohmann::json({1, 3}));
  EXPECT_EQ(io.at("sliding_window"), 4);
  io = io_of({{"attention_layers", {"global", "global", "global", "global"}}}, &error);
  ASSERT_EQ(error, "");
  EXPECT_FALSE(io.contains("sliding_layers") && !io.at("sliding_layers").empty());
  io_of({{"window_size", 0}}, &error);
  EXPECT_NE(error.find("local attention_layers but no positive window_size"), std::string::npos) << error;
}

// GPT-J gathers its sin / cos rows with torch.gather: GatherElements by position_ids repeated
// over the rotary dims. The static graphs gather whole rows (Gather by the positions), which
// the NPU backends take (ARIES has no element-wise gather), and keep torch's greedy tokens.
TEST(ArclGolden, GptjRotaryRowsGathered) {
  expect_golden("zoo/gptj", kAr14Cl32);
  auto ms = load_model("zoo/gptj");
  ASSERT_EQ(apply_arcl(*ms, kAr14Cl32).error, "");
  for (const auto& g : ms->graphs) {
    int gathers_by_position = 0;
    for (const auto& n : g->nodes) {
      EXPECT_NE(n->op_type, "GatherElements") << g->name;
      gathers_by_position += n->op_type == "Gather" && g->initializer(n->inputs.at(0)) != nullptr &&
                             g->initializer(n->inputs.at(0))->dims.size() == 3;
    }
    EXPECT_EQ(gathers_by_position, 1) << g->name << ": one sin / cos row gather, shared by the layers";
  }
}

// zoo/mpt's ALiBi buffer [heads, 1, max_seq_len]: a Constant, as the exporter folds it.
bool is_mpt_buffer(const nf::ir::Node& n) {
  const std::vector<int64_t> dims{4, 1, 256};
  return n.op_type == "Constant" && n.attrs.count("value") && n.attrs.at("value").t->tensor.dims == dims;
}

// ALiBi: Bloom counts key positions from the mask (CumSum), MPT slices a constant buffer to
// the key length. Both static forms read key_positions [1, CL] (no position_ids: the exports
// have none); neither count nor buffer is left in the graphs.
TEST(ArclGraphs, AlibiReadsKeyPositions) {
  for (const char* model : {"zoo/bloom", "zoo/mpt"}) {
    auto ms = load_model(model);
    ASSERT_EQ(apply_arcl(*ms, kAr14Cl32).error, "") << model;
    for (const auto& g : ms->graphs) {
      EXPECT_EQ(std::count(g->inputs.begin(), g->inputs.end(), "key_positions"), 1) << model << " " << g->name;
      EXPECT_EQ(std::count(g->inputs.begin(), g->inputs.end(), "position_ids"), 0) << model << " " << g->name;
      const auto& shape = g->types.at("key_positions").shape;
      ASSERT_TRUE(shape && shape->size() == 2) << model;
      EXPECT_EQ((*shape)[0].value, 1) << model << ": [1, CL]";
      EXPECT_EQ((*shape)[1].value, 32) << model << ": [1, CL]";
      for (const auto& n : g->nodes) {
        EXPECT_NE(n->op_type, "CumSum") << model << " " << g->name;
        EXPECT_FALSE(is_mpt_buffer(*n)) << model << ": MPT's buffer stayed";
      }
      for (const auto& [name, t] : g->initializers)
        EXPECT_NE(t->tensor.dims, (std::vector<int64_t>{4, 1, 256})) << model << ": '" << name << "' (MPT's buffer) stayed";
    }
  }
}

// A bias from constants cut to the key length that is not slopes times positions (here MPT's
// buffer with one value moved) cannot be re-based on key_positions: arcl refuses it.
TEST(ArclGraphs, BiasCutFromAConstantMustBeLinear) {
  auto ms = load_model("zoo/mpt");
  int moved = 0;
  for (auto& n : ms->graphs.at(0)->nodes)
    if (is_mpt_buffer(*n)) {
      n->attrs.at("value").t->tensor.mutable_as<float>()[250] += 1.f;  // within the 32 last columns CL 32 keeps
      ++moved;
    }
  ASSERT_EQ(moved, 1);
  TransformResult r = apply_arcl(*ms, kAr14Cl32);
  EXPECT_NE(r.error.find("is not linear along the keys"), std::string::npos) << r.error;
}

// ONNX Runtime GenAI's LongRoPE export picks its rotary tables by the sequence's length
// (If(total length > 256), legacy/phi3_genai_longrope). A variant of CL <= 256 never passes
// it and runs the short tables (torch's tokens). One of CL 512 reads each row's length from the
// runner (sequence_lengths [1, AR]) and gathers its rows from the tables that length chose
// (tests/cli: its tokens are ONNX Runtime's on both sides of the switch); a choice of any other
// form is refused in one line naming the length.
TEST(ArclGolden, LengthSwitchFoldedWithinTheContext) {
  expect_golden("legacy/phi3_genai_longrope", kAr14Cl32);
  auto ms = load_model("legacy/phi3_genai_longrope");
  ASSERT_EQ(apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", 512}}).error, "");
  for (const auto& g : ms->graphs) {
    const auto& in = g->inputs;
    ASSERT_NE(std::find(in.begin(), in.end(), "sequence_lengths"), in.end()) << g->name;
    EXPECT_EQ(g->types.at("sequence_lengths").dtype, NF_DTYPE_INT64);
    int tables = 0;
    for (const auto& n : g->nodes) {
      const bool stacked = !n->inputs.empty() && g->initializer(n->inputs[0]) && g->initializer(n->inputs[0])->dims[0] > 512;
      EXPECT_FALSE(stacked && n->op_type != "Gather") << g->name << ": the chosen tables are gathered per row, not " << n->op_type;
      tables += stacked && n->op_type == "Gather";
    }
    EXPECT_EQ(tables, 2) << g->name << ": cos and sin, each from both tables stacked (512 long rows and the short ones)";
  }
  ms = load_model("legacy/phi3_genai_longrope");
  for (auto& n : ms->graphs.at(0)->nodes)  // the answer also read elsewhere: no row-by-row form
    if (n->op_type == "Greater") ms->graphs.at(0)->outputs.push_back(n->outputs[0]);
  TransformResult r = apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", 512}});
  EXPECT_NE(r.error.find("the model changes what it computes when the sequence passes 256 tokens "
                         "('/model/rotemb_caches_subgraph/Greater'), in a form a static variant cannot follow row by row"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("build with context_length <= 256"), std::string::npos) << r.error;
}

// key_positions holds one position per column of CL. A sliding cache (SCL variants) would
// need its own columns: arcl refuses ALiBi there in one line, as with a KV prefix.
TEST(ArclOptions, AlibiTakesNoSlidingCache) {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(model_dir("zoo/bloom") + "/config.json"));
  config["sliding_window"] = 8;  // an SCL of 256 beside CL 512
  auto ms = load_model("zoo/bloom");
  ms->metadata["config"] = config.dump();
  TransformResult r = apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", 512}});
  EXPECT_NE(r.error.find("ALiBi key positions with a sliding cache (SCL) are not supported"), std::string::npos) << r.error;
}

// A KV prefix (ssd's graph state, role kv_prefix) sits before the new rows in every cache,
// where ALiBi would need key positions of its own: refused in one line, not built wrong.
TEST(ArclOptions, AlibiTakesNoKvPrefix) {
  auto ms = load_model("zoo/bloom");
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(model_dir("zoo/bloom") + "/config.json"));
  const int64_t layers = config.at("n_layer"), heads = config.at("n_head"), rows = 2;
  const int64_t head_dim = config.at("hidden_size").get<int64_t>() / heads;
  auto prefix = std::make_unique<nf::ir::Graph>();
  prefix->name = "kv_prefix";
  for (int64_t l = 0; l < layers; ++l)
    for (bool key : {true, false}) {
      const std::string out = nf::roles::kv_prefix_output(l, key), init = "prefix." + out;
      prefix->initializers[init] =
          nf::ir::make_tensor_ref(nf::ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, heads, rows, head_dim}));
      prefix->nodes.push_back(std::make_unique<nf::ir::Node>(nf::ir::Node{"Identity", "", "/prefix/" + out, {init}, {out}, {}}));
      prefix->outputs.push_back(out);
    }
  ms->graphs.push_back(std::move(prefix));
  ms->metadata[nf::roles::kMetadataKey] =
      nlohmann::json{{nf::roles::kKvPrefix, {{"graphs", {"kv_prefix"}}, {"rows", rows}}}}.dump();
  TransformResult r = apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", 32}});
  EXPECT_NE(r.error.find("ALiBi key positions with a KV prefix are not supported"), std::string::npos) << r.error;
}

TEST(ArclGraphs, VariantsContractAndMetadata) {
  auto ms = load_model("mistral_swa");
  ASSERT_EQ(apply_arcl(*ms, {{"arn", {1, 4}}, {"context_length", {256, 512}}, {"kv_layout", "htp"}}).error, "");
  std::vector<std::string> names;
  for (const auto& g : ms->graphs) names.push_back(g->name);
  EXPECT_EQ(names, (std::vector<std::string>{"ar1_cl256_scl256", "ar1_cl512_scl256", "ar4_cl256_scl256",
                                             "ar4_cl512_scl256"}));
  nlohmann::json io = nlohmann::json::parse(ms->metadata.at("io"));
  EXPECT_EQ(io.at("layout"), "static");
  EXPECT_EQ(io.at("kv_layout"), "htp");
  EXPECT_EQ(io.at("mask_value"), -65504);
  EXPECT_EQ(io.at("layers"), 2);
  EXPECT_EQ(io.at("kv_heads"), 2);
  EXPECT_EQ(io.at("head_dim"), 16);
  EXPECT_EQ(io.at("vocab"), 384);
  EXPECT_EQ(io.at("sliding_window"), 8);
  EXPECT_EQ(io.at("sliding_layers"), nlohmann::json({0, 1}));
  EXPECT_EQ(io.at("variants").size(), 4u);

  const nf::ir::Graph& g = *ms->find("ar4_cl512_scl256");
  auto dims = [&](const std::string& v) {
    std::vector<int64_t> d;
    for (const auto& dim : *g.types.at(v).shape) d.push_back(dim.value);
    return d;
  };
  EXPECT_EQ(dims("input_ids"), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(dims("position_ids"), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(dims("attention_mask"), (std::vector<int64_t>{1, 1, 4, 512}));
  EXPECT_EQ(dims("sliding_attention_mask"), (std::vector<int64_t>{1, 1, 4, 256}));
  EXPECT_EQ(dims("past_key_values.0.key"), (std::vector<int64_t>{2, 1, 16, 252}));
  EXPECT_EQ(dims("past_key_values.1.value"), (std::vector<int64_t>{2, 1, 252, 16}));
  EXPECT_EQ(dims("present.0.key"), (std::vector<int64_t>{2, 1, 16, 4}));
  EXPECT_EQ(dims("present.1.value"), (std::vector<int64_t>{2, 1, 4, 16}));
  EXPECT_EQ(dims("logits"), (std::vector<int64_t>{1, 4, 384}));
  EXPECT_EQ(g.types.at("attention_mask").dtype, NF_DTYPE_FLOAT32);
}

TEST(ArclGraphs, SharesWeightsAndFoldsEveryShape) {
  for (const char* model : {"llama_gqa", "qwen2", "mixtral_moe", "mistral_swa"}) {
    auto ms = load_model(model);
    const auto* embed_source = ms->graphs[0]->initializer("model.embed_tokens.weight");
    ASSERT_NE(embed_source, nullptr);
    const void* bytes = embed_source->data();
    ASSERT_EQ(apply_arcl(*ms, kAr14Cl32).error, "") << model;
    for (const auto& g : ms->graphs) {
      for (const auto& n : g->nodes) {
        EXPECT_NE(n->op_type, "Shape") << model << " " << g->name;
        for (const auto& out : n->outputs) {
          auto it = g->types.find(out);
          ASSERT_NE(it, g->types.end()) << model << " " << g->name << ": " << out << " untyped";
          ASSERT_TRUE(it->second.shape.has_value()) << out;
          for (const auto& d : *it->second.shape) EXPECT_GE(d.value, 0) << model << " " << out;
        }
      }
      const auto* embed = g->initializer("model.embed_tokens.weight");
      ASSERT_NE(embed, nullptr);
      EXPECT_EQ(embed->data(), bytes) << "weights are shared, not copied";
    }
  }
}

TEST(ArclGraphs, ExportsValidOnnx) {
  auto dir = std::filesystem::temp_directory_path() / ("arcl_test_onnx_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const char* model : {"llama_gqa", "qwen2", "mixtral_moe", "mistral_swa"}) {
    auto ms = load_model(model);
    nlohmann::json opts = kAr14Cl32;
    if (std::string(model) == "llama_gqa") opts["kv_layout"] = "htp";
    ASSERT_EQ(apply_arcl(*ms, opts).error, "") << model;
    for (const auto& g : ms->graphs) {
      std::string path = (dir / (std::string(model) + "_" + g->name + ".onnx")).string();
      nf::onnx_io::save_model(*g, path);
      std::string cmd = "/usr/bin/python3 -c 'import onnx, sys; onnx.checker.check_model(sys.argv[1], full_check=True)' " + path;
      EXPECT_EQ(std::system(cmd.c_str()), 0) << path;
    }
  }
  std::filesystem::remove_all(dir);
}

// ---- options and their errors ---------------------------------------------------------

std::string arcl_error(const std::string& model, const nlohmann::json& options) {
  auto ms = load_model(model);
  return apply_arcl(*ms, options).error;
}

TEST(ArclOptions, NativeKvNeedsHtpArValues) {
  std::string e = arcl_error("llama_gqa", {{"arn", {4}}, {"context_length", 64}, {"native_kv", true}});
  EXPECT_NE(e.find("native_kv"), std::string::npos) << e;
  EXPECT_NE(e.find("{32, 64, 128, 256}"), std::string::npos) << e;
  auto ms = load_model("llama_gqa");
  EXPECT_EQ(apply_arcl(*ms, {{"arn", {32}}, {"context_length", 64}, {"native_kv", true}}).error, "");
}

TEST(ArclOptions, ArMustBeBelowCl) {
  std::string e = arcl_error("llama_gqa", {{"arn", {1, 32}}, {"context_length", {32, 64}}});
  EXPECT_NE(e.find("'arn'"), std::string::npos) << e;
  EXPECT_NE(e.find("AR 32 >= CL 32"), std::string::npos) << e;
}

TEST(ArclOptions, SlidingContextOutOfRange) {
  std::string e = arcl_error("mistral_swa", {{"arn", 1}, {"context_length", 512}, {"sliding_context_length", 600}});
  EXPECT_NE(e.find("sliding_context_length"), std::string::npos) << e;
  EXPECT_NE(e.find("768"), std::string::npos) << e;  // rounded before the check
}

TEST(ArclOptions, SlidingContextOnNonSlidingModel) {
  std::string e = arcl_error("llama_gqa", {{"arn", 1}, {"context_length", 512}, {"sliding_context_length", 256}});
  EXPECT_NE(e.find("only valid for sliding-window models"), std::string::npos) << e;
}

TEST(ArclOptions, ArnZeroOnDynamicSource) {
  std::string e = arcl_error("llama_gqa", {{"arn", 0}, {"context_length", 64}});
  EXPECT_NE(e.find("'arn' = 0"), std::string::npos) << e;
  EXPECT_NE(e.find("dynamic"), std::string::npos) << e;
}

TEST(ArclOptions, SlidingContextIsRoundedWithAWarning) {
  auto ms = load_model("mistral_swa");
  TransformResult r = apply_arcl(*ms, {{"arn", 1}, {"context_length", 512}, {"sliding_context_length", 100}});
  ASSERT_EQ(r.error, "");
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("sliding_context_length 100 rounded up to 256"), std::string::npos) << r.warnings[0];
  EXPECT_NE(ms->find("ar1_cl512_scl256"), nullptr);
}

TEST(ArclOptions, DefaultsFromTheSeed) {
  // arn [1, 128], context_length [4096]; the mistral window 8 gives SCL 256.
  auto ms = load_model("mistral_swa");
  ASSERT_EQ(apply_arcl(*ms, nlohmann::json::object()).error, "");
  std::vector<std::string> names;
  for (const auto& g : ms->graphs) names.push_back(g->name);
  EXPECT_EQ(names, (std::vector<std::string>{"ar1_cl4096_scl256", "ar128_cl4096_scl256"}));
}

TEST(ArclOptions, SchemaInDescriptor) {
  const nf::host::PluginInfo* arcl = plugins().find(NF_KIND_TRANSFORM, "arcl");
  ASSERT_NE(arcl, nullptr);
  EXPECT_EQ(arcl->schema.at("properties").at("arn").at("default"), nlohmann::json({1, 128}));
  EXPECT_EQ(arcl->schema.at("properties").at("context_length").at("default"), nlohmann::json({4096}));
  EXPECT_EQ(arcl->schema.at("properties").at("kv_layout").at("default"), "hf");
  EXPECT_EQ(arcl->schema.at("properties").at("native_kv").at("default"), false);
}

}  // namespace
}  // namespace arcl_test
