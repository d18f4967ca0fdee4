// ssd (forecast tokens + KV prefix) and lade on tiny_llama: through the DynamicRunner over
// model.onnx and the StaticRunner over arcl packages built with the ssd assets. Greedy
// output equals plain greedy token for token; rows per forward stay within the runner's
// AR; the runner's prefix rows and flags agree between the two runners; errors are clear.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "manifest/manifest.h"
#include "onnx/onnx_io.h"
#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "runner/generate.h"
#include "runner/speculative.h"
#include "runner/static_runner.h"
#include "runtime/package.h"
#include "support/packages.h"
#include "tokenizer/tokenizer.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

const fs::path kModel = fs::path(NPUFORGE_SOURCE_DIR) / "tests" / "models" / "tiny_llama";
const fs::path kAssets = kModel / "ssd";

using test::heldout_prompts;
using test::plugin;

// tiny_llama's model.onnx on the cpu backend; with_forecast: ssd's build hook ran (the assets'
// embedding rows appended and, unless `prefix` is 0, the KV prefix as a graph of role kv_prefix).
struct Dynamic {
  std::unique_ptr<ir::ModelSet> ms;
  std::unique_ptr<host::BackendSession> session;
  std::unique_ptr<host::Runner> runner;
};

Dynamic open_dynamic(bool with_forecast, const fs::path& model = kModel, int prefix = 16) {
  Dynamic m;
  nlohmann::json options = nlohmann::json::object();
  const auto& cpu = plugin(NF_KIND_BACKEND, "cpu");
  manifest::validate_json(cpu.schema, options);
  m.ms = host::load_source_model((model / "model.onnx").string(), "");
  nlohmann::json meta = nlohmann::json::object();
  if (with_forecast) {
    // ssd's build hook, as the build's first stage runs it.
    const std::string assets = nlohmann::json{{"assets", kAssets.string()}, {"forecast_prefix", prefix}}.dump();
    nf_context ctx{"speculative ssd", {}};
    host::throw_if_error(plugin(NF_KIND_SPECULATIVE, "ssd").speculative()->build(assets.c_str(), host::handle(m.ms.get()), &ctx),
                         "ssd build");
    for (const char* key : {"extra_embeddings", "roles"})
      if (m.ms->metadata.count(key)) meta[key] = nlohmann::json::parse(m.ms->metadata.at(key));
  }
  m.session = host::BackendSession::open_model_set(cpu, options, *m.ms);
  m.runner = host::make_runner(*m.session, host::graph_specs(*m.ms), meta);
  return m;
}

using Static = test::OpenPackage;

// Builds the manifest `toml` (written in `work`) and opens its cpu package.
std::unique_ptr<Static> build_package(const std::string& toml, const fs::path& work) {
  return test::build_and_open(work, toml);
}

// An arcl package of tiny_llama (AR 1 and `ar`, CL 256) with [speculative] ssd and its assets;
// `prefix` 0 leaves the KV prefix out of the graphs; `arcl_extra` (options) and `after` (more
// [[transform]] tables) change the graphs.
std::unique_ptr<Static> build_static(int ar, const fs::path& work, int prefix = 16, const std::string& arcl_extra = "",
                                     const std::string& after = "") {
  std::string toml = "[model]\nonnx = \"" + (kModel / "model.onnx").string() + "\"\nconfig = \"" +
                     (kModel / "config.json").string() + "\"\n\n[[transform]]\nplugin = \"arcl\"\narn = [1, " +
                     std::to_string(ar) + "]\ncontext_length = [256]\n" + arcl_extra + "\n" + after +
                     "\n[targets.cpu]\nbackend = \"cpu\"\n\n"
                     "[speculative]\ndecoder = \"ssd\"\nassets = \"" + kAssets.string() + "\"\nforecast_prefix = " +
                     std::to_string(prefix) + "\n";
  return build_package(toml, work);
}

// The package's own ssd options, with the asset path made absolute (as `npuforge run` does).
nlohmann::json package_ssd_options(const Static& s) {
  nlohmann::json o = s.pkg.meta.at("speculative").at("options");
  o["assets"] = (s.dir / o.at("assets").get<std::string>()).string();
  return o;
}

std::vector<int32_t> plain(host::Runner& r, const std::vector<int32_t>& prompt, int n, host::SamplingParams sp = {}) {
  r.reset();
  host::Sampler s(sp);
  return host::generate(r, prompt, n, s, {}, nullptr, nullptr);
}

