// A row's result in integer mode must not depend on its layout. One aries package of
// tiny_llama (minmax calibration, aries' default int8 activations, arcl AR 1/32, CL 256) is
// run graph by graph through the backend session with hand-made inputs: the same 10-token
// sequence as rows 0..9 of an AR 32 pass (reference), as rows 7..16 (another row slot and
// other key columns), with its first 6 tokens' keys/values in scattered cache slots and the
// last 4 as rows, and its last token alone through AR 1 with 9 cached ancestors. The last
// token's logits and the rows' KV must equal the reference bit for bit (an integer NPU
// accumulates in integers, so its reductions do not depend on where a value sits).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/cli_support.h"
#include "registry/registry.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "support/plugins.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = test::source_dir() + "/tests/models/tiny_llama";
constexpr int64_t kCL = 256, kLayers = 4, kKvHeads = 4, kHeadDim = 32;
constexpr float kMasked = -65504.f;
const std::vector<int64_t> kTokens = {1, 1005, 291, 260, 5, 9, 450, 1536, 310, 42};


// The aries int8 package, built once per process.
host::BackendSession& session() {
  static std::unique_ptr<host::BackendSession> s = [] {
    fs::path dir = test::process_dir("exact_int") / "aries";
    fs::create_directories(dir);
    std::ofstream(dir / "manifest.toml")
        << "[model]\nonnx = \"" << kTiny << "/model.onnx\"\nconfig = \"" << kTiny << "/config.json\"\ntokenizer = \""
        << kTiny << "/tokenizer.json\"\n\n"
        << "[calibration]\ntext = \"" << kTiny << "/calibration.txt\"\nnum_samples = 4\nsequence_length = 64\n\n"
        << "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\nactivation_bw = 16\n\n"
        << "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [256]\n\n"
        << "[targets.aries]\nbackend = \"aries\"\n";
    auto r = test::npuforge({"build", (dir / "manifest.toml").string(), "--out", (dir / "out").string(), "--no-cache", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    host::Package pkg = host::open_package(dir / "out" / "aries");
    return host::BackendSession::open_artifacts(*test::plugins().find(NF_KIND_BACKEND, pkg.backend()), pkg.backend_options(),
                                                pkg.artifacts().string());
  }();
  return *s;
}

// One KV row: per layer, key and value [kv_heads, head_dim].
using KvRow = std::vector<std::vector<float>>;  // [2 * layer + (0 key | 1 value)]

// Inputs of one pass of the AR `ar` graph. Rows not given a token are padding (id 0,
// position 0) that sees only itself.
struct Pass {
  int64_t ar;
  std::vector<int64_t> ids, pos;
  std::vector<float> mask;                 // [ar, CL], additive
  std::vector<std::vector<float>> past;    // per layer and key/value: [kv_heads, CL - ar, head_dim]

  explicit Pass(int64_t ar_) : ar(ar_), ids(ar_, 0), pos(ar_, 0), mask(ar_ * kCL, kMasked), past(2 * kLayers) {
    for (auto& p : past) p.assign(kKvHeads * (kCL - ar) * kHeadDim, 0.f);
    for (int64_t r = 0; r < ar; ++r) see_row(r, r);
  }
  void see_row(int64_t row, int64_t other_row) { mask[row * kCL + kCL - ar + other_row] = 0; }
  void see_slot(int64_t row, int64_t slot) { mask[row * kCL + slot] = 0; }
  void put_cache(int64_t slot, const KvRow& kv) {
    for (size_t t = 0; t < past.size(); ++t)
      for (int64_t h = 0; h < kKvHeads; ++h)
        std::memcpy(&past[t][(h * (kCL - ar) + slot) * kHeadDim], &kv[t][h * kHeadDim], kHeadDim * sizeof(float));
  }
};

struct Result {
  std::vector<float> logits;             // [ar, vocab]
  std::vector<std::vector<float>> kv;    // present per layer and key/value: [kv_heads, ar, head_dim]
  int64_t vocab = 0, ar = 0;
  std::vector<float> logits_row(int64_t r) const { return {logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab}; }
  KvRow kv_row(int64_t r) const {
    KvRow row(kv.size());
    for (size_t t = 0; t < kv.size(); ++t)
      for (int64_t h = 0; h < kKvHeads; ++h)
        row[t].insert(row[t].end(), kv[t].begin() + (h * ar + r) * kHeadDim, kv[t].begin() + (h * ar + r + 1) * kHeadDim);
    return row;
  }
};

Result run(const Pass& p) {
  auto i64 = [&](const std::vector<int64_t>& v) {
    return ir::make_tensor_ref(ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {1, p.ar}, v));
  };
  std::vector<host::NamedTensor> in{{"input_ids", i64(p.ids)},
                                    {"position_ids", i64(p.pos)},
                                    {"attention_mask", ir::make_tensor_ref(ir::Tensor::from<float>(
                                                           NF_DTYPE_FLOAT32, {1, 1, p.ar, kCL}, p.mask))}};
  std::vector<std::string> out{"logits"};
  for (int64_t l = 0; l < kLayers; ++l)
    for (const char* kv : {"key", "value"}) {
      std::string suffix = std::to_string(l) + "." + kv;
      in.push_back({"past_key_values." + suffix, ir::make_tensor_ref(ir::Tensor::from<float>(
                                                     NF_DTYPE_FLOAT32, {1, kKvHeads, kCL - p.ar, kHeadDim},
                                                     p.past[2 * l + (kv[0] == 'v')]))});
      out.push_back("present." + suffix);
    }
  auto t = session().run("ar" + std::to_string(p.ar) + "_cl" + std::to_string(kCL), in, out);
  Result r;
  r.ar = p.ar;
  auto vec = [](const host::TensorPtr& x) {
    const float* d = x->tensor.as<float>();
    return std::vector<float>(d, d + x->tensor.numel());
  };
  r.logits = vec(t[0]);
  r.vocab = static_cast<int64_t>(r.logits.size()) / p.ar;
  for (size_t i = 1; i < t.size(); ++i) r.kv.push_back(vec(t[i]));
  return r;
}

// Tokens kTokens[first..] in rows row0.. of an AR 32 pass, causal among themselves; each
// row also sees the given cache slots.
Pass block_pass(int64_t row0, size_t first, const std::vector<int64_t>& slots = {}) {
  Pass p(32);
  for (size_t i = first; i < kTokens.size(); ++i) {
    int64_t r = row0 + static_cast<int64_t>(i - first);
    p.ids[r] = kTokens[i];
    p.pos[r] = static_cast<int64_t>(i);
    for (int64_t j = row0; j < r; ++j) p.see_row(r, j);
    for (int64_t s : slots) p.see_slot(r, s);
  }
  return p;
}

// Bit-for-bit equality, with the first differing index and values on failure.
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      size_t n = 0;
      for (size_t j = 0; j < a.size(); ++j) n += std::memcmp(&a[j], &b[j], sizeof(float)) != 0;
      return ::testing::AssertionFailure() << n << " of " << a.size() << " values differ; first at " << i << ": "
                                           << a[i] << " vs " << b[i];
    }
  return ::testing::AssertionSuccess();
}

