// StaticRunner against DynamicRunner on the same weights: a hand-built static decoder
// (tests/runner/data, made by make_static_decoder.py) in the arcl graph contract, in the
// hf and htp KV layouts, cut into parts, and with a sliding-window layer; and, once the
// arcl transform is installed, on packages that arcl builds from the test models.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/util.h"
#include "manifest/manifest.h"
#include "manifest/schema.h"
#include "onnx/onnx_io.h"
#include "pipeline/pipeline.h"
#include "runner/generate.h"
#include "runner/static_runner.h"
#include "runtime/package.h"
#include "support/packages.h"

namespace fs = std::filesystem;
using namespace nf;
using host::Runner;

namespace {

const fs::path kData = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "runner" / "data";
const host::PluginInfo& cpu() {
  const host::PluginInfo* p = test::plugins().find(NF_KIND_BACKEND, "cpu");
  if (!p) throw std::runtime_error("cpu backend not built in " + test::plugin_dir().string());
  return *p;
}

nlohmann::json defaults(const host::PluginInfo& p) {
  nlohmann::json o = nlohmann::json::object();
  manifest::validate_json(p.schema, o);
  return o;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// A model set, a cpu session over it, and a runner; destroyed in reverse order.
struct Model {
  std::unique_ptr<ir::ModelSet> ms;
  std::unique_ptr<host::BackendSession> session;
  std::unique_ptr<Runner> runner;
  host::StaticRunner& stat() { return dynamic_cast<host::StaticRunner&>(*runner); }
};

// A dynamic HF-layout export through the plain runner.
Model dynamic_model_at(const fs::path& onnx) {
  Model m;
  m.ms = std::make_unique<ir::ModelSet>();
  m.ms->graphs.push_back(onnx_io::load_model(onnx.string()));
  m.ms->graphs[0]->name = "model";
  m.session = host::BackendSession::open_model_set(cpu(), defaults(cpu()), *m.ms);
  m.runner = host::make_runner(*m.session, host::graph_specs(*m.ms), nullptr);
  return m;
}

Model dynamic_model(const std::string& file) { return dynamic_model_at(kData / file); }

// The static graphs of one set (<set>__<graph>.onnx) with <set>.io.json as metadata io.
Model static_model(const std::string& set, nlohmann::json io = nullptr) {
  Model m;
  m.ms = std::make_unique<ir::ModelSet>();
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kData))
    if (e.path().filename().string().rfind(set + "__", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    m.ms->graphs.push_back(onnx_io::load_model(f.string()));
    m.ms->graphs.back()->name = f.stem().string().substr(set.size() + 2);
  }
  if (io.is_null()) io = read_json(kData / (set + ".io.json"));
  m.ms->metadata["io"] = io.dump();
  m.session = host::BackendSession::open_model_set(cpu(), defaults(cpu()), *m.ms);
  m.runner = host::make_runner(*m.session, host::graph_specs(*m.ms), {{"io", io}});
  return m;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int vocab = 96) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// Greedy decoding step by step on both runners until the context holds `total` tokens:
// same tokens, logits within 1e-4 at every step. Returns the largest logit difference.
float compare_greedy(Runner& stat, Runner& dyn, const std::vector<int32_t>& prompt, size_t total) {
  auto ls = stat.append(prompt, true), ld = dyn.append(prompt, true);
  float worst = max_diff(ls, ld);
  EXPECT_LT(worst, 1e-4f) << "prefill, all rows";
  size_t vocab = stat.vocab_size();
  ls.erase(ls.begin(), ls.end() - static_cast<long>(vocab));
  ld.erase(ld.begin(), ld.end() - static_cast<long>(vocab));
  while (stat.n_past() < total) {
    int32_t ts = host::argmax(ls), td = host::argmax(ld);
    EXPECT_EQ(ts, td) << "at n_past " << stat.n_past();
    if (ts != td) break;
    ls = stat.append({&ts, 1});
    ld = dyn.append({&td, 1});
    float d = max_diff(ls, ld);
    EXPECT_LT(d, 1e-4f) << "at n_past " << stat.n_past();
    worst = std::max(worst, d);
  }
  return worst;
}

// The path of each row (root first), from parent pointers.
std::vector<std::vector<int32_t>> paths_of(const std::vector<int32_t>& parents) {
  std::vector<std::vector<int32_t>> paths(parents.size());
  for (size_t r = 0; r < parents.size(); ++r) {
    if (parents[r] >= 0) paths[r] = paths[static_cast<size_t>(parents[r])];
    paths[r].push_back(static_cast<int32_t>(r));
  }
  return paths;
}

// One tree in one pass: each row's logits equal those of its path run alone (prompt, then
// the path's tokens) through the plain runner. Returns the largest difference.
float compare_tree(Runner& stat, Runner& dyn, const std::vector<int32_t>& prompt, const std::vector<int32_t>& parents,
                   uint32_t seed) {
  const size_t vocab = stat.vocab_size(), n = parents.size();
  auto tokens = random_tokens(n, seed, static_cast<int>(vocab));
  stat.reset();
  stat.append(prompt);
  const int64_t passes = stat.forward_passes();
  std::vector<float> logits(n * vocab);
  stat.forward(tokens.data(), parents.data(), n, logits.data());
  EXPECT_EQ(stat.forward_passes(), passes + 1) << "a tree is one pass";
  EXPECT_EQ(stat.n_past(), prompt.size()) << "forward does not commit";
  float worst = 0;
  auto paths = paths_of(parents);
  for (size_t r = 0; r < n; ++r) {
    std::vector<int32_t> seq = prompt;
    for (int32_t p : paths[r]) seq.push_back(tokens[static_cast<size_t>(p)]);
    dyn.reset();
    auto want = dyn.append(seq);
    std::vector<float> got(logits.begin() + static_cast<long>(r * vocab), logits.begin() + static_cast<long>((r + 1) * vocab));
    float d = max_diff(got, want);
    EXPECT_LT(d, 1e-4f) << "row " << r;
    worst = std::max(worst, d);
  }
  return worst;
}

const std::vector<std::vector<int32_t>> kTrees = {
    {-1, 0, 1, 2},    // a chain
    {-1, -1, -1, -1}, // a fan-out at the root
    {-1, 0, 0, 2},    // two levels, branches of unequal depth
    {-1, 0, 0},       // padded to AR 4
    {-1},             // one row: AR 1
};

}  // namespace