std::vector<int32_t> speculative(host::Runner& r, const char* decoder, nlohmann::json options,
                                 const std::vector<int32_t>& prompt, int n, host::SpeculativeStats* st,
                                 host::SamplingParams sp = {}) {
  r.reset();
  host::Sampler s(sp);
  return host::generate_speculative(r, plugin(NF_KIND_SPECULATIVE, decoder), options, prompt, n, s, {}, nullptr, st);
}

std::vector<std::vector<int32_t>> test_prompts() {
  std::vector<std::vector<int32_t>> p{{1}, {2046}, {1, 5, 9, 5, 9, 5}};
  for (auto& h : heldout_prompts(1, 24)) p.push_back(h);
  return p;
}

void expect_lossless(host::Runner& r, const char* decoder, const nlohmann::json& options,
                     const std::vector<int32_t>& prompt, int n) {
  auto want = plain(r, prompt, n);
  host::SpeculativeStats st;
  auto got = speculative(r, decoder, options, prompt, n, &st);
  EXPECT_EQ(got, want) << decoder << ": prompt of " << prompt.size() << " tokens, " << n << " new, options "
                       << options.dump();
  EXPECT_GE(st.tau, 1.0);
  EXPECT_LE(st.max_rows, static_cast<int64_t>(r.max_rows()));
  EXPECT_EQ(st.gen.new_tokens, n);
}

fs::path work_dir(const std::string& what) {
  fs::path w = fs::temp_directory_path() / ("nf_ssd_" + what + "_" + std::to_string(::getpid()));
  fs::remove_all(w);
  return w;
}

nlohmann::json dynamic_options() { return {{"assets", kAssets.string()}}; }

}  // namespace

TEST(SsdDynamic, GreedyEqualsPlainGreedy) {
  Dynamic m = open_dynamic(true);
  m.runner->append(std::vector<int32_t>{1});  // the dynamic runner learns the vocab from its first pass
  EXPECT_EQ(m.runner->input_vocab_size(), 2048u + 4u);
  for (const auto& p : test_prompts())
    for (int n : {1, 7, 40}) expect_lossless(*m.runner, "ssd", dynamic_options(), p, n);
  auto p = heldout_prompts(1, 32)[0];
  nlohmann::json o = dynamic_options();
  for (auto [d, b] : std::vector<std::pair<int, nlohmann::json>>{{2, {3, 2}}, {3, {2, 2}}}) {
    o["forecast_token_count"] = d;
    o["branches"] = b;
    expect_lossless(*m.runner, "ssd", o, p, 30);
  }
  o = dynamic_options();
  o["forecast_prefix"] = 0;  // forecast rows without the prefix: worse drafts, same tokens
  expect_lossless(*m.runner, "ssd", o, p, 30);
}

// Seeded sampling: one draw per emitted token, from the target's logits at that position,
// so the speculative run draws exactly what plain sampling draws.
TEST(SsdDynamic, SamplingFollowsTheTarget) {
  Dynamic m = open_dynamic(true);
  host::SamplingParams sp{0.8f, 40, 0.95f, 11};
  for (const auto& p : heldout_prompts(2, 16)) {
    auto want = plain(*m.runner, p, 40, sp);
    host::SpeculativeStats st;
    auto got = speculative(*m.runner, "ssd", dynamic_options(), p, 40, &st, sp);
    EXPECT_EQ(got, want);
  }
}

// tau on held-out text with the defaults (other tree shapes: README, measured by hand).
TEST(SsdDynamic, TauOnHeldoutText) {
  Dynamic m = open_dynamic(true);
  auto prompts = heldout_prompts(6, 32);
  auto want = std::vector<std::vector<int32_t>>();
  for (const auto& p : prompts) want.push_back(plain(*m.runner, p, 64));
  auto tau_of = [&](const nlohmann::json& options) {
    int64_t tokens = 0, forwards = 0, rows = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      host::SpeculativeStats st;
      EXPECT_EQ(speculative(*m.runner, "ssd", options, prompts[i], 64, &st), want[i]);
      tokens += st.gen.new_tokens;
      forwards += st.target_forwards;
      rows = std::max(rows, st.max_rows);
    }
    double tau = static_cast<double>(tokens) / static_cast<double>(forwards);
    std::printf("tiny_llama held-out tau, ssd %s: %.3f over %lld tokens, %lld rows per step\n", options.dump().c_str(),
                tau, static_cast<long long>(tokens), static_cast<long long>(rows));
    return tau;
  };
  double tau = tau_of(dynamic_options());
  RecordProperty("tau_x1000", static_cast<int>(tau * 1000));
  EXPECT_GE(tau, 1.5);
}

