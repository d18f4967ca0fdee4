// The aries backend's rules and models without the host: option rules (qb Compiler seed
// 002 and hardware.md), device data files, the MXQ container, the weight quantizer and
// the simulator's sanity (monotone in prompt, context, bits, cores).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "compile.h"
#include "device.h"
#include "mxq.h"
#include "options.h"
#include "simulator.h"

using namespace nf::aries;
namespace fs = std::filesystem;

namespace {

const std::string kDevices = std::string(NPUFORGE_SOURCE_DIR) + "/plugins/backends/aries/devices";

std::string error_of(const nlohmann::json& j) {
  try {
    AriesOptions::resolve(j);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Llama-shaped linears (q, k, v, o, gate, up, down per block; head).
SimModel llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kv, int64_t hd, int64_t inter, int64_t vocab,
               const BitConfig& b = {}) {
  SimModel m;
  m.shape.layers = layers;
  m.shape.hidden = hidden;
  m.shape.heads = heads;
  m.shape.kv_heads = kv;
  m.shape.head_dim = hd;
  m.shape.intermediate = inter;
  m.shape.vocab = vocab;
  for (int64_t l = 0; l < layers; ++l) {
    m.linears.push_back({Kind::query, false, l, hidden, heads * hd, b.query});
    m.linears.push_back({Kind::key, false, l, hidden, kv * hd, b.key});
    m.linears.push_back({Kind::value, false, l, hidden, kv * hd, b.value});
    m.linears.push_back({Kind::output, false, l, heads * hd, hidden, b.output});
    m.linears.push_back({Kind::ffn, false, l, hidden, inter, b.ffn});
    m.linears.push_back({Kind::ffn, false, l, hidden, inter, b.ffn});
    m.linears.push_back({Kind::ffn, true, l, inter, hidden, b.ffn});
  }
  m.linears.push_back({Kind::head, false, -1, hidden, vocab, b.head});
  return m;
}

SimModel llama_1b(const BitConfig& b = {}) { return llama(16, 2048, 32, 8, 64, 8192, 128256, b); }

Device aries() { return Device::load_file(kDevices + "/aries-rb.json"); }

AriesOptions llm_options(nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json j = {{"preset", "llm"}};
  j.update(extra);
  return AriesOptions::resolve(j);
}

double est(const SimModel& m, const AriesOptions& o, int64_t prompt, int64_t ctx, const char* key) {
  return simulate(m, o, aries(), {prompt, ctx})[key].get<double>();
}

}  // namespace

TEST(AriesOptions, DefaultsFollowTheSeed) {
  AriesOptions o = AriesOptions::resolve(nlohmann::json::object());
  EXPECT_EQ(o.device, "aries-rb");
  EXPECT_EQ(o.core_mode, "single");
  EXPECT_TRUE(o.llm.apply);
  EXPECT_EQ(o.llm.batch_size, 1);
  EXPECT_EQ(o.bits.query + o.bits.key + o.bits.value + o.bits.output + o.bits.ffn + o.bits.head, 48);
  EXPECT_EQ(o.prefill_chunk, 128);
}

TEST(AriesOptions, PresetsAndExplicitOverrides) {
  AriesOptions llm = llm_options();
  EXPECT_EQ(llm.llm.max_sequence_length, 4096);
  EXPECT_EQ(llm.llm.max_cache_length, 4096);
  AriesOptions fast = AriesOptions::resolve({{"preset", "llm_fast"}});
  EXPECT_EQ(fast.llm.max_sequence_length, 4096);
  EXPECT_EQ(fast.preset_extras["hessian_quant"], false);
  EXPECT_EQ(fast.preset_extras["use_full_seq_length"], true);
  AriesOptions mm = AriesOptions::resolve({{"preset", "multimodal"}});
  EXPECT_TRUE(mm.llm.apply);
  EXPECT_EQ(mm.preset_extras["calibration"]["method"], 3);
  AriesOptions o = llm_options({{"llm", {{"max_sequence_length", 1024}, {"max_cache_length", 512}}}});
  EXPECT_EQ(o.llm.max_sequence_length, 1024);
  EXPECT_EQ(o.llm.max_cache_length, 512);
}

TEST(AriesOptions, CacheLongerThanSequenceIsRefused) {
  EXPECT_NE(error_of({{"preset", "llm"}, {"llm", {{"max_sequence_length", 1024}}}}).find("llm.max_cache_length 4096 exceeds llm.max_sequence_length 1024"),
            std::string::npos);
}

TEST(AriesOptions, SplitStrategiesAreExclusive) {
  std::string e = error_of({{"split_parts", 2}, {"split_blocks", {4}}});
  EXPECT_NE(e.find("split_parts and split_blocks are exclusive"), std::string::npos) << e;
  EXPECT_EQ(error_of({{"split_parts", 2}}), "");
  EXPECT_EQ(error_of({{"split_blocks", {4, 8}}}), "");
  EXPECT_NE(error_of({{"split_blocks", {8, 4}}}).find("strictly increasing"), std::string::npos);
}

TEST(AriesOptions, BatchedLlmIsSingleCoreOnly) {
  for (const char* mode : {"multi", "global4", "global8"}) {
    std::string e = error_of({{"core_mode", mode}, {"llm", {{"batch_size", 2}}}});
    EXPECT_NE(e.find("batched LLMs compile in single core mode only"), std::string::npos) << mode << ": " << e;
    EXPECT_EQ(error_of({{"core_mode", mode}, {"llm", {{"batch_size", 1}}}}), "") << mode;
  }
  EXPECT_EQ(error_of({{"core_mode", "single"}, {"llm", {{"batch_size", 4}}}}), "");
}

TEST(AriesOptions, RegulusIsSingleOnly) {
  for (const char* mode : {"multi", "global4", "global8"}) {
    std::string e = error_of({{"device", "regulus-rb"}, {"core_mode", mode}});
    EXPECT_NE(e.find("not available on regulus-rb"), std::string::npos) << e;
  }
  EXPECT_EQ(error_of({{"device", "regulus-rb"}}), "");
}

TEST(AriesOptions, OtherRules) {
  EXPECT_NE(error_of({{"llm", {{"apply", false}, {"batch_size", 2}}}}).find("needs llm.apply"), std::string::npos);
  EXPECT_NE(error_of({{"prefill_chunk", 512}, {"llm", {{"max_sequence_length", 256}}}}).find("prefill_chunk 512 exceeds"),
            std::string::npos);
  EXPECT_NE(error_of({{"bits", {{"ffn", 6}}}}).find("8 or 4 bits"), std::string::npos);
}

TEST(AriesOptions, PartRanges) {
  AriesOptions o = AriesOptions::resolve({{"split_parts", 3}});
  auto r = part_ranges(o, 16);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], std::make_pair(int64_t{0}, int64_t{5}));
  EXPECT_EQ(r[2], std::make_pair(int64_t{10}, int64_t{16}));
  EXPECT_THROW(part_ranges(AriesOptions::resolve({{"split_parts", 17}}), 16), nf::Error);
  auto b = part_ranges(AriesOptions::resolve({{"split_blocks", {4, 12}}}), 16);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], std::make_pair(int64_t{4}, int64_t{12}));
  try {
    part_ranges(AriesOptions::resolve({{"split_blocks", {16}}}), 16);
    FAIL();
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside 1..15"), std::string::npos) << e.what();
  }
}