class StaticSet : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dyn_file() const { return GetParam() == "swa" ? "swa.onnx" : "dense.onnx"; }
  // swa: a prompt longer than the sliding cache (8 slots at AR 4), so the window shifts.
  std::vector<int32_t> prompt() const { return random_tokens(GetParam() == "swa" ? 13 : 7, 7); }
};

TEST_P(StaticSet, GreedyEqualsDynamicRunner) {
  Model s = static_model(GetParam()), d = dynamic_model(dyn_file());
  EXPECT_EQ(s.runner->max_rows(), 4u);
  EXPECT_EQ(s.runner->vocab_size(), 96u);
  float worst = compare_greedy(*s.runner, *d.runner, prompt(), 32);
  EXPECT_EQ(s.runner->n_past(), 32u);
  std::cout << GetParam() << ": greedy to 32 tokens, max |logit diff| " << worst << "\n";
  // The context is full: every variant's CL is used up.
  int32_t t = 1;
  try {
    s.runner->append({&t, 1});
    FAIL() << "no error past the context";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("context full: 32 tokens"), std::string::npos) << e.what();
  }
}

TEST_P(StaticSet, TreeRowsEqualTheirPathsAlone) {
  Model s = static_model(GetParam()), d = dynamic_model(dyn_file());
  uint32_t seed = 100;
  for (const auto& tree : kTrees) {
    float worst = compare_tree(*s.runner, *d.runner, prompt(), tree, seed++);
    std::cout << GetParam() << ": tree of " << tree.size() << " rows (" << s.stat().last_variant()
              << "), max |logit diff| " << worst << "\n";
  }
  // Deeper in the context (CL 32 variants, and for swa a window that has moved on).
  auto long_prompt = random_tokens(25, 9);
  float worst = compare_tree(*s.runner, *d.runner, long_prompt, {-1, 0, -1, 2}, 7);
  EXPECT_EQ(s.stat().last_variant().rfind("ar4_cl32", 0), 0u) << s.stat().last_variant();
  std::cout << GetParam() << ": tree after 25 tokens, max |logit diff| " << worst << "\n";
}

