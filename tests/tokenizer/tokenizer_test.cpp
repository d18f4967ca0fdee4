// The tokenizer against Hugging Face tokenizers (Rust): tests/tokenizer/data/*.reference.json
// hold its encodings and decodings of fixed strings (tools/tokenizer/make_reference.mjs).
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace fs = std::filesystem;
using nf::Tokenizer;
using nlohmann::json;

namespace {

const fs::path kData = fs::path(NPUFORGE_SOURCE_DIR) / "tests/tokenizer/data";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("npuforge_tok_" + std::to_string(std::random_device{}()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
};

std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  auto s = tok.stream(skip_special);
  std::string out;
  for (int32_t id : ids) out += s.push(id);
  return out + s.finish();
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// Every case of one reference file: encode with and without special tokens, decode keeping
// and skipping them, and streaming decode.
void check_reference(const fs::path& ref_path) {
  json ref = read_json(ref_path);
  fs::path tok_path = ref.at("tokenizer").get<std::string>();
  if (tok_path.is_relative()) tok_path = ref_path.parent_path() / tok_path;
  Tokenizer tok = Tokenizer::load(tok_path.string());
  size_t passed = 0, total = 0;
  for (const auto& c : ref.at("cases")) {
    std::string text = c.at("text");
    auto want = c.at("ids").get<std::vector<int32_t>>();
    auto want_plain = c.at("ids_no_special").get<std::vector<int32_t>>();
    auto got = tok.encode(text);
    auto got_plain = tok.encode(text, false);
    std::string skip = tok.decode(want, true), keep = tok.decode(want, false);
    std::string streamed = stream_all(tok, want, true);
    bool ok = got == want && got_plain == want_plain && skip == c.at("decoded_skip_special") &&
              keep == c.at("decoded_keep_special") && streamed == skip;
    EXPECT_EQ(show(got), show(want)) << ref_path.filename() << " text: " << json(text).dump();
    EXPECT_EQ(show(got_plain), show(want_plain)) << ref_path.filename() << " text: " << json(text).dump();
    EXPECT_EQ(skip, c.at("decoded_skip_special").get<std::string>()) << json(text).dump();
    EXPECT_EQ(keep, c.at("decoded_keep_special").get<std::string>()) << json(text).dump();
    EXPECT_EQ(streamed, skip) << json(text).dump();
    passed += ok;
    ++total;
  }
  std::printf("[reference] %s: %zu/%zu strings match HF tokenizers\n", ref.at("name").get<std::string>().c_str(),
              passed, total);
}

}  // namespace

TEST(Tokenizer, Gpt2MatchesReference) { check_reference(kData / "gpt2.reference.json"); }
TEST(Tokenizer, Llama2ByteFallbackMatchesReference) { check_reference(kData / "llama2.reference.json"); }
TEST(Tokenizer, Qwen3MiniMatchesReference) { check_reference(kData / "qwen3-mini.reference.json"); }
TEST(Tokenizer, Llama3StyleMiniMatchesReference) { check_reference(kData / "llama3-style-mini.reference.json"); }
TEST(Tokenizer, SmallHandMadeCasesMatchReference) {
  for (const char* name : {"small-unk-fused", "small-unk-pairs", "small-metaspace", "small-bytelevel-prefix",
                           "small-bytelevel-splits", "small-suffix", "small-prefix"})
    check_reference(kData / (std::string(name) + ".reference.json"));
}

// The tiny test model's own tokenizer (tests/models/tiny_llama), on the fixed strings and 200
// lines of its held-out text.
TEST(Tokenizer, TinyLlamaMatchesReference) {
  fs::path tok = fs::path(NPUFORGE_SOURCE_DIR) / "tests/models/tiny_llama/tokenizer.json";
  if (!fs::exists(tok)) GTEST_SKIP() << tok << " not present";
  auto want_bytes = read_json(kData / "tiny_llama.reference.json").at("tokenizer_bytes").get<uintmax_t>();
  if (fs::file_size(tok) != want_bytes)
    GTEST_SKIP() << tok << " changed since its reference was made: rerun tools/tokenizer/make_reference.mjs";
  check_reference(kData / "tiny_llama.reference.json");
}

// References for tokenizers too big to commit (full Llama-3, Qwen3), when a developer has made
// them: NPUFORGE_TOKENIZER_EXTRA_REFS=<dir of *.reference.json>.
TEST(Tokenizer, ExtraReferencesWhenGiven) {
  const char* dir = std::getenv("NPUFORGE_TOKENIZER_EXTRA_REFS");
  if (!dir || !*dir) GTEST_SKIP() << "NPUFORGE_TOKENIZER_EXTRA_REFS not set";
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().string().ends_with(".reference.json")) check_reference(e.path());
}