void expect_same_kv(const KvRow& a, const KvRow& b, const std::string& what) {
  for (size_t t = 0; t < a.size(); ++t)
    EXPECT_TRUE(same_bits(a[t], b[t])) << what << ", layer " << t / 2 << (t % 2 ? " value" : " key");
}

const Result& reference() {
  static Result r = run(block_pass(0, 0));
  return r;
}

}  // namespace

// Rows 7..16 instead of 0..9: other row slots, the keys in other columns of the pass.
TEST(ExactInt, RowSlotDoesNotChangeResults) {
  const Result& ref = reference();
  Result moved = run(block_pass(7, 0));
  for (int64_t i = 0; i < static_cast<int64_t>(kTokens.size()); ++i) {
    EXPECT_TRUE(same_bits(moved.logits_row(7 + i), ref.logits_row(i))) << "logits of token " << i;
    expect_same_kv(moved.kv_row(7 + i), ref.kv_row(i), "KV of token " + std::to_string(i));
  }
}

// Tokens 0..5 from cache slots (scattered, in reverse order), tokens 6..9 as rows 0..3.
TEST(ExactInt, CachedAncestorsEqualInBlockAncestors) {
  const Result& ref = reference();
  std::vector<int64_t> slots;
  Pass p = block_pass(0, 6);
  for (int64_t i = 0; i < 6; ++i) {
    slots.push_back(200 - 37 * i);
    p.put_cache(slots.back(), ref.kv_row(i));
  }
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t s : slots) p.see_slot(r, s);
  Result split = run(p);
  for (int64_t i = 6; i < 10; ++i) {
    EXPECT_TRUE(same_bits(split.logits_row(i - 6), ref.logits_row(i))) << "logits of token " << i;
    expect_same_kv(split.kv_row(i - 6), ref.kv_row(i), "KV of token " + std::to_string(i));
  }
}

// The last token alone through AR 1 (the GEMV path), its 9 ancestors in cache slots.
TEST(ExactInt, ArVariantDoesNotChangeResults) {
  const Result& ref = reference();
  Pass p(1);
  p.ids[0] = kTokens[9];
  p.pos[0] = 9;
  for (int64_t i = 0; i < 9; ++i) {
    int64_t slot = (i * 53 + 11) % (kCL - 1);
    p.put_cache(slot, ref.kv_row(i));
    p.see_slot(0, slot);
  }
  Result one = run(p);
  EXPECT_TRUE(same_bits(one.logits_row(0), ref.logits_row(9))) << "logits of token 9";
  expect_same_kv(one.kv_row(0), ref.kv_row(9), "KV of token 9");
}