TEST_P(StaticSet, CommitThenContinueEqualsPlainDecoding) {
  Model s = static_model(GetParam()), d = dynamic_model(dyn_file());
  const std::vector<int32_t> parents{-1, 0, 0, 2};
  auto tokens = random_tokens(4, 55);
  auto p = prompt();
  s.runner->append(p);
  std::vector<float> logits(4 * 96);
  s.runner->forward(tokens.data(), parents.data(), 4, logits.data());
  const int32_t path[] = {0, 2, 3};
  const int64_t passes = s.runner->forward_passes();
  s.runner->commit(path, 3);
  EXPECT_EQ(s.runner->forward_passes(), passes) << "commit runs no pass";
  EXPECT_EQ(s.runner->n_past(), p.size() + 3);

  std::vector<int32_t> seq = p;
  for (int32_t r : path) seq.push_back(tokens[static_cast<size_t>(r)]);
  auto ld = d.runner->append(seq);
  std::vector<float> ls(logits.begin() + 3 * 96, logits.end());
  EXPECT_LT(max_diff(ls, ld), 1e-4f);
  float worst = 0;
  for (int step = 0; step < 10; ++step) {
    int32_t ts = host::argmax(ls), td = host::argmax(ld);
    ASSERT_EQ(ts, td) << "step " << step;
    ls = s.runner->append({&ts, 1});
    ld = d.runner->append({&td, 1});
    worst = std::max(worst, max_diff(ls, ld));
  }
  EXPECT_LT(worst, 1e-4f);
  std::cout << GetParam() << ": commit of a 3-row path, then 10 greedy steps, max |logit diff| " << worst << "\n";
}