TEST(Tokenizer, ByteLevelRoundTripsAnyText) {
  for (const char* name : {"gpt2", "llama3-style-mini"}) {
    Tokenizer tok = Tokenizer::load((kData / (std::string(name) + ".tokenizer.json")).string());
    for (const auto& c : read_json(kData / (std::string(name) + ".reference.json")).at("cases")) {
      std::string text = c.at("text");
      EXPECT_EQ(tok.decode(tok.encode(text, false)), text) << name;
    }
    // Random code points from several scripts, emoji and whitespace.
    std::mt19937 rng(7);
    const std::vector<std::pair<uint32_t, uint32_t>> ranges = {{0x20, 0x7E},    {0x09, 0x0D},     {0xA0, 0x24F},
                                                               {0x400, 0x4FF},  {0x4E00, 0x9FFF}, {0x1F300, 0x1FAFF},
                                                               {0x3000, 0x303F}};
    for (int round = 0; round < 200; ++round) {
      std::string text;
      int n = std::uniform_int_distribution<>(1, 40)(rng);
      for (int k = 0; k < n; ++k) {
        auto [lo, hi] = ranges[std::uniform_int_distribution<size_t>(0, ranges.size() - 1)(rng)];
        uint32_t cp = std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
        if (cp < 0x80)
          text += static_cast<char>(cp);
        else if (cp < 0x800)
          text += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        else if (cp < 0x10000)
          text += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                   static_cast<char>(0x80 | (cp & 0x3F))};
        else
          text += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                   static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
      auto ids = tok.encode(text, false);
      ASSERT_EQ(tok.decode(ids), text) << name;
      ASSERT_EQ(stream_all(tok, ids, true), text) << name;
    }
  }
}

TEST(Tokenizer, StreamHoldsBackPartialCharacters) {
  Tokenizer tok = Tokenizer::load((kData / "gpt2.tokenizer.json").string());
  auto ids = tok.encode("🎉");  // four bytes, more than one token in GPT-2
  ASSERT_GT(ids.size(), 1u);
  auto s = tok.stream();
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(s.push(ids[i]), "");
  EXPECT_EQ(s.push(ids.back()), "🎉");
  EXPECT_EQ(s.finish(), "");

  Tokenizer llama = Tokenizer::load((kData / "llama2.tokenizer.json").string());
  auto lids = llama.encode("Hi 𠀀 there", false);  // a rare character: <0xNN> byte tokens
  auto ls = llama.stream();
  std::vector<std::string> parts;
  for (int32_t id : lids) parts.push_back(ls.push(id));
  std::string joined;
  for (const auto& p : parts) {
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "partial bytes leaked: " << p;
    joined += p;
  }
  EXPECT_EQ(joined + ls.finish(), "Hi 𠀀 there");
}

TEST(Tokenizer, SpecialTokensAndStopIds) {
  Tokenizer gpt2 = Tokenizer::load((kData / "gpt2.tokenizer.json").string());
  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.encode("<|endoftext|>"), std::vector<int32_t>{50256});
  EXPECT_EQ(gpt2.eos_id(), 50256);
  EXPECT_TRUE(gpt2.is_special(50256));
  std::vector<int32_t> ids = {15496, 50256, 995};
  EXPECT_EQ(gpt2.decode(ids, true), "Hello world");
  EXPECT_EQ(gpt2.decode(ids, false), "Hello<|endoftext|> world");
  EXPECT_EQ(gpt2.token_to_id("Hello"), 15496);
  EXPECT_EQ(gpt2.id_to_token(995), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(gpt2.id_to_token(999999), "");

  Tokenizer llama2 = Tokenizer::load((kData / "llama2.tokenizer.json").string());
  EXPECT_EQ(llama2.bos_id(), 1);
  EXPECT_EQ(llama2.eos_id(), 2);
  EXPECT_EQ(llama2.stop_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(llama2.encode("Hi").front(), 1);
  EXPECT_NE(llama2.encode("Hi", false).front(), 1);
  EXPECT_EQ(llama2.token_to_id("<0x41>"), 3 + 0x41);  // byte tokens follow <unk> <s> </s>

  Tokenizer qwen = Tokenizer::load((kData / "qwen3-mini.tokenizer.json").string());
  auto im_end = qwen.token_to_id("<|im_end|>");
  auto eot = qwen.token_to_id("<|endoftext|>");
  ASSERT_TRUE(im_end && eot);
  EXPECT_FALSE(qwen.bos_id());
  auto stops = qwen.stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), *im_end), stops.end());
  EXPECT_NE(std::find(stops.begin(), stops.end(), *eot), stops.end());

  Tokenizer l3 = Tokenizer::load((kData / "llama3-style-mini.tokenizer.json").string());
  EXPECT_EQ(l3.bos_id(), l3.token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(l3.encode("x").front(), *l3.bos_id());
}

