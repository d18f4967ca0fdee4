// The package reader against mutated package.json files, beside the ONNX and manifest
// fuzzers: every mutation is refused with an error or read, never a crash or a hang.
// Byte mutations (flips, cuts, insertions) stop at the digest or the JSON parser; the
// structural ones replace each value of package.json in turn and seal it again, so they
// reach the checks behind the digest: open_package in-process for every value, and
// `npuforge run` and `inspect` for each top-level field.
#include <functional>
#include <random>

#include "fault_support.h"
#include "runtime/package.h"

using namespace nf::fault;
using nf::test::slurp;

namespace {

// One tiny_llama package per test process, built by the CLI.
const fs::path& package() {
  static const fs::path pkg = [] {
    fs::path d = scratch("fuzz_package");
    std::ofstream(d / "m.toml") << "[model]\nonnx = \"" << nf::test::model_dir("tiny_llama")
                                << "/model.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n";
    auto r = run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return d / "out" / "cpu";
  }();
  return pkg;
}

// open_package on the package with `text` as its package.json: "" when it was read, else
// the error. Anything but a std::exception escapes and fails the test.
std::string open_with(const std::string& text) {
  write_file(package() / "package.json", text);
  try {
    nf::host::Package p = nf::host::open_package(package());
    // What the CLI reads right after opening.
    (void)p.backend();
    (void)p.backend_options();
    (void)p.tokenizer();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Values a field may be replaced with: each JSON type, empty and extreme ones, paths out.
std::vector<nlohmann::json> hostile_values() {
  return {nullptr, true, 0, -1, 4294967297LL, 1e308, "", "../../../../etc/passwd", "/dev/zero",
          std::string(100000, 'a'), nlohmann::json::array(), nlohmann::json::object(),
          nlohmann::json::array({nlohmann::json::array({nlohmann::json::array()})})};
}

// Every JSON pointer of `j`.
void pointers(const nlohmann::json& j, const nlohmann::json::json_pointer& at, std::vector<nlohmann::json::json_pointer>* out) {
  out->push_back(at);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) pointers(v, at / k, out);
  else if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) pointers(j[i], at / i, out);
}

std::string sealed(nlohmann::json meta) {
  meta["digest"] = nf::host::package_digest(meta);
  return meta.dump(2);
}

}  // namespace

TEST(FaultPackageFuzz, ByteMutationsAreRefused) {
  const std::string good = slurp(package() / "package.json");
  ASSERT_EQ(open_with(good), "");
  std::mt19937 rng(15);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = good;
    std::uniform_int_distribution<size_t> pos(0, text.size() - 1);
    switch (i % 3) {
      case 0: text[pos(rng)] ^= static_cast<char>(1 + rng() % 255); break;
      case 1: text.resize(pos(rng)); break;
      default: text.insert(pos(rng), std::string(1 + rng() % 8, static_cast<char>(rng() % 128))); break;
    }
    if (text == good) continue;
    // A change that leaves the JSON equal (whitespace) may be read; any other is refused.
    const bool same = nlohmann::json::parse(text, nullptr, false) == nlohmann::json::parse(good);
    const std::string err = open_with(text);
    if (!same) {
      EXPECT_NE(err, "") << "mutation " << i << " was read";
    }
    if (!err.empty()) ++refused;
  }
  write_file(package() / "package.json", good);
  EXPECT_GT(refused, 250);
  std::printf("%d of 300 byte mutations refused\n", refused);
}

TEST(FaultPackageFuzz, EveryFieldReplacedAndResealed) {
  const std::string good = slurp(package() / "package.json");
  const auto meta = nlohmann::json::parse(good);
  std::vector<nlohmann::json::json_pointer> where;
  pointers(meta, nlohmann::json::json_pointer(), &where);
  int cases = 0, refused = 0;
  for (const auto& p : where) {
    if (p.empty() || p.to_string() == "/digest") continue;
    for (const auto& v : hostile_values()) {
      nlohmann::json m = meta;
      m[p] = v;
      const std::string err = open_with(sealed(m));
      ++cases;
      if (!err.empty()) ++refused;
      EXPECT_EQ(err.find('\n'), std::string::npos) << p.to_string() << ": " << err;
    }
  }
  write_file(package() / "package.json", good);
  EXPECT_EQ(open_with(good), "");
  std::printf("%d mutations, %d refused, the rest read\n", cases, refused);
}

// Each top-level field replaced (and resealed), then run and inspect: a clean error or a
// run, never a crash.
class FaultPackageField : public ::testing::TestWithParam<std::string> {};