// runner_forward_scratch: a tree grown one depth per call, each row run once and kept as a
// scratch row, scores as the whole tree in one forward; nothing is committed, a plain forward
// drops the scratch rows. A sliding-window set cannot keep rows: the host API says
// NF_STATUS_UNSUPPORTED.
TEST_P(StaticSet, ScratchRowsScoreAsTheTreeInOnePass) {
  Model s = static_model(GetParam());
  Runner& r = *s.runner;
  const size_t V = r.vocab_size();
  const auto tokens = random_tokens(4, 31);
  const std::vector<int32_t> parents{-1, 0, 0, 2};  // depth 0: row 0; 1: rows 1, 2; 2: row 3
  r.reset();
  r.append(prompt());
  std::vector<float> whole(4 * V), got(4 * V);
  r.forward(tokens.data(), parents.data(), 4, whole.data());
  const nf_host_api* api = host::host_api();
  if (!r.keeps_scratch()) {
    nf_status* st = api->runner_forward_scratch(&r, tokens.data(), parents.data(), 1, got.data());
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(api->status_code(st), NF_STATUS_UNSUPPORTED);
    api->status_release(st);
    return;
  }
  const size_t n_past = r.n_past();
  // Parents number the kept rows first, then the call's: the tree's own numbering.
  ASSERT_EQ(api->runner_forward_scratch(&r, tokens.data(), parents.data(), 1, got.data()), nullptr);
  ASSERT_EQ(api->runner_forward_scratch(&r, tokens.data() + 1, parents.data() + 1, 2, got.data() + V), nullptr);
  ASSERT_EQ(api->runner_forward_scratch(&r, tokens.data() + 3, parents.data() + 3, 1, got.data() + 3 * V), nullptr);
  EXPECT_LT(max_diff(got, whole), 1e-4f);
  EXPECT_EQ(r.n_past(), n_past);
  const int32_t past_the_kept = 4;
  EXPECT_THROW(r.forward_scratch(tokens.data(), &past_the_kept, 1, got.data()), std::runtime_error);
  const int32_t first = 0;
  EXPECT_THROW(r.commit(&first, 1), std::runtime_error);  // scratch rows are never committed
  r.forward(tokens.data(), parents.data(), 4, got.data());
  EXPECT_EQ(got, whole);
  // Kept rows take context slots: a full context refuses more.
  r.reset();
  r.append(random_tokens(28, 3));
  ASSERT_EQ(api->runner_forward_scratch(&r, tokens.data(), parents.data(), 3, got.data()), nullptr);
  EXPECT_EQ(r.rows_available(), 1u);
  const std::vector<int32_t> deeper{2, 3};
  EXPECT_THROW(r.forward_scratch(tokens.data() + 2, deeper.data(), 2, got.data()), std::runtime_error);
  EXPECT_EQ(api->runner_forward_scratch(&r, tokens.data() + 2, deeper.data(), 1, got.data()), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Sets, StaticSet, ::testing::Values("hf", "htp", "split", "swa"));

// Every way generation ends is a normal stop with its reason: a stop token (kept), the
// token budget, the end of the context (32 on the "hf" set; the last token needs no
// forward), the cancel flag of SIGINT/SIGTERM (checked between tokens).
TEST(Generate, StopReasons) {
  Model s = static_model("hf");
  const std::vector<int32_t> prompt = random_tokens(7, 7);
  auto run = [&](int max_new, std::vector<int32_t> stops, host::GenerateStats* st) {
    s.runner->reset();
    host::Sampler greedy({});
    return host::generate(*s.runner, prompt, max_new, greedy, stops, nullptr, st);
  };
  host::GenerateStats st;
  auto all = run(100, {}, &st);
  EXPECT_EQ(st.stop_reason, "context_full");
  EXPECT_EQ(all.size(), 32u - 7u + 1u);
  EXPECT_EQ(s.runner->n_past(), 32u);
  EXPECT_EQ(run(5, {}, &st).size(), 5u);
  EXPECT_EQ(st.stop_reason, "max_new_tokens");
  auto to_eos = run(100, {all[3]}, &st);
  EXPECT_EQ(st.stop_reason, "eos");
  EXPECT_EQ(to_eos.back(), all[3]);
  EXPECT_LE(to_eos.size(), 4u);
  int seen = 0;
  s.runner->reset();
  host::Sampler greedy({});
  auto interrupted = host::generate(*s.runner, prompt, 100, greedy, {}, [&](int32_t) {
    if (++seen == 3) host::cancel_flag() = true;  // as the signal handler does
  }, &st);
  host::cancel_flag() = false;
  EXPECT_EQ(st.stop_reason, "interrupted");
  EXPECT_EQ(interrupted, std::vector<int32_t>(all.begin(), all.begin() + 3));
}

TEST(StaticRunner, ChoosesVariants) {
  Model s = static_model("hf");
  s.runner->append(random_tokens(7, 1));  // 4 + 3 (padded) rows of AR 4
  EXPECT_EQ(s.runner->forward_passes(), 2);
  EXPECT_EQ(s.stat().last_variant(), "ar4_cl16");
  int32_t t = 3;
  s.runner->append({&t, 1});
  EXPECT_EQ(s.stat().last_variant(), "ar1_cl16");
  s.runner->append(random_tokens(8, 2));  // n_past 8 -> 12 -> 16: two AR 4 chunks, CL 16 just fits
  EXPECT_EQ(s.runner->n_past(), 16u);
  EXPECT_EQ(s.stat().last_variant(), "ar4_cl16");
  s.runner->append({&t, 1});  // n_past 16: needs CL 32
  EXPECT_EQ(s.stat().last_variant(), "ar1_cl32");
  EXPECT_EQ(s.runner->forward_passes(), 2 + 1 + 2 + 1);
  // 13 more tokens at n_past 17: three AR 4 chunks (to 29), then one row of AR 1.
  s.runner->append(random_tokens(13, 3));
  EXPECT_EQ(s.runner->n_past(), 30u);
  EXPECT_EQ(s.stat().last_variant(), "ar1_cl32");
}

TEST(StaticRunner, ClearErrors) {
  Model s = static_model("hf");
  s.runner->append(random_tokens(5, 1));
  std::vector<int32_t> tokens(5, 1), parents{-1, 0, 1, 2, 3};
  std::vector<float> logits(5 * 96);
  try {
    s.runner->forward(tokens.data(), parents.data(), 5, logits.data());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "runner: 5 rows exceed the largest AR variant (4 rows per pass)");
  }
  parents = {-1, 1, 0, 0};
  EXPECT_THROW(s.runner->forward(tokens.data(), parents.data(), 4, logits.data()), std::runtime_error);
  parents = {-1, 0, 0, 2};
  s.runner->forward(tokens.data(), parents.data(), 4, logits.data());
  const int32_t not_a_path[] = {0, 3};
  EXPECT_THROW(s.runner->commit(not_a_path, 2), std::runtime_error);
  const int32_t no_root[] = {2, 3};
  EXPECT_THROW(s.runner->commit(no_root, 2), std::runtime_error);
  // Rows that do not fit: 30 in the cache + 4 rows > 32, and AR 1 cannot hold 4 rows.
  s.runner->reset();
  s.runner->append(random_tokens(30, 2));
  try {
    s.runner->forward(tokens.data(), parents.data(), 4, logits.data());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("context full: 32 tokens"), std::string::npos) << e.what();
  }
  // A single row still fits.
  s.runner->forward(tokens.data(), parents.data(), 1, logits.data());
}