// Names like "<s>" count for bos/eos/stop only as added tokens: Qwen's vocab has "<s>" and
// "</s>" as ordinary text pieces.
TEST(Tokenizer, BosEosComeFromAddedTokensOnly) {
  TempDir dir;
  auto path = dir.write("tokenizer.json", R"({
    "added_tokens": [{"id": 4, "content": "<|im_end|>", "special": true}],
    "model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "a": 2, "b": 3}, "merges": []}})");
  Tokenizer tok = Tokenizer::load(path.string());
  EXPECT_FALSE(tok.bos_id());
  EXPECT_EQ(tok.eos_id(), 4);
  EXPECT_EQ(tok.stop_ids(), std::vector<int32_t>{4});
  EXPECT_EQ(tok.vocab_size(), 5);
  EXPECT_EQ(tok.encode("ab<|im_end|>"), (std::vector<int32_t>{2, 3, 4}));

  // tokenizer_config.json's explicit null means none, whatever the vocab holds.
  dir.write("tokenizer_config.json", R"({"bos_token": null, "eos_token": "</s>"})");
  Tokenizer configured = Tokenizer::load(path.string());
  EXPECT_FALSE(configured.bos_id());
  EXPECT_EQ(configured.eos_id(), 1);
  EXPECT_EQ(configured.stop_ids(), (std::vector<int32_t>{1, 4}));
}

// transformers rebuilds a Llama tokenizer's template from add_bos_token / add_eos_token.
TEST(Tokenizer, TokenizerConfigBosFlag) {
  TempDir dir;
  fs::copy_file(kData / "llama2.tokenizer.json", dir.path / "tokenizer.json");
  dir.write("tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true,
                                         "bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  Tokenizer tok = Tokenizer::load((dir.path / "tokenizer.json").string());
  auto ids = tok.encode("Hi");
  EXPECT_NE(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.eos_id(), 2);
}

TEST(Tokenizer, EncodeSpeedOnHeldoutText) {
  fs::path heldout = fs::path(NPUFORGE_SOURCE_DIR) / "tests/models/tiny_llama/heldout.txt";
  // Prints the speed only (benchmarks belong in bench/); checks that a longer text encodes.
  std::string text = fs::exists(heldout) ? read_text(heldout) : std::string();
  if (text.empty())
    for (const auto& c : read_json(kData / "gpt2.reference.json").at("cases")) text += c.at("text").get<std::string>();
  for (const char* name : {"gpt2", "llama2", "qwen3-mini"}) {
    Tokenizer tok = Tokenizer::load((kData / (std::string(name) + ".tokenizer.json")).string());
    auto t0 = std::chrono::steady_clock::now();
    size_t n = tok.encode(text, false).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[speed] %s: %zu bytes -> %zu tokens in %.3f s (%.2f MB/s, cold cache)\n", name, text.size(), n, s,
                text.size() / 1e6 / s);
    EXPECT_GT(n, 0u);
  }
}

TEST(Tokenizer, ErrorsAreOneLineNamingTheFile) {
  TempDir dir;
  auto expect_error = [](const fs::path& p, const std::string& needle) {
    try {
      Tokenizer::load(p.string());
      ADD_FAILURE() << "no error for " << p;
    } catch (const std::runtime_error& e) {
      std::string msg = e.what();
      EXPECT_TRUE(msg.starts_with(p.string() + ": ")) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  expect_error(dir.path / "missing.json", "cannot read the tokenizer (No such file or directory)");
  expect_error(dir.write("bad.json", "{\"model\": {\n  \"type\": \"BPE\",\n"), "invalid JSON");
  expect_error(dir.write("unigram.json", R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})"),
               "unsupported model type 'Unigram'");
  expect_error(dir.write("wordpiece.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"),
               "unsupported model type 'WordPiece'");
  expect_error(dir.write("badmerge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
               "not in the vocab");
  expect_error(dir.write("pretok.json", R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
                                   "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
               "unsupported pre_tokenizer type 'BertPreTokenizer'");
}