TEST(SsdDynamic, ErrorsAreClear) {
  auto message = [](host::Runner& r, nlohmann::json o) {
    host::SpeculativeStats st;
    try {
      speculative(r, "ssd", std::move(o), {1, 2}, 4, &st);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    Dynamic m = open_dynamic(false);  // the graphs lack the forecast embeddings
    EXPECT_NE(message(*m.runner, dynamic_options()).find("no forecast embeddings"), std::string::npos);
    EXPECT_NE(message(*m.runner, {{"assets", "/nonexistent/ssd"}}).find("assets.json"), std::string::npos);
  }
  {  // the build hook names the file it could not use
    auto ms = host::load_source_model((kModel / "model.onnx").string(), "");
    nf_context ctx{"speculative ssd", {}};
    nf_status* st =
        plugin(NF_KIND_SPECULATIVE, "ssd").speculative()->build(R"({"assets": "/nonexistent/ssd"})", host::handle(ms.get()), &ctx);
    try {
      host::throw_if_error(st, "ssd build");
      ADD_FAILURE() << "missing assets were accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("/nonexistent/ssd/assets.json"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ms->metadata.count("extra_embeddings"), 0u);
    // Hostile assets: rows that the embeddings file does not hold, another model's first id.
    const fs::path bad = work_dir("bad_assets");
    fs::copy(kAssets, bad, fs::copy_options::recursive);
    auto refused = [&](const std::string& key, const nlohmann::json& value) {
      nlohmann::json meta = nlohmann::json::parse(std::ifstream(kAssets / "assets.json"));
      meta["extra_embeddings"][key] = value;
      if (key == "rows" && value.is_number_integer() && value.get<int>() > 0) meta["ssd"]["forecast_token_count"] = value;
      std::ofstream(bad / "assets.json") << meta.dump();
      const std::string options = nlohmann::json{{"assets", bad.string()}}.dump();
      try {
        host::throw_if_error(
            plugin(NF_KIND_SPECULATIVE, "ssd").speculative()->build(options.c_str(), host::handle(ms.get()), &ctx), "ssd build");
      } catch (const std::runtime_error& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    EXPECT_NE(refused("rows", 5).find("needs exactly 5 x 256 float32 values"), std::string::npos) << refused("rows", 5);
    EXPECT_NE(refused("first_id", 1000).find("assets of another model?"), std::string::npos) << refused("first_id", 1000);
    EXPECT_NE(refused("rows", -1).find("needs a positive integer 'rows'"), std::string::npos) << refused("rows", -1);
    EXPECT_EQ(ms->metadata.count("extra_embeddings"), 0u) << "a refused hook left the model set changed";
    // A KV prefix of another geometry (as many floats: 8 kv heads of 16), refused before any change.
    nlohmann::json meta = nlohmann::json::parse(std::ifstream(kAssets / "assets.json"));
    meta["ssd"]["kv_prefix"]["kv_heads"] = 8;
    meta["ssd"]["kv_prefix"]["head_dim"] = 16;
    std::ofstream(bad / "assets.json") << meta.dump();
    const std::string options = nlohmann::json{{"assets", bad.string()}}.dump();
    try {
      host::throw_if_error(
          plugin(NF_KIND_SPECULATIVE, "ssd").speculative()->build(options.c_str(), host::handle(ms.get()), &ctx), "ssd build");
      ADD_FAILURE() << "a KV prefix of another geometry was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("the model's cache is [4, 4, 32]"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ms->metadata.count("extra_embeddings"), 0u) << "a refused hook left the model set changed";
    EXPECT_EQ(ms->graphs.size(), 1u);
    fs::remove_all(bad);
  }
  Dynamic m = open_dynamic(true);
  auto o = dynamic_options();
  o["forecast_token_count"] = 5;
  EXPECT_NE(message(*m.runner, o).find("exceeds the 4 forecast embeddings"), std::string::npos) << message(*m.runner, o);
  o = dynamic_options();
  o["forecast_prefix"] = 8;
  EXPECT_NE(message(*m.runner, o).find("does not match the assets' 16"), std::string::npos) << message(*m.runner, o);
  o = dynamic_options();
  o["branches"] = {3, 2, 2};
  EXPECT_NE(message(*m.runner, o).find("branches has 3 levels"), std::string::npos) << message(*m.runner, o);
  o = dynamic_options();
  o["brnaches"] = {3};
  EXPECT_NE(message(*m.runner, o).find("brnaches"), std::string::npos) << message(*m.runner, o);
}

// Runner contract: flagged rows see the prefix KV, plain rows never do (their logits are those
// of the same rows unflagged); flagged rows cannot be committed; plain under flagged is refused.
// The prefix is the model's graph state (role kv_prefix): the dynamic runner runs its graph,
// arcl built the rows into the static package's graphs (mha2sha cut them per head, spinquant's
// R2 turned the values), and all score the same. A prefix the
// host gives (runner_set_prefix_kv) serves a model without one; a model with one refuses it.
TEST(SsdRunner, PrefixRowsAndFlags) {
  const size_t V = 2048;
  std::vector<int32_t> tokens{450, 1536, 2048, 2049, 310}, parents{-1, 0, 1, 2, 0};
  std::vector<uint32_t> flags{0, 0, 1, 1, 0};
  std::vector<float> kv(4 * 4 * 3 * 32);  // a host-given 3-row prefix
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = 0.05f * static_cast<float>((i * 7919) % 97) - 2.f;
  // The rows after the prompt {1, 5, 9}, flagged as `f` (null: none), with the host's prefix
  // when `host_prefix`.
  auto score = [&](host::Runner& r, const uint32_t* f, bool host_prefix = false) {
    std::vector<float> out(tokens.size() * V);
    r.reset();
    r.append(std::vector<int32_t>{1, 5, 9});
    if (host_prefix) r.set_prefix_kv(4, 4, 3, 32, kv.data(), kv.data());
    r.forward_flags(tokens.data(), parents.data(), f, tokens.size(), out.data());
    return out;
  };
  auto expect_seen = [&](const std::vector<float>& before, const std::vector<float>& with, const std::string& what) {
    for (size_t row : {0u, 1u, 4u})
      for (size_t v = 0; v < V; ++v) ASSERT_NEAR(with[row * V + v], before[row * V + v], 1e-4f) << what << ": plain row " << row;
    float moved = 0;
    for (size_t v = 0; v < V; ++v) moved = std::max(moved, std::abs(with[2 * V + v] - before[2 * V + v]));
    EXPECT_GT(moved, 1e-2f) << what << ": a flagged row must see the prefix";
  };
  auto relative = [](const std::vector<float>& a, const std::vector<float>& b) {
    float diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::abs(a[i] - b[i]));
      scale = std::max(scale, std::abs(b[i]));
    }
    return diff / scale;
  };

  Dynamic graph = open_dynamic(true);              // prefix from the kv_prefix graph
  Dynamic none = open_dynamic(true, kModel, 0);    // no prefix in the model
  const auto before = score(*graph.runner, nullptr);
  const auto with_graph = score(*graph.runner, flags.data());  // reset() keeps the graph's prefix
  expect_seen(before, with_graph, "graph prefix");
  const auto with_host = score(*none.runner, flags.data(), true);
  expect_seen(before, with_host, "host prefix");
  EXPECT_GT(relative(with_host, with_graph), 1e-3f) << "the trained prefix and the host's differ";

  fs::path work = work_dir("runner");
  auto s = build_static(32, work);
  ASSERT_NE(dynamic_cast<host::StaticRunner*>(s->runner.get()), nullptr);
  const nlohmann::json& meta = s->pkg.meta.at("metadata");
  EXPECT_EQ(meta.at("io").at("kv_prefix_rows"), 16);
  EXPECT_FALSE(meta.value("roles", nlohmann::json::object()).contains("kv_prefix")) << "arcl drops the role";
  for (const auto& v : meta.at("io").at("variants"))  // 16 of CL's slots are the graph's, not the cache's
    for (const auto& g : s->pkg.meta.at("graphs"))
      if (g.at("name") == v.at("graph"))
        for (const auto& in : g.at("inputs"))
          if (in.at("name") == "past_key_values.0.value") {
            EXPECT_EQ(in.at("shape")[2], 256 - v.at("ar").get<int>() - 16) << g.dump();
          }
  host::Runner& sr = *s->runner;
  EXPECT_EQ(sr.input_vocab_size(), 2048u + 4u);
  EXPECT_LT(relative(score(sr, flags.data()), with_graph), 1e-4f) << "static vs dynamic, graph prefix";
  // Through the htp cache layout, one head a graph (mha2sha) and 4 parts (split): the same rows.
  auto sha = build_static(32, work_dir("runner_sha"), 16, "kv_layout = \"htp\"\n",
                          "[[transform]]\nplugin = \"mha2sha\"\n\n[[transform]]\nplugin = \"split\"\nnum_splits = 4\n");
  EXPECT_LT(relative(score(*sha->runner, flags.data()), with_graph), 1e-4f) << "mha2sha + split vs dynamic, graph prefix";
  // SpinQuant's R2 turns each head's values, the prefix's with them: the same function.
  auto spin = build_static(32, work_dir("runner_spin"), 16, "",
                           "[[quant]]\nrecipe = \"spinquant\"\nr2 = true\nseed = 3\n");
  EXPECT_LT(relative(score(*spin->runner, flags.data()), with_graph), 1e-3f) << "spinquant r2 vs dynamic, graph prefix";
  auto bare = build_static(32, work_dir("runner_bare"), 0);
  EXPECT_FALSE(bare->pkg.meta.at("metadata").at("io").contains("kv_prefix_rows"));
  EXPECT_LT(relative(score(*bare->runner, flags.data(), true), with_host), 1e-4f) << "static vs dynamic, host prefix";

  for (host::Runner* run : {graph.runner.get(), &sr}) {
    std::vector<float> out(tokens.size() * V);
    score(*run, flags.data());
    int32_t path[] = {0, 1, 2};
    EXPECT_THROW(run->commit(path, 3), std::runtime_error);  // row 2 is flagged
    std::vector<uint32_t> bad{0, 1, 0};
    std::vector<int32_t> t3{450, 2048, 310}, p3{-1, 0, 1};
    EXPECT_THROW(run->forward_flags(t3.data(), p3.data(), bad.data(), 3, out.data()), std::runtime_error);
    EXPECT_THROW(run->set_prefix_kv(4, 4, 3, 32, kv.data(), kv.data()), std::runtime_error);  // the graphs hold one
  }
  for (host::Runner* run : {none.runner.get(), bare->runner.get()}) {
    std::vector<float> out(tokens.size() * V);
    run->reset();
    run->append(std::vector<int32_t>{1, 5, 9});
    try {
      run->forward_flags(tokens.data(), parents.data(), flags.data(), tokens.size(), out.data());
      ADD_FAILURE() << "flagged rows without a prefix were scored";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("the graphs hold none"), std::string::npos) << e.what();
    }
    EXPECT_THROW(run->set_prefix_kv(4, 2, 3, 32, kv.data(), kv.data()), std::runtime_error);  // wrong shape
  }
  fs::remove_all(work);
  for (const char* w : {"runner_sha", "runner_spin", "runner_bare"}) fs::remove_all(work_dir(w));
}

// arcl builds the kv_prefix role into each static variant (one Concat of cache slots, prefix
// rows and new rows per K and V) and drops the role's graph; a prefix that leaves no cache
// slot, or a role whose row count is not its graph's, is refused before anything changes.
TEST(SsdArcl, PrefixRoleBecomesPartOfTheStaticGraphs) {
  auto hooked = [] {
    auto ms = host::load_source_model((kModel / "model.onnx").string(), "");
    const std::string options = nlohmann::json{{"assets", kAssets.string()}}.dump();
    nf_context ctx{"speculative ssd", {}};
    host::throw_if_error(plugin(NF_KIND_SPECULATIVE, "ssd").speculative()->build(options.c_str(), host::handle(ms.get()), &ctx),
                         "ssd build");
    return ms;
  };
  {
    auto ms = hooked();
    ASSERT_EQ(ms->graphs.size(), 2u);
    ASSERT_EQ(test::apply_transform(*ms, "arcl", {{"arn", {1, 8}}, {"context_length", 64}}).error, "");
    EXPECT_EQ(nlohmann::json::parse(ms->metadata.at("io")).at("kv_prefix_rows"), 16);
    EXPECT_FALSE(nlohmann::json::parse(ms->metadata.at("roles")).contains("kv_prefix"));
    ASSERT_EQ(ms->graphs.size(), 2u);  // ar1_cl64, ar8_cl64: the prefix graph is gone
    for (const auto& g : ms->graphs) {
      int concats = 0;
      for (const auto& n : g->nodes)
        if (n->op_type == "Concat" && n->inputs.size() == 3 && g->initializers.count(n->inputs[1])) ++concats;
      EXPECT_EQ(concats, 2 * 4) << g->name << ": one per K and V of each layer, the prefix between past and new";
      EXPECT_EQ(g->initializers.at("kv_prefix.3.value")->tensor.dims, (std::vector<int64_t>{1, 4, 16, 32}));
    }
  }
  {
    auto ms = hooked();
    const std::string e = test::apply_transform(*ms, "arcl", {{"arn", {1, 48}}, {"context_length", 64}}).error;
    EXPECT_NE(e.find("16 KV prefix rows (role kv_prefix) and AR 48 leave no cache slot in CL 64"), std::string::npos) << e;
    EXPECT_EQ(ms->graphs.size(), 2u);
  }
  {
    auto ms = hooked();
    nlohmann::json roles = nlohmann::json::parse(ms->metadata.at("roles"));
    roles["kv_prefix"]["rows"] = 8;
    ms->metadata["roles"] = roles.dump();
    const std::string e = test::apply_transform(*ms, "arcl", {{"arn", {1, 8}}, {"context_length", 64}}).error;
    EXPECT_NE(e.find("KV prefix kv_prefix.0.key is not float32 [1, 4, 8, 32]"), std::string::npos) << e;
    EXPECT_EQ(ms->graphs.size(), 2u);
  }
}

// arcl packages: the build carries the assets; ssd and lade give plain greedy's tokens;
// an AR 8 package trims both decoders' trees to 8 rows; too few rows for ssd is refused.
TEST(SsdStatic, PackageCarriesAssetsAndDecodersAreLossless) {
  fs::path work = work_dir("static");
  auto s = build_static(32, work);
  ASSERT_NE(dynamic_cast<host::StaticRunner*>(s->runner.get()), nullptr);
  const auto& meta = s->pkg.meta;
  EXPECT_EQ(meta.at("metadata").at("extra_embeddings").at("rows"), 4);
  EXPECT_EQ(meta.at("speculative").at("decoder"), "ssd");
  // The forecast rows came from ssd's build hook, the build's first stage.
  ASSERT_FALSE(meta.at("stages").empty());
  EXPECT_EQ(meta["stages"][0]["kind"], "speculative");
  EXPECT_EQ(meta["stages"][0]["name"], "ssd");
  auto assets = package_ssd_options(*s).at("assets").get<std::string>();
  EXPECT_TRUE(fs::is_regular_file(fs::path(assets) / "assets.json")) << assets;
  EXPECT_EQ(fs::path(assets).string().rfind(s->dir.string(), 0), 0u) << "assets outside the package: " << assets;

  host::Runner& r = *s->runner;
  for (const auto& p : test_prompts())
    for (int n : {1, 7, 40}) {
      expect_lossless(r, "ssd", package_ssd_options(*s), p, n);
      expect_lossless(r, "lade", nlohmann::json::object(), p, n);
    }
  // ssd tau on the package (one pass per tree).
  int64_t tokens = 0, forwards = 0;
  for (const auto& p : heldout_prompts(6, 32)) {
    host::SpeculativeStats st;
    auto want = plain(r, p, 64);
    EXPECT_EQ(speculative(r, "ssd", package_ssd_options(*s), p, 64, &st), want);
    tokens += st.gen.new_tokens;
    forwards += st.target_forwards;
  }
  double tau = static_cast<double>(tokens) / static_cast<double>(forwards);
  std::printf("tiny_llama held-out tau (ssd defaults, arcl AR 32 package): %.3f over %lld tokens\n", tau,
              static_cast<long long>(tokens));
  EXPECT_GE(tau, 1.5);
  fs::remove_all(work);
}

// htp stores the KV prefix on the cache's grid (a Concat takes its inputs at its output's
// encoding): with 8-bit activations every prefix value in the package is a code of the
// past_key_values encoding, moved from the trained float rows, and ssd still gives plain
// greedy's tokens.
TEST(SsdStatic, HtpStoresThePrefixOnTheCachesGrid) {
  if (!test::plugin_built("htp")) GTEST_SKIP() << "htp plugin not built";
  fs::path work = work_dir("htp_grid");
  const std::string toml = "[model]\nonnx = \"" + (kModel / "model.onnx").string() + "\"\nconfig = \"" +
                           (kModel / "config.json").string() + "\"\n\n[calibration]\ntext = \"" +
                           (kModel / "heldout.txt").string() + "\"\nnum_samples = 2\nsequence_length = 32\n\n"
                           "[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\nactivation_bw = 8\n\n"
                           "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [256]\n\n"
                           "[speculative]\ndecoder = \"ssd\"\nassets = \"" + kAssets.string() + "\"\n\n"
                           "[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n";
  auto s = build_package(toml, work);
  ASSERT_EQ(s->pkg.backend(), "htp");
  auto ms = onnx_io::load_model_set((s->dir / "artifacts" / "model").string());
  const ir::Encoding& enc = ms->encodings.at("past_key_values.0.key");
  ASSERT_EQ(enc.view.bw, 8);
  const ir::Tensor& rows = ms->graphs[0]->initializers.at("kv_prefix.0.key")->tensor;
  std::vector<float> trained(static_cast<size_t>(rows.numel()));  // layer 0's keys lead kv_prefix.f32
  std::ifstream(kAssets / "kv_prefix.f32", std::ios::binary).read(reinterpret_cast<char*>(trained.data()),
                                                                   static_cast<std::streamsize>(trained.size() * sizeof(float)));
  float moved = 0;
  for (int64_t i = 0; i < rows.numel(); ++i) {
    const double q = rows.as<float>()[i] / enc.view.scale[0];
    ASSERT_NEAR(q, std::nearbyint(q), 1e-3) << "value " << i << " is not on the cache's grid";
    moved = std::max(moved, std::abs(rows.as<float>()[i] - trained[static_cast<size_t>(i)]));
  }
  EXPECT_GT(moved, 0.f) << "the stored prefix is the trained float rows";
  expect_lossless(*s->runner, "ssd", package_ssd_options(*s), heldout_prompts(1, 24)[0], 24);
  fs::remove_all(work);
}

TEST(SsdStatic, RowsStayWithinTheArVariant) {
  fs::path work = work_dir("ar8");
  auto s = build_static(8, work);
  host::Runner& r = *s->runner;
  ASSERT_EQ(r.max_rows(), 8u);
  auto p = heldout_prompts(1, 24)[0];
  for (auto* dec : {"ssd", "lade"}) {
    nlohmann::json o = std::string(dec) == "ssd" ? package_ssd_options(*s) : nlohmann::json::object();
    for (const auto& prompt : {p, std::vector<int32_t>{1}}) expect_lossless(r, dec, o, prompt, 30);
    host::SpeculativeStats st;
    speculative(r, dec, o, p, 30, &st);
    EXPECT_LE(st.max_rows, 8);
    EXPECT_LE(st.decoder.at("max_rows").get<int64_t>(), 8);
  }
  fs::remove_all(work);
}

// Decoding until the context is full: near its end the trees shrink to the rows that still
// fit (AR 32, then 8, then 1 of a CL 64 package whose graphs hold ssd's 16 prefix KV rows: 48
// slots for the sequence, plain decoding's too), and the output equals plain greedy's to the
// last token plain greedy can make. The manifest (in a temp folder) leaves ssd's assets at their default: the build must
// find them beside the model, not beside the manifest.
TEST(SsdStatic, DecodersFillTheContextLikePlainGreedy) {
  fs::path work = work_dir("cl64");
  std::string toml = "[model]\nonnx = \"" + (kModel / "model.onnx").string() +
                     "\"\n\n[[transform]]\nplugin = \"arcl\"\narn = [1, 8, 32]\ncontext_length = [64]\n\n"
                     "[targets.cpu]\nbackend = \"cpu\"\n\n[speculative]\ndecoder = \"ssd\"\n";
  auto s = build_package(toml, work);
  EXPECT_EQ(s->pkg.meta.at("metadata").at("extra_embeddings").at("rows"), 4);
  host::Runner& r = *s->runner;
  ASSERT_EQ(r.max_rows(), 32u);
  const size_t cl = 64 - 16;  // the KV prefix's slots are the graphs'
  EXPECT_EQ(s->pkg.meta.at("metadata").at("io").at("kv_prefix_rows"), 16);
  auto inspect = test::npuforge({"inspect", s->dir.string()});
  EXPECT_NE(inspect.out.find("KV prefix: 16 rows per layer in every graph"), std::string::npos) << inspect.out;
  auto prompts = heldout_prompts(1, 20);
  prompts.push_back({1});
  prompts.push_back(std::vector<int32_t>(prompts[0].begin(), prompts[0].begin() + 9));
  for (const auto& p : prompts) {
    const int n = static_cast<int>(cl - p.size() + 1);  // plain greedy's last token needs no forward
    auto want = plain(r, p, n);
    ASSERT_EQ(want.size(), static_cast<size_t>(n));
    {
      // One more does not fit: a normal stop at the end of the context, same tokens.
      r.reset();
      host::Sampler greedy({});
      host::GenerateStats gs;
      EXPECT_EQ(host::generate(r, p, n + 1, greedy, {}, nullptr, &gs), want);
      EXPECT_EQ(gs.stop_reason, "context_full");
    }
    for (const char* dec : {"ssd", "lade"}) {
      nlohmann::json o = std::string(dec) == "ssd" ? package_ssd_options(*s) : nlohmann::json::object();
      host::SpeculativeStats st;
      EXPECT_EQ(speculative(r, dec, o, p, n, &st), want) << dec << ", prompt of " << p.size() << " tokens";
      EXPECT_LE(st.max_rows, 32);
      EXPECT_GT(st.decoder.value("trimmed_steps", 0), 0) << dec << ": " << st.decoder.dump();
      EXPECT_GE(st.tau, 1.0) << dec;
      EXPECT_EQ(r.n_past(), cl) << dec << ": the context ends full";
      host::SpeculativeStats over;
      EXPECT_EQ(speculative(r, dec, o, p, n + 1, &over), want) << dec;
      EXPECT_EQ(over.gen.stop_reason, "context_full") << dec;
    }
  }
  fs::remove_all(work);
}

// A runner that takes fewer rows than ssd's smallest step (root, a draft, their forecasts).
TEST(SsdRunner, TooFewRowsIsRefused) {
  struct TwoRows final : host::Runner {
    explicit TwoRows(host::Runner& r) : inner(r) {}
    std::vector<float> append(std::span<const int32_t> t, bool all) override { return inner.append(t, all); }
    void reset() override { inner.reset(); }
    int64_t forward_passes() const override { return inner.forward_passes(); }
    size_t vocab_size() const override { return inner.vocab_size(); }
    size_t max_rows() const override { return 2; }
    size_t n_past() const override { return inner.n_past(); }
    void forward(const int32_t* t, const int32_t* p, size_t n, float* l) override { inner.forward(t, p, n, l); }
    void commit(const int32_t* rows, size_t n) override { inner.commit(rows, n); }
    nf_tensor* last_output(const char* name) override { return inner.last_output(name); }
    void set_prefix_kv(size_t a, size_t b, size_t n, size_t d, const float* k, const float* v) override {
      inner.set_prefix_kv(a, b, n, d, k, v);
    }
    host::Runner& inner;
  };
  Dynamic m = open_dynamic(true);
  TwoRows two(*m.runner);
  two.set_extra_input_tokens(4);
  host::SpeculativeStats st;
  try {
    speculative(two, "ssd", dynamic_options(), {1, 2}, 4, &st);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 4 rows"), std::string::npos) << e.what();
  }
}

TEST(SsdCli, BareModelAndPackageMatchPlain) {
  std::string model = (kModel / "model.onnx").string();
  std::vector<std::string> base{"run", model, "--prompt-ids", "1005,291,260", "--max-new-tokens", "24", "--json"};
  auto want = test::npuforge(base);
  ASSERT_EQ(want.exit_code, 0) << want.err;
  auto args = base;
  args.insert(args.end(), {"--decoder", "ssd"});
  auto got = test::npuforge(args);
  ASSERT_EQ(got.exit_code, 0) << got.err;
  auto wj = nlohmann::json::parse(want.out), gj = nlohmann::json::parse(got.out);
  EXPECT_EQ(gj["tokens"], wj["tokens"]);
  EXPECT_GE(gj["stats"]["speculative"]["tau"].get<double>(), 1.0);

  // A model without ssd assets beside it: one clear line.
  auto bad = test::npuforge({"run", (kModel.parent_path() / "llama_gqa" / "model.onnx").string(), "--prompt-ids", "1,2",
                             "--decoder", "ssd"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("assets.json"), std::string::npos) << bad.err;
}