TEST(StaticRunner, LastOutputIsThePassHiddenStates) {
  Model s = static_model("split");
  s.runner->append(random_tokens(6, 1));
  std::vector<int32_t> tokens{5, 6, 7}, parents{-1, 0, 0};
  std::vector<float> logits(3 * 96);
  s.runner->forward(tokens.data(), parents.data(), 3, logits.data());
  nf_tensor* h = s.runner->last_output("hidden_states");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(host::unwrap(h)->tensor.dims, (std::vector<int64_t>{1, 4, 32}));
  EXPECT_EQ(s.runner->last_output("no_such_output"), nullptr);
}

TEST(StaticRunner, ShortSlidingCacheUsesOnlyExactVariants) {
  auto io = read_json(kData / "swa.io.json");
  io["sliding_window"] = 12;  // AR 4 has 8 sliding slots: exact only while n_past <= 8
  Model s = static_model("swa", io);
  s.runner->append(random_tokens(13, 1));  // AR 4 at n_past 0, 4, 8; then AR 1 (11 slots)
  EXPECT_EQ(s.runner->forward_passes(), 4);
  EXPECT_EQ(s.stat().last_variant(), "ar1_cl32_scl12");
  std::vector<int32_t> tokens{1, 2}, parents{-1, 0};
  std::vector<float> logits(2 * 96);
  try {
    s.runner->forward(tokens.data(), parents.data(), 2, logits.data());
    FAIL() << "a 2-row pass has no exact variant after 13 tokens";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("positions the window needs"), std::string::npos) << e.what();
  }
  s.runner->forward(tokens.data(), parents.data(), 1, logits.data());
}