TEST_P(FaultPackageField, RunAndInspectNeverCrash) {
  const std::string good = slurp(package() / "package.json");
  const auto meta = nlohmann::json::parse(good);
  for (const auto& v : hostile_values()) {
    nlohmann::json m = meta;
    m[GetParam()] = v;
    write_file(package() / "package.json", sealed(m));
    for (auto r : {run({"run", package().string(), "--prompt", "Once", "--max-new-tokens", "1", "-q"}, {}, 60),
                   run({"inspect", package().string()}, {}, 60)}) {
      EXPECT_LT(r.exit_code, 128) << GetParam() << " = " << v.dump().substr(0, 40) << ": " << r.err;
      if (r.exit_code != 0) {
        EXPECT_NE(r.err.find("npuforge: error:"), std::string::npos) << r.err;
        EXPECT_EQ(nf::test::line_count(r.err), 1) << GetParam() << " = " << v.dump().substr(0, 40) << ":\n" << r.err;
      }
    }
  }
  write_file(package() / "package.json", good);
}

INSTANTIATE_TEST_SUITE_P(Fields, FaultPackageField,
                         ::testing::Values("backend", "config", "created_by", "files", "format", "graphs", "metadata",
                                           "source", "speculative", "stages", "target", "tokenizer", "version"));

// An eaglet package with its draft's depth loop as one graph (role draft_tree): each field of
// the tree role and of the draft's tree request replaced (and resealed), then an eaglet run
// and inspect: a run, or one clean error line; never a crash or a wrong-shaped tree used.
TEST(FaultPackageFuzz, DraftTreeRoleFieldsReplacedAndResealed) {
  const fs::path tiny = nf::test::model_dir("tiny_llama");
  const fs::path d = scratch("fuzz_draft_tree");
  std::ofstream(d / "m.toml") << "[model]\nonnx = \"" << (tiny / "model.onnx").string()
                              << "\"\n\n[[transform]]\nplugin = \"hidden_states\"\n\n[[transform]]\nplugin = \"arcl\"\n"
                                 "arn = [1, 8]\ncontext_length = [64]\n\n[speculative]\ndecoder = \"eaglet\"\ndraft = \""
                              << (tiny / "eaglet").string() << "\"\n\n[targets.cpu]\nbackend = \"cpu\"\n";
  auto built = run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(built.exit_code, 0) << built.err;
  const fs::path pkg = d / "out" / "cpu";
  const std::string good = slurp(pkg / "package.json");
  const auto meta = nlohmann::json::parse(good);
  using P = nlohmann::json::json_pointer;
  std::vector<P> where{P("/metadata/roles/draft_tree"), P("/metadata/roles/draft_tree/shares_cache_of"),
                       P("/metadata/roles/draft_tree/graphs"), P("/metadata/roles/draft_tree/io/variants"),
                       P("/metadata/roles/draft_tree/io/layers")};
  for (const char* k : {"", "/depth", "/branches", "/logit_scale", "/feature_input"})
    for (const char* role : {"draft", "draft_tree"}) where.push_back(P("/metadata/roles/" + std::string(role) + "/tree" + k));
  const std::vector<nlohmann::json> values{nullptr, 0, -1, 3, "", "draft", nlohmann::json::array(), nlohmann::json::object()};
  for (const P& p : where) {
    ASSERT_TRUE(meta.contains(p)) << p.to_string();
    for (const auto& v : values) {
      nlohmann::json m = meta;
      m[p] = v;
      write_file(pkg / "package.json", sealed(m));
      for (auto r : {run({"run", pkg.string(), "--prompt-ids", "1,5,9", "--max-new-tokens", "6", "-q"}, {}, 60),
                     run({"inspect", pkg.string()}, {}, 60)}) {
        EXPECT_LT(r.exit_code, 128) << p.to_string() << " = " << v.dump() << ": " << r.err;
        if (r.exit_code != 0) {
          EXPECT_EQ(nf::test::line_count(r.err), 1) << p.to_string() << " = " << v.dump() << ":\n" << r.err;
        }
      }
    }
  }
  // A tree graph that does not share the draft's cache would draft from a cache without the
  // rows the draft's own graphs took: refused, not used.
  nlohmann::json m = meta;
  m["metadata"]["roles"]["draft_tree"].erase("shares_cache_of");
  write_file(pkg / "package.json", sealed(m));
  auto r = run({"run", pkg.string(), "--prompt-ids", "1,5,9", "--max-new-tokens", "12", "-q"}, {}, 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("does not share the draft's KV cache"), std::string::npos) << r.err;
  write_file(pkg / "package.json", good);
  r = run({"run", pkg.string(), "--prompt-ids", "1,5,9", "--max-new-tokens", "12", "-q"}, {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}