// REGULUS has the ARIES core: its core parameters name aries-rb's ("same_as") instead of
// copying them, so a refit of ARIES reaches it (the copies had gone stale: mac_efficiency
// 0.1533 and a 4 MiB buffer "as ARIES" against the fitted 0.3264 and 480 KiB). A same_as
// that names a device with no value of its own is refused.
TEST(AriesDevice, RegulusTakesTheAriesCoresValues) {
  const Device a = Device::load_file(kDevices + "/aries-rb.json"), r = Device::load_file(kDevices + "/regulus-rb.json");
  EXPECT_EQ(r.mac_efficiency, a.mac_efficiency);
  EXPECT_EQ(r.onchip_buffer_bytes, a.onchip_buffer_bytes);
  EXPECT_EQ(r.mac_rows, a.mac_rows);
  EXPECT_EQ(r.raw["params"]["mac_efficiency"]["value"], a.raw["params"]["mac_efficiency"]["value"]) << "resolved into the copy a package keeps";
  const fs::path dir = fs::temp_directory_path() / ("aries_same_as_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json j = r.raw;
  j["params"]["mac_efficiency"] = {{"same_as", "no-such-device"}, {"source", "test"}};
  std::ofstream(dir / "x.json") << j.dump();
  try {
    Device::load_file((dir / "x.json").string());
    ADD_FAILURE() << "a same_as naming a missing device was accepted";
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-device.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(AriesDevice, FilesCarryASourceForEveryNumber) {
  for (const char* id : {"aries-rb", "regulus-rb"}) {
    Device d = Device::load_file(kDevices + "/" + id + ".json");
    EXPECT_EQ(d.id, id);
    for (const auto& [k, v] : d.raw["params"].items()) EXPECT_FALSE(v["source"].get<std::string>().empty()) << id << " " << k;
    // The published peak equals the modelled arrays at the modelled clock.
    double peak = d.local_cores() * d.mac_rows * d.mac_cols * 2.0 * d.clock_hz;
    EXPECT_NEAR(peak / 1e12, d.peak_tops_int8, 1e-6 * d.peak_tops_int8);
  }
  EXPECT_EQ(aries().local_cores(), 8);
  EXPECT_FALSE(Device::load_file(kDevices + "/regulus-rb.json").supports("global4"));
  nlohmann::json j = aries().raw;
  j["params"]["clock_hz"].erase("source");
  try {
    Device::from_json(j, "x.json");
    FAIL();
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("params.clock_hz has no \"source\""), std::string::npos);
  }
}

TEST(AriesQuantizer, GridsAndSearch) {
  const int64_t K = 64, N = 3;
  std::vector<float> w(static_cast<size_t>(K * N));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * (i % 17 == 0 ? 3.f : 1.f);
  for (int bits : {8, 4}) {
    QuantWeight plain, searched;
    plain.K = searched.K = K;
    plain.N = searched.N = N;
    quantize_weight(w.data(), false, bits, false, plain);
    quantize_weight(w.data(), false, bits, true, searched);
    double e_plain = 0, e_search = 0;
    const int qmax = (1 << (bits - 1)) - 1;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        float x = w[static_cast<size_t>(k * N + n)];
        int q = plain.q[static_cast<size_t>(n * K + k)];
        EXPECT_LE(q, qmax);
        EXPECT_GE(q, -qmax - 1);
        float s = plain.scale[static_cast<size_t>(n)];
        EXPECT_LE(std::fabs(q * s - x), s / 2 + 1e-6f);  // absmax scale: no clipping
        e_plain += std::pow(q * s - x, 2);
        float s2 = searched.scale[static_cast<size_t>(n)];
        e_search += std::pow(searched.q[static_cast<size_t>(n * K + k)] * s2 - x, 2);
      }
    EXPECT_LE(e_search, e_plain) << bits;
  }
}

TEST(AriesContainer, RoundTripAndCorruption) {
  fs::path dir = fs::temp_directory_path() / ("aries_mxq_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "p.mxq").string();
  QuantWeight a, b;
  a.name = "w8"; a.kind = "ffn"; a.block = 3; a.K = 5; a.N = 2; a.bits = 8;
  a.q = {1, -2, 3, -128, 127, 0, 5, -6, 7, 8};
  a.scale = {0.5f, 0.25f};
  b.name = "w4"; b.kind = "query"; b.block = 0; b.K = 3; b.N = 2; b.bits = 4; b.nk = true;
  b.q = {-8, 7, 0, 1, -1, 3};
  b.scale = {1.f, 2.f};
  MxqWriter wr(path, {{"part", 0}});
  wr.add(a);
  wr.add(b);
  wr.finish();
  MxqFile f = MxqFile::read(path);
  EXPECT_EQ(f.header["part"], 0);
  QuantWeight ra = f.tensor(0), rb = f.tensor(1);
  EXPECT_EQ(ra.q, a.q);
  EXPECT_EQ(ra.scale, a.scale);
  EXPECT_EQ(rb.q, b.q);
  EXPECT_TRUE(rb.nk);
  EXPECT_EQ(rb.bits, 4);
  // One flipped bit in the payload.
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(70);
    char c;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(70);
    io.write(&c, 1);
  }
  try {
    MxqFile::read(path);
    FAIL();
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupted (checksum mismatch)"), std::string::npos) << e.what();
  }
  fs::resize_file(path, fs::file_size(path) - 3);
  try {
    MxqFile::read(path);
    FAIL();
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(AriesSimulator, SaneAndMonotone) {
  SimModel m = llama_1b();
  AriesOptions o = llm_options();
  // Longer prompts take longer; chunks of 128: 129 tokens is two chunks.
  EXPECT_LT(est(m, o, 64, 256, "ttft_ms"), est(m, o, 512, 256, "ttft_ms"));
  EXPECT_LT(est(m, o, 512, 256, "ttft_ms"), est(m, o, 2048, 256, "ttft_ms"));
  EXPECT_LT(est(m, o, 128, 256, "ttft_ms"), est(m, o, 129, 256, "ttft_ms"));
  // Longer contexts decode slower (more KV traffic), never faster.
  EXPECT_GT(est(m, o, 64, 128, "decode_tokens_per_s"), est(m, o, 64, 4096, "decode_tokens_per_s"));
  // 4-bit projections read fewer bytes: faster decode, smaller weights.
  SimModel w4 = llama_1b({4, 4, 8, 4, 4, 8});
  EXPECT_GT(est(w4, o, 64, 512, "decode_tokens_per_s"), est(m, o, 64, 512, "decode_tokens_per_s") * 1.3);
  EXPECT_LT(est(w4, o, 64, 512, "weight_bytes"), est(m, o, 64, 512, "weight_bytes") * 0.7);
  // More cores split prefill: global8 < global4 < single.
  AriesOptions g4 = llm_options({{"core_mode", "global4"}}), g8 = llm_options({{"core_mode", "global8"}});
  EXPECT_LT(est(m, g4, 1024, 1024, "ttft_ms"), est(m, o, 1024, 1024, "ttft_ms") / 2);
  EXPECT_LT(est(m, g8, 1024, 1024, "ttft_ms"), est(m, g4, 1024, 1024, "ttft_ms"));
  // Decode at batch 1 is DRAM-bound on one core, and weights are read once per token.
  auto j = simulate(m, o, aries(), {240, 250});
  EXPECT_EQ(j["decode_bound"], "dram");
  EXPECT_GT(j["dram_bytes_per_token"].get<double>(), j["weight_bytes"].get<double>());
  EXPECT_LT(j["dram_bytes_per_token"].get<double>(), j["weight_bytes"].get<double>() * 1.1);
  // Memory: weights + KV reserved for the cache length + scratch; grows with the cache.
  AriesOptions small = llm_options({{"llm", {{"max_sequence_length", 1024}, {"max_cache_length", 1024}}}});
  EXPECT_LT(est(m, small, 64, 512, "memory_bytes"), est(m, o, 64, 512, "memory_bytes"));
  // Batched decode (single mode, one core per sequence) sums to more tokens/s than batch 1.
  AriesOptions b4 = llm_options({{"llm", {{"batch_size", 4}}}});
  EXPECT_GT(est(m, b4, 64, 512, "decode_tokens_per_s"), est(m, o, 64, 512, "decode_tokens_per_s"));
  // Prompts longer than the cache are refused with the reason.
  EXPECT_THROW(simulate(m, small, aries(), {2048, 512}), nf::Error);
}

TEST(AriesSimulator, RowBlockingFromTheOnChipBuffer) {
  // Llama-3.1-8B's FFN rows (14336 wide, the down projection's input 16-bit) do not fit the
  // per-core buffer with a 128-token chunk: the rows run in blocks, each fetching every
  // weight tile again, so the 8B prefills slower per MAC than the 1B, whose rows fit better.
  SimModel m8 = llama(32, 4096, 32, 8, 128, 14336, 128256, {});
  AriesOptions o = llm_options();
  Device d = aries();
  double t8 = simulate(m8, o, d, {240, 245})["ttft_ms"], t1 = simulate(llama_1b(), o, d, {240, 245})["ttft_ms"];
  double macs8 = 32 * (4096.0 * 6144 + 3 * 4096.0 * 14336), macs1 = 16 * (2048.0 * 3072 + 3 * 2048.0 * 8192);
  EXPECT_GT(t8 / macs8, 1.2 * t1 / macs1);
  // A bigger buffer is never slower; with room for every row the blocking disappears.
  double prev = 1e300;
  for (double buf : {128e3, 256e3, 512e3, 1e6, 4e6, 64e6}) {
    d.onchip_buffer_bytes = buf;
    double t = simulate(m8, o, d, {240, 245})["ttft_ms"];
    EXPECT_LE(t, prev * (1 + 1e-12)) << buf;
    prev = t;
  }
  // Decode (one row) never blocks: the buffer does not change it.
  d.onchip_buffer_bytes = 128e3;
  double slow = simulate(m8, o, d, {240, 245})["decode_tokens_per_s"];
  d.onchip_buffer_bytes = 64e6;
  EXPECT_NEAR(simulate(m8, o, d, {240, 245})["decode_tokens_per_s"].get<double>(), slow, 1e-9 * slow);
}

TEST(AriesSimulator, CalibrationFiguresWithin20Percent) {
  // Llama-3.2-1B, W8, default llm preset, single core: Advantech report 30.73 tok/s, 430.56 ms
  // TTFT (240 in), and Llama-3.1-8B's 4430.71 ms TTFT: the fitted figures.
  auto j = simulate(llama_1b(), llm_options(), aries(), {240, 245});
  double tps = j["decode_tokens_per_s"], ttft = j["ttft_ms"];
  std::printf("Llama-3.2-1B on aries-rb: decode %.2f tok/s (published 30.73), TTFT %.1f ms (published 430.56)\n", tps, ttft);
  EXPECT_LT(std::fabs(tps / 30.73 - 1), 0.2);
  EXPECT_LT(std::fabs(ttft / 430.56 - 1), 0.2);
  double t8 = simulate(llama(32, 4096, 32, 8, 128, 14336, 128256, {}), llm_options(), aries(), {240, 245})["ttft_ms"];
  EXPECT_LT(std::fabs(t8 / 4430.71 - 1), 0.2) << t8;
}

// Heads stay whole on the 64x64 array: EXAONE-3.5's 80-wide heads take two tiles each, so its
// q and o projections (2560 = 32 heads x 80) fold like 4096-wide ones, and its decode reads
// that many more weight tiles than a model of the same widths with 64- or 128-wide heads.
// Heads of 32 share a tile: no padding.
TEST(AriesSimulator, HeadsStayWholeOnTheArray) {
  AriesOptions o = llm_options();  // single core: no head split across cores to skew the count
  auto step_ms = [&](int64_t heads, int64_t kv_heads, int64_t head_dim) {
    const nlohmann::json c = {{"num_hidden_layers", 30}, {"hidden_size", 2560}, {"intermediate_size", 7168},
                              {"num_attention_heads", heads}, {"num_key_value_heads", kv_heads},
                              {"head_dim", head_dim}, {"vocab_size", 102400}};
    return simulate(decoder_from_config(c, o.bits), o, aries(), {240, 245})["decode_ms_per_token"].get<double>();
  };
  const double h80 = step_ms(32, 8, 80), h64 = step_ms(40, 10, 64), h32 = step_ms(80, 20, 32), h128 = step_ms(20, 5, 128);
  // K = 2560 is 40 row tiles: q's 32 heads of 80 take 64 column tiles instead of 40, o's K 64
  // row tiles instead of 40 over 40 column tiles: 1920 more folds a block over the 64-wide
  // model's 17440 (q, k, v, o, gate, up, down): about 11% more a token, the head unchanged.
  EXPECT_GT(h80, 1.08 * h64);
  EXPECT_LT(h80, 1.15 * h64);
  EXPECT_NEAR(h32, h64, 0.01 * h64);
  EXPECT_NEAR(h128, h64, 0.01 * h64);
}

// HF configs of other families name the same shapes their own way; the simulator reads
// them under the Llama names (npuforge/hf_config.hpp), so EXAONE's, ChatGLM's or a
// multimodal config cost the same as their Llama-keyed copy, and a config without a shape
// is refused naming the keys it looked for.
TEST(AriesSimulator, ConfigsOfOtherFamiliesCostTheirShapes) {
  const nlohmann::json llama_keys = {{"num_hidden_layers", 30}, {"hidden_size", 2560}, {"intermediate_size", 7168},
                                     {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"head_dim", 80},
                                     {"vocab_size", 102400}};
  const nlohmann::json exaone = {{"model_type", "exaone"}, {"num_layers", 30}, {"hidden_size", 2560},
                                 {"intermediate_size", 7168}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                                 {"head_dim", 80}, {"vocab_size", 102400}};
  const nlohmann::json multimodal = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", llama_keys}};
  const nlohmann::json glm = {{"model_type", "chatglm"}, {"num_layers", 30}, {"hidden_size", 2560},
                              {"ffn_hidden_size", 7168}, {"num_attention_heads", 32}, {"multi_query_attention", true},
                              {"multi_query_group_num", 8}, {"kv_channels", 80}, {"padded_vocab_size", 102400}};
  AriesOptions o = llm_options();
  const nlohmann::json want = simulate(decoder_from_config(llama_keys, o.bits), o, aries(), {240, 245});
  for (const auto& cfg : {exaone, multimodal, glm}) {
    const SimModel m = decoder_from_config(cfg, o.bits);
    EXPECT_EQ(m.shape.layers, 30);
    EXPECT_EQ(m.shape.kv_heads, 8) << cfg.dump();
    EXPECT_EQ(m.shape.head_dim, 80);
    EXPECT_EQ(simulate(m, o, aries(), {240, 245}), want) << cfg.dump();
  }
  // ChatGLM without grouped attention keeps its group count in the config: every head has its KV.
  nlohmann::json mha = glm;
  mha["multi_query_attention"] = false;
  EXPECT_EQ(decoder_from_config(mha, o.bits).shape.kv_heads, 32);
  nlohmann::json none = exaone;
  none.erase("num_layers");
  try {
    decoder_from_config(none, o.bits);
    ADD_FAILURE() << "a config without a layer count was accepted";
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers, num_layers, n_layer"), std::string::npos) << e.what();
  }
}

// Phi-2's MLP has no gate: two linears a block where Llama's shape has three, so the same
// sizes read fewer weight bytes a token. A mixture of experts names one expert's sizes, and
// is refused rather than costed as one dense MLP.
TEST(AriesSimulator, ConfigsWithAPlainMlpOrExperts) {
  const nlohmann::json phi2 = {{"model_type", "phi"}, {"num_hidden_layers", 32}, {"hidden_size", 2560},
                               {"intermediate_size", 10240}, {"num_attention_heads", 32}, {"vocab_size", 51200}};
  nlohmann::json gated = phi2;
  gated["model_type"] = "llama";
  AriesOptions o = llm_options();
  const SimModel plain = decoder_from_config(phi2, o.bits), llama = decoder_from_config(gated, o.bits);
  EXPECT_EQ(plain.linears.size(), 32u * 6 + 1);
  EXPECT_EQ(llama.linears.size(), 32u * 7 + 1);
  const double bytes = static_cast<double>(2560) * 10240 * 32;  // one int8 linear of each block
  EXPECT_NEAR(memory_plan(llama, o, 512).weight_bytes - memory_plan(plain, o, 512).weight_bytes, bytes + 32 * 10240 * 4.0,
              1.0);
  EXPECT_GT(simulate(plain, o, aries(), {240, 245})["decode_tokens_per_s"].get<double>(),
            simulate(llama, o, aries(), {240, 245})["decode_tokens_per_s"].get<double>());
  nlohmann::json mixtral = gated;
  mixtral["num_local_experts"] = 8;
  try {
    decoder_from_config(mixtral, o.bits);
    ADD_FAILURE() << "a mixture-of-experts config was costed as a dense one";
  } catch (const nf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a mixture of experts (num_local_experts 8)"), std::string::npos) << e.what();
  }
}

// The rows of the compiled graph a tree pass runs on: aries.json records every static
// graph's rows per call; a package from before that knows only the largest.
TEST(AriesModelShape, RowsPerCallAndOlderPackages) {
  ModelShape s;
  s.layers = 2;
  s.hidden = s.heads = s.kv_heads = s.head_dim = s.intermediate = s.vocab = 8;
  s.max_rows = 32;
  s.rows_per_call = {1, 16, 32};
  const ModelShape back = ModelShape::from_json(s.to_json());
  EXPECT_EQ(back.rows_per_call, s.rows_per_call);
  EXPECT_EQ(back.graph_rows_for(1), 1);
  EXPECT_EQ(back.graph_rows_for(2), 16);
  EXPECT_EQ(back.graph_rows_for(17), 32);
  EXPECT_EQ(back.graph_rows_for(40), 32);  // the largest, called twice

  nlohmann::json old = s.to_json();
  old.erase("rows_per_call");
  EXPECT_EQ(ModelShape::from_json(old).graph_rows_for(4), 32);
  old["max_rows"] = 0;  // a dynamic graph: the pass runs at its own rows
  EXPECT_EQ(ModelShape::from_json(old).graph_rows_for(4), 4);

  for (const nlohmann::json& bad : {nlohmann::json{16, 1}, nlohmann::json{0, 16}}) {
    nlohmann::json j = s.to_json();
    j["rows_per_call"] = bad;
    try {
      ModelShape::from_json(j);
      FAIL() << bad;
    } catch (const nf::Error& e) {
      EXPECT_NE(std::string(e.what()).find("rows_per_call"), std::string::npos) << e.what();
    }
  }
}