TEST(StaticRunner, MetadataErrors) {
  auto io = read_json(kData / "hf.io.json");
  io["variants"][0]["graph"] = "ar2_cl16";
  try {
    static_model("hf", io);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'ar2_cl16' is not among"), std::string::npos) << e.what();
  }
  io = read_json(kData / "htp.io.json");
  io["kv_layout"] = "hf";  // the graphs' transposed key cache does not match
  EXPECT_THROW(static_model("htp", io), std::runtime_error);
  // Several graphs without static metadata: no runner fits.
  Model s = static_model("hf");
  EXPECT_THROW(host::make_runner(*s.session, host::graph_specs(*s.ms), nullptr), std::runtime_error);

  // A cache input whose layer is not a number (or too long to be one) is refused by name,
  // not parsed into a crash.
  for (const char* bad : {"past_key_values.x.key", "past_key_values.99999999999999999999.key", "past_key_values..key"}) {
    nlohmann::json specs = host::graph_specs(*s.ms);
    for (auto& g : specs)
      for (auto& in : g["inputs"])
        if (in["name"] == "past_key_values.0.key") in["name"] = bad;
    try {
      host::StaticIO::parse(read_json(kData / "hf.io.json"), specs);
      FAIL() << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // A cache input of a layer outside the io's layers (one more, or the io's first_layer past
  // the graphs' numbering) is refused when the package is opened; a pass would have indexed
  // the runner's cache with it.
  nlohmann::json specs = host::graph_specs(*s.ms), shifted = read_json(kData / "hf.io.json");
  specs[0]["inputs"].push_back({{"name", "past_key_values.7.key"}, {"dtype", "float32"}, {"shape", {1, 2, 15, 8}}});
  shifted["first_layer"] = 1;
  for (const auto& [io, graphs] : {std::pair{read_json(kData / "hf.io.json"), specs},
                                   std::pair{shifted, host::graph_specs(*s.ms)}}) {
    try {
      host::StaticIO::parse(io, graphs);
      FAIL() << io.dump();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("the cache of a layer the io does not list"), std::string::npos) << e.what();
    }
  }
}

// ---- end to end: packages that arcl builds from the test models ----------------------

namespace {

// Builds model/<name> with arcl (AR 1 and 4, CL 32 and 64) for the cpu target, then opens
// the package the way `npuforge run` does.
std::unique_ptr<test::OpenPackage> build_arcl(const std::string& name, const fs::path& work) {
  fs::path model = test::model_dir(name);
  return test::build_and_open(work, "[model]\nonnx = \"" + (model / "model.onnx").string() + "\"\nconfig = \"" +
                                        (model / "config.json").string() +
                                        "\"\n\n[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\ncontext_length = [32, 64]\n\n"
                                        "[targets.cpu]\nbackend = \"cpu\"\n");
}

bool arcl_available() {
  return test::plugin_built("arcl") &&
         fs::exists(fs::path(NPUFORGE_SOURCE_DIR) / "plugins" / "transforms" / "arcl");
}

}  // namespace

class ArclPackage : public ::testing::TestWithParam<std::string> {};

TEST_P(ArclPackage, GreedyEqualsGoldenAndTreesEqualPaths) {
  if (!arcl_available()) GTEST_SKIP() << "the arcl transform is not built";
  fs::path model = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "models" / GetParam();
  if (!fs::exists(model / "model.onnx") || !fs::exists(model / "golden.json"))
    GTEST_SKIP() << GetParam() << " has no model.onnx / golden.json";
  fs::path work = fs::temp_directory_path() / ("nf_runner_" + GetParam() + "_" + std::to_string(::getpid()));
  fs::remove_all(work);
  auto p = build_arcl(GetParam(), work);
  ASSERT_NE(dynamic_cast<host::StaticRunner*>(p->runner.get()), nullptr) << "package is not static";
  Runner& r = *p->runner;

  auto golden = read_json(model / "golden.json");
  auto prompt = golden.at("prompt_ids").get<std::vector<int32_t>>();
  auto want = golden.at("generated_ids").get<std::vector<int32_t>>();
  auto want_last = golden.at("last_logits").get<std::vector<float>>();
  auto logits = r.append(prompt);
  std::vector<int32_t> got;
  for (size_t i = 0; i < want.size(); ++i) {
    got.push_back(host::argmax(logits));
    if (i + 1 < want.size()) logits = r.append({&got.back(), 1});
  }
  EXPECT_EQ(got, want);
  float scale = 0;
  for (float x : want_last) scale = std::max(scale, std::abs(x));
  float rel = max_diff(logits, want_last) / scale;
  EXPECT_LT(rel, 1e-4f);
  std::cout << GetParam() << ": greedy " << got.size() << " tokens == golden, last logits max rel diff " << rel << "\n";

  // Trees on the package against its source model through the plain runner.
  Model d = dynamic_model_at(model / "model.onnx");
  uint32_t seed = 300;
  for (const auto& tree : kTrees) {
    float worst = compare_tree(r, *d.runner, prompt, tree, seed++);
    std::cout << GetParam() << ": tree of " << tree.size() << " rows, max |logit diff| " << worst << "\n";
  }
  p.reset();
  fs::remove_all(work);
}

// mistral_swa: window 8 in every layer; arcl's default SCL (256) exceeds CL, so the
// runner writes the window into attention_mask.
INSTANTIATE_TEST_SUITE_P(Models, ArclPackage, ::testing::Values("llama_gqa", "qwen2", "tiny_llama", "mistral_swa"));
