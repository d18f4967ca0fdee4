// The eaglet speculative decoder (plugins/speculative/eaglet) on tiny_llama with its trained
// draft (tests/models/tiny_llama/eaglet): greedy output equals plain greedy token for token
// on the dynamic runner (model.onnx + the hidden_states transform) and on an arcl package
// (StaticRunner), rows stay within the runner's limit, a model without hidden states or
// without a draft is refused with a clear error, and `npuforge build`/`run` ship and use the
// draft from the package.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <fstream>

#include "api/host_api.h"
#include "onnx/onnx_io.h"
#include "pipeline/tied_head.h"
#include "manifest/manifest.h"
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

using test::heldout_prompts;
using test::plugin;

const std::string kDraft = test::model_dir("tiny_llama") + "/eaglet";

struct Model {
  std::unique_ptr<ir::ModelSet> ms;
  std::unique_ptr<host::BackendSession> session;
  std::unique_ptr<host::Runner> runner;
};

// tiny_llama's model.onnx on the cpu backend, with the hidden_states output unless `plain`.
Model open_dynamic(bool plain = false) {
  Model m;
  m.ms = host::load_source_model(test::model_dir("tiny_llama") + "/model.onnx", "");
  if (!plain) {
    nf_context ctx{"transform hidden_states", {}};
    host::throw_if_error(plugin(NF_KIND_TRANSFORM, "hidden_states").transform()->apply("{}", host::handle(m.ms.get()), &ctx),
                         "hidden_states");
  }
  nlohmann::json options = nlohmann::json::object();
  const auto& cpu = plugin(NF_KIND_BACKEND, "cpu");
  manifest::validate_json(cpu.schema, options);
  m.session = host::BackendSession::open_model_set(cpu, options, *m.ms);
  m.runner = std::make_unique<host::DynamicRunner>(*m.session, host::DecoderIO::from_spec(host::graph_specs(*m.ms)[0]));
  return m;
}

// Builds tiny_llama with hidden_states + arcl (AR 1/16, CL 256) for cpu, eaglet named in
// [speculative] with the given extra lines; returns the opened package.
std::unique_ptr<test::OpenPackage> build_package(const fs::path& work, const std::string& speculative_extra = "",
                                                 const fs::path& model = test::model_dir("tiny_llama"),
                                                 const std::string& arcl_extra = "") {
  return test::build_and_open(
      work, "[model]\nonnx = \"" + (model / "model.onnx").string() + "\"\nconfig = \"" +
                (model / "config.json").string() + "\"\ntokenizer = \"" + (model / "tokenizer.json").string() +
                "\"\n\n[[transform]]\nplugin = \"hidden_states\"\n\n[[transform]]\nplugin = \"arcl\"\n"
                "arn = [1, 16]\ncontext_length = [256]\n" + arcl_extra + "\n[speculative]\ndecoder = \"eaglet\"\n" +
                speculative_extra + "\n[targets.cpu]\nbackend = \"cpu\"\n");
}

std::vector<int32_t> plain_greedy(host::Runner& r, const std::vector<int32_t>& prompt, int n) {
  r.reset();
  host::Sampler s({});
  return host::generate(r, prompt, n, s, {}, nullptr, nullptr);
}

std::vector<int32_t> eaglet(host::Runner& r, const std::vector<int32_t>& prompt, int n, host::SpeculativeStats* st,
                            nlohmann::json options = nlohmann::json::object(), host::SamplingParams sp = {}) {
  r.reset();
  host::Sampler s(sp);
  if (!options.contains("draft")) options["draft"] = kDraft;
  return host::generate_speculative(r, plugin(NF_KIND_SPECULATIVE, "eaglet"), options, prompt, n, s, {}, nullptr, st);
}

void expect_lossless(host::Runner& r, const std::vector<int32_t>& prompt, int n, const nlohmann::json& options = {}) {
  auto want = plain_greedy(r, prompt, n);
  host::SpeculativeStats st;
  auto got = eaglet(r, prompt, n, &st, options.is_null() ? nlohmann::json::object() : options);
  EXPECT_EQ(got, want) << "prompt of " << prompt.size() << " tokens, " << n << " new, options " << options.dump();
  EXPECT_GE(st.tau, 1.0);
  EXPECT_LE(st.max_rows, static_cast<int64_t>(r.max_rows()));
  EXPECT_EQ(st.gen.new_tokens, n);
  if (options.is_null() || options.value("max_tokens_target_can_evaluate", 32) > 1) {
    EXPECT_GE(st.decoder.value("draft_forwards", 0), 1);  // else no room to draft
  }
}

// `npuforge run PACKAGE` on a 5-token prompt with the package's decoder, checked token for
// token against --decoder none; the decoder run's JSON (null when a run failed).
nlohmann::json run_cli_against_plain(const fs::path& pkg) {
  std::vector<std::string> args{"run", pkg.string(), "--prompt-ids", "450,1536,310,278,1", "--max-new-tokens", "20", "--json"};
  auto spec_run = test::npuforge(args);
  args.insert(args.end(), {"--decoder", "none"});
  auto plain_run = test::npuforge(args);
  EXPECT_EQ(spec_run.exit_code, 0) << spec_run.err;
  EXPECT_EQ(plain_run.exit_code, 0) << plain_run.err;
  if (spec_run.exit_code != 0 || plain_run.exit_code != 0) return nullptr;
  nlohmann::json j = nlohmann::json::parse(spec_run.out);
  EXPECT_EQ(j["tokens"], nlohmann::json::parse(plain_run.out)["tokens"]);
  return j;
}

}  // namespace

TEST(EagletDynamic, GreedyEqualsPlainGreedy) {
  Model m = open_dynamic();
  std::vector<std::vector<int32_t>> prompts{{1}, {2046}, {1, 5, 9, 5, 9, 5}};
  for (auto& p : heldout_prompts(2, 24)) prompts.push_back(p);
  // A small tree keeps the dynamic runner (one pass per tree path) fast.
  nlohmann::json small{{"max_tokens_target_can_evaluate", 8}, {"draft_len", 4}, {"n_branches", 2}};
  for (const auto& p : prompts)
    for (int n : {1, 6, 30}) expect_lossless(*m.runner, p, n, small);
  auto p = heldout_prompts(1, 32)[0];
  expect_lossless(*m.runner, p, 24);  // defaults
  expect_lossless(*m.runner, p, 24, {{"draft_kv_cache", false}, {"max_tokens_target_can_evaluate", 10}});
  expect_lossless(*m.runner, p, 12, {{"draft_len", 1}, {"n_branches", 1}});
  expect_lossless(*m.runner, p, 24, {{"draft_vocab", 512}, {"max_tokens_target_can_evaluate", 12}});
  expect_lossless(*m.runner, p, 12, {{"max_tokens_target_can_evaluate", 1}});  // no room to draft: plain
}

TEST(EagletDynamic, RowsAreTrimmedToTheRunner) {
  Model m = open_dynamic();
  auto p = heldout_prompts(1, 16)[0];
  host::SpeculativeStats st;
  auto want = plain_greedy(*m.runner, p, 16);
  // 1024 rows asked, the dynamic runner takes 64: trimmed (with a warning), still lossless.
  auto got = eaglet(*m.runner, p, 16, &st, {{"max_tokens_target_can_evaluate", 1024}, {"n_branches", 16}, {"draft_len", 8}});
  EXPECT_EQ(got, want);
  EXPECT_EQ(st.decoder["max_tokens_target_can_evaluate"], 64);
  EXPECT_LE(st.max_rows, 64);
  EXPECT_GT(st.max_rows, 8);
}

// With sampling the target draws every emitted token and the matching child is followed:
// with the same seed the output is plain sampling's, token for token (so its distribution
// is the target's).
TEST(EagletDynamic, SamplingEqualsPlainSamplingWithTheSameSeed) {
  Model m = open_dynamic();
  nlohmann::json small{{"max_tokens_target_can_evaluate", 8}};
  const host::SamplingParams sp{0.8f, 40, 0.95f, 7};
  for (const auto& prompt : heldout_prompts(2, 16)) {
    host::SpeculativeStats st;
    auto a = eaglet(*m.runner, prompt, 24, &st, small, sp);
    m.runner->reset();
    host::Sampler s(sp);
    auto plain = host::generate(*m.runner, prompt, 24, s, {}, nullptr, nullptr);
    EXPECT_EQ(a.size(), 24u);
    EXPECT_EQ(a, plain);
    EXPECT_GT(st.acceptance_rate, 0.0) << "drafts were accepted, so the comparison covers them";
  }
}

// HF casts logits to float after the head (logits.float()); the transform finds the head's
// MatMul behind such a Cast and exposes its input, not the Cast's.
TEST(HiddenStates, FoundBehindACastAfterTheHead) {
  auto ms = host::load_source_model(test::model_dir("tiny_llama") + "/model.onnx", "");
  ir::Graph& g = *ms->graphs[0];
  ir::Node* head = g.producer("logits");
  ASSERT_TRUE(head && head->op_type == "MatMul");
  const std::string hidden = head->inputs[0];
  head->outputs[0] = "logits_before_cast";
  auto cast = std::make_unique<ir::Node>();
  cast->op_type = "Cast";
  cast->name = "/lm_head/Cast";
  cast->inputs = {"logits_before_cast"};
  cast->outputs = {"logits"};
  cast->attrs["to"].type = NF_ATTR_INT;
  cast->attrs["to"].i = NF_DTYPE_FLOAT32;
  g.nodes.push_back(std::move(cast));
  nf_context ctx{"transform hidden_states", {}};
  host::throw_if_error(plugin(NF_KIND_TRANSFORM, "hidden_states").transform()->apply("{}", host::handle(ms.get()), &ctx),
                       "hidden_states");
  ASSERT_EQ(g.outputs.back(), "hidden_states");
  ir::Node* exposed = g.producer("hidden_states");
  ASSERT_TRUE(exposed && exposed->op_type == "Identity");
  EXPECT_EQ(exposed->inputs[0], hidden);
}

TEST(EagletDynamic, MissingHiddenStatesOrDraftIsAClearError) {
  host::SpeculativeStats st;
  {
    Model plain = open_dynamic(true);
    try {
      eaglet(*plain.runner, {1, 2, 3}, 4, &st);
      FAIL() << "a target without hidden_states was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no 'hidden_states' output"), std::string::npos) << e.what();
    }
  }
  Model m = open_dynamic();
  try {
    eaglet(*m.runner, {1, 2, 3}, 4, &st, {{"draft", "/nonexistent/eaglet"}});
    FAIL() << "a missing draft was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no draft at '/nonexistent/eaglet/draft.json'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eaglet(*m.runner, {1, 2}, 4, &st, {{"draft_len", 0}}), std::runtime_error);
  EXPECT_THROW(eaglet(*m.runner, {1, 2}, 4, &st, {{"n_branch", 2}}), std::runtime_error);
}

// draft.json's confidence_scale multiplies the draft's logits before the softmax that ranks
// the tree: a confident draft grows deeper trees (its cumulative probabilities fall slower),
// output stays plain greedy's; a scale that is not a positive number is refused.
TEST(EagletDynamic, ConfidenceScaleRanksTheTreeAndStaysLossless) {
  fs::path dir = fs::temp_directory_path() / ("nf_eaglet_scale_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kDraft + "/draft.bin", dir / "draft.bin");
  const nlohmann::json meta = nlohmann::json::parse(test::slurp(kDraft + "/draft.json"));
  auto with_scale = [&](const nlohmann::json& scale) {
    nlohmann::json m = meta;
    m["confidence_scale"] = scale;
    std::ofstream(dir / "draft.json") << m.dump();
  };
  Model m = open_dynamic();
  const auto prompt = heldout_prompts(1, 40)[0];
  const auto want = plain_greedy(*m.runner, prompt, 48);
  std::map<double, double> tau;
  for (double scale : {0.25, 4.0}) {
    with_scale(scale);
    host::SpeculativeStats st;
    EXPECT_EQ(eaglet(*m.runner, prompt, 48, &st, {{"draft", dir.string()}}), want) << "scale " << scale;
    tau[scale] = st.tau;
  }
  EXPECT_GT(tau[4.0], tau[0.25]);
  for (const nlohmann::json& bad : {nlohmann::json(-1.0), nlohmann::json(0.0), nlohmann::json("high")}) {
    with_scale(bad);
    host::SpeculativeStats st;
    try {
      eaglet(*m.runner, prompt, 4, &st, {{"draft", dir.string()}});
      FAIL() << "confidence_scale " << bad.dump() << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find((dir / "draft.json").string()), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(EagletPackage, ArclPackageIsLosslessAndCarriesTheDraft) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_" + std::to_string(::getpid()));
  fs::remove_all(work);
  auto p = build_package(work);
  ASSERT_NE(dynamic_cast<host::StaticRunner*>(p->runner.get()), nullptr);
  EXPECT_EQ(p->runner->max_rows(), 16u);
  // The draft is part of the package; the manifest entry points at it.
  auto spec = p->pkg.meta.at("speculative");
  EXPECT_EQ(spec["decoder"], "eaglet");
  EXPECT_EQ(spec["options"]["draft"], "assets/eaglet/eaglet");
  EXPECT_TRUE(fs::exists(p->dir / "assets/eaglet/eaglet/draft.json"));
  EXPECT_FALSE(fs::exists(p->dir / "assets/eaglet/eaglet/draft.onnx")) << "compiled into the package's graphs";
  // The host's float draft, for a package without the graph, is not needed either.
  EXPECT_FALSE(fs::exists(p->dir / "assets/eaglet/eaglet/draft.bin")) << "the package runs the compiled draft";
  EXPECT_FALSE(p->pkg.meta["metadata"].contains("imported_files")) << "the build machine's paths";
  nlohmann::json in_package{{"draft", (p->dir / "assets/eaglet/eaglet").string()}};
  // The draft is a graph of the package (role "draft") in arcl's variants of the target,
  // its KV cache named after the target's 4 layers, its features fed per row, its embedding
  // and LM head the target's tensors.
  std::set<std::string> graphs;
  for (const auto& g : p->pkg.meta.at("graphs")) graphs.insert(g.at("name").get<std::string>());
  const std::vector<std::string> draft_graphs{"eaglet_draft_ar1_cl256", "eaglet_draft_ar16_cl256"};
  for (const auto& name : draft_graphs) EXPECT_TRUE(graphs.count(name)) << p->pkg.meta.at("graphs").dump();
  const auto& role = p->pkg.meta.at("metadata").at("roles").at("draft");
  EXPECT_EQ(role.at("graphs"), nlohmann::json(draft_graphs));
  EXPECT_EQ(role.at("first_layer"), 4);
  EXPECT_EQ(role.at("io").at("layout"), "static");
  EXPECT_EQ(role.at("io").at("first_layer"), 4);
  EXPECT_EQ(role.at("shares").size(), 2u) << role.dump();
  for (const auto& g : p->pkg.meta.at("graphs"))
    if (g.at("name") == draft_graphs[1]) {
      std::map<std::string, nlohmann::json> inputs;
      for (const auto& in : g.at("inputs")) inputs[in.at("name").get<std::string>()] = in.value("shape", nlohmann::json());
      EXPECT_EQ(inputs["past_key_values.4.key"], nlohmann::json({1, 4, 240, 32})) << g.dump();
      EXPECT_EQ(inputs["target_hidden_states"], nlohmann::json({1, 16, 256})) << g.dump();
    }

  host::Runner& r = *p->runner;
  std::vector<std::vector<int32_t>> prompts{{1}, {1, 5, 9, 5, 9, 5}};
  for (auto& q : heldout_prompts(2, 40, 2)) prompts.push_back(q);  // 40 tokens: 3 prefill chunks
  for (const auto& q : prompts)
    for (int n : {1, 9, 40}) expect_lossless(r, q, n, in_package);
  nlohmann::json trimmed = in_package;
  trimmed["max_tokens_target_can_evaluate"] = 32;  // > AR 16: trimmed
  host::SpeculativeStats st;
  auto want = plain_greedy(r, prompts[2], 30);
  EXPECT_EQ(eaglet(r, prompts[2], 30, &st, trimmed), want);
  EXPECT_EQ(st.decoder["max_tokens_target_can_evaluate"], 16);
  EXPECT_LE(st.max_rows, 16);

  // The CLI: the package's [speculative] entry picks eaglet; --decoder none is plain.
  const nlohmann::json sj = run_cli_against_plain(p->dir);
  ASSERT_TRUE(sj.is_object());
  const auto& s = sj["stats"]["speculative"];
  EXPECT_GE(s["tau"].get<double>(), 1.0);
  EXPECT_GE(s["draft_forwards"].get<int64_t>(), 1);
  EXPECT_EQ(s["decoder"]["draft_runs_on"], "graph");
  // The runner keeps each depth's rows (scratch rows): a pass runs its new nodes only, at
  // most the catch-up's draft_len + 1 rows (the prompt is 5 tokens).
  for (const auto& [rows, passes] : s["decoder"]["draft_pass_rows"].items()) EXPECT_LE(std::stoi(rows), 6) << s.dump();
  EXPECT_GE(s["target_forwards"].get<int64_t>(), 1);
  EXPECT_TRUE(s.contains("acceptance_rate"));
  EXPECT_TRUE(s.contains("wall_seconds"));
  auto inspect = test::npuforge({"inspect", p->dir.string()});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("(target 2, draft 2, draft_tree 2)"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("Graphs of role draft (eaglet)\n  eaglet_draft_ar1_cl256  AR 1, CL 256"), std::string::npos)
      << inspect.out;
  auto text = test::npuforge({"run", p->dir.string(), "--prompt-ids", "450,1536", "--max-new-tokens", "8", "--stats"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("draft forwards"), std::string::npos) << text.err;
  fs::remove_all(work);
}

// Decoding until the context is full: near its end the tree shrinks to the rows that still
// fit (AR 32, then 8, then 1 of a CL 64 package) and the output equals plain greedy's to the
// last token plain greedy can make; one token more fails as it does for plain greedy.
TEST(EagletPackage, FillsTheContextLikePlainGreedy) {
  fs::path model = test::model_dir("tiny_llama");
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_cl64_" + std::to_string(::getpid()));
  auto p = test::build_and_open(
      work, "[model]\nonnx = \"" + (model / "model.onnx").string() + "\"\n\n[[transform]]\nplugin = \"hidden_states\"\n\n"
            "[[transform]]\nplugin = \"arcl\"\narn = [1, 8, 32]\ncontext_length = [64]\n\n"
            "[targets.cpu]\nbackend = \"cpu\"\n");
  host::Runner& r = *p->runner;
  ASSERT_EQ(r.max_rows(), 32u);
  const size_t cl = 64;
  auto prompts = heldout_prompts(1, 20);
  prompts.push_back({1});
  prompts.push_back(std::vector<int32_t>(prompts[0].begin(), prompts[0].begin() + 9));
  for (const auto& prompt : prompts) {
    const int n = static_cast<int>(cl - prompt.size() + 1);  // plain greedy's last token needs no forward
    auto want = plain_greedy(r, prompt, n);
    ASSERT_EQ(want.size(), static_cast<size_t>(n));
    host::SpeculativeStats st;
    EXPECT_EQ(eaglet(r, prompt, n, &st), want) << "prompt of " << prompt.size() << " tokens";
    EXPECT_LE(st.max_rows, 32);
    EXPECT_GT(st.decoder.value("trimmed_steps", 0), 0) << st.decoder.dump();
    EXPECT_EQ(r.n_past(), cl) << "the context ends full";
    host::SpeculativeStats over;
    EXPECT_EQ(eaglet(r, prompt, n + 1, &over), want) << "one more than fits: a normal stop";
    EXPECT_EQ(over.gen.stop_reason, "context_full");
  }
  fs::remove_all(work);
}

TEST(EagletPackage, BuildWithoutTheDraftIsAClearError) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_missing_" + std::to_string(::getpid()));
  fs::remove_all(work);
  try {
    build_package(work, "draft = \"no_such_draft\"\n");
    FAIL() << "built a package without its draft";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("needs its asset 'draft'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_draft"), std::string::npos) << e.what();
  }
  fs::remove_all(work);
}

// A draft.onnx that is not a draft is refused by the build hook in one line naming the file
// and what is wrong, and no package is made.
TEST(EagletPackage, HostileDraftGraphIsAClearError) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_hostile_" + std::to_string(::getpid()));
  fs::remove_all(work);
  const fs::path draft = work / "draft";
  auto expect_refused = [&](const std::string& what, const std::string& expected) {
    fs::remove_all(work / "out");
    try {
      build_package(work, "draft = \"" + draft.string() + "\"\n");
      ADD_FAILURE() << what << ": built a package";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(expected), std::string::npos) << what << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": " << msg;
    }
    EXPECT_FALSE(fs::exists(work / "out" / "cpu" / "package.json")) << what;
  };
  fs::create_directories(work);
  fs::copy(kDraft, draft, fs::copy_options::recursive);
  fs::remove(draft / "draft.onnx");
  expect_refused("no draft.onnx", "export it with tools/speculative/export_eaglet_onnx.py");
  std::ofstream(draft / "draft.onnx") << "not an onnx model";
  expect_refused("garbage", "draft.onnx");
  fs::copy_file(test::model_dir("tiny_llama") + "/model.onnx", draft / "draft.onnx", fs::copy_options::overwrite_existing);
  expect_refused("the target as its own draft", "the draft has no input 'target_hidden_states'");
  fs::remove_all(work);
}

// A tied target (its LM head the embedding table transposed; the host reads it as
// Transpose(table)) and a draft whose head holds those numbers: the draft's head becomes a
// Transpose of the one shared table, not a copy of it, and decoding stays lossless.
TEST(EagletPackage, TiedTargetsTableIsTheDraftsHead) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_tied_" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work / "model");
  const fs::path tiny = test::model_dir("tiny_llama");
  // Writes the table's transpose into the head's weight of the ONNX file `from`, at `to`.
  auto tie = [](const fs::path& from, const fs::path& to) {
    auto g = onnx_io::load_model(from.string());
    ir::Node* head = host::lm_head_matmul(*g);
    ASSERT_NE(head, nullptr) << from;
    const ir::Node* gather = nullptr;
    for (const auto& n : g->nodes)
      if (n->op_type == "Gather" && g->initializers.count(n->inputs[0])) gather = n.get();
    ASSERT_NE(gather, nullptr) << from;
    const ir::Tensor& e = g->initializers.at(gather->inputs[0])->tensor;
    const int64_t V = e.dims[0], H = e.dims[1];
    ir::Tensor w = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {H, V});
    for (int64_t v = 0; v < V; ++v)
      for (int64_t h = 0; h < H; ++h) w.mutable_as<float>()[h * V + v] = e.as<float>()[v * H + h];
    g->initializers[head->inputs[1]] = ir::make_tensor_ref(std::move(w));
    onnx_io::save_model(*g, to.string());
  };
  tie(tiny / "model.onnx", work / "model" / "model.onnx");
  for (const char* f : {"config.json", "tokenizer.json"}) fs::copy_file(tiny / f, work / "model" / f);
  fs::copy(kDraft, work / "draft", fs::copy_options::recursive);
  tie(fs::path(kDraft) / "draft.onnx", work / "draft" / "draft.onnx");
  if (HasFatalFailure()) return;

  auto p = build_package(work, "draft = \"" + (work / "draft").string() + "\"\n", work / "model");
  const auto& role = p->pkg.meta.at("metadata").at("roles").at("draft");
  ASSERT_EQ(role.at("shares").size(), 1u) << role.dump();
  EXPECT_EQ(role.value("head_is_transposed", ""), role.at("shares")[0]) << role.dump();
  nlohmann::json options{{"draft", (p->dir / "assets/eaglet/draft").string()}};
  for (const auto& q : heldout_prompts(2, 24)) expect_lossless(*p->runner, q, 24, options);
  fs::remove_all(work);
}

// A draft graph without static shapes (no arcl) runs on the dynamic runner, which keeps no
// rows between forwards (runner_forward_scratch: UNSUPPORTED): each tree pass runs its new
// nodes with their ancestors again, and output stays plain greedy's.
TEST(EagletPackage, DynamicDraftRunsItsAncestorsAgain) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_dynamic_" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::path model = test::model_dir("tiny_llama");
  auto p = test::build_and_open(
      work, "[model]\nonnx = \"" + (model / "model.onnx").string() + "\"\nconfig = \"" + (model / "config.json").string() +
                "\"\n\n[[transform]]\nplugin = \"hidden_states\"\n\n[speculative]\ndecoder = \"eaglet\"\n\n"
                "[targets.cpu]\nbackend = \"cpu\"\n");
  const nlohmann::json sj = run_cli_against_plain(p->dir);
  ASSERT_TRUE(sj.is_object());
  const auto& d = sj["stats"]["speculative"]["decoder"];
  EXPECT_EQ(d["draft_runs_on"], "graph");
  int most = 0;
  for (const auto& [rows, passes] : d["draft_pass_rows"].items()) most = std::max(most, std::stoi(rows));
  EXPECT_GE(most, 8) << d.dump();  // a third depth: 4 new nodes and their 4 ancestors
  fs::remove_all(work);
}

// draft_vocab cuts the draft graph's LM head to the token map's first rows: the draft then
// owns that smaller head (only the embedding is the target's), and decoding stays lossless.
TEST(EagletPackage, DraftVocabCutsTheDraftGraphsHead) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_vocab_" + std::to_string(::getpid()));
  fs::remove_all(work);
  auto p = build_package(work, "draft_vocab = 512\n");
  const auto& role = p->pkg.meta.at("metadata").at("roles").at("draft");
  EXPECT_EQ(role.at("shares").size(), 1u) << role.dump();
  EXPECT_EQ(role.at("head_tokens").size(), 512u);
  for (const auto& g : p->pkg.meta.at("graphs")) {
    if (g.at("name") != "eaglet_draft_ar16_cl256") continue;
    for (const auto& out : g.at("outputs")) {
      if (out.at("name") == "logits") {
        EXPECT_EQ(out.at("shape"), nlohmann::json({1, 16, 512}));
      }
    }
  }
  nlohmann::json options{{"draft", (p->dir / "assets/eaglet/eaglet").string()}, {"draft_vocab", 512}};
  for (const auto& q : heldout_prompts(2, 24)) expect_lossless(*p->runner, q, 24, options);
  fs::remove_all(work);
}

// The draft's depth loop as one graph (role draft_tree, built by arcl): the package holds one
// tree graph per AR at CL 256 - (5-1) x 4, sharing the draft's KV cache; a step launches it
// once, and it drafts the tree the per-depth launches draft (the same tree: the same verified
// and accepted counts), lossless.
void expect_one_graph_a_step(const std::string& kv_layout) {
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_tree_" + kv_layout + std::to_string(::getpid()));
  fs::remove_all(work);
  auto p = build_package(work, "", test::model_dir("tiny_llama"), "kv_layout = \"" + kv_layout + "\"\n");
  const auto& roles = p->pkg.meta.at("metadata").at("roles");
  ASSERT_TRUE(roles.contains("draft_tree")) << roles.dump();
  const auto& tree = roles.at("draft_tree");
  EXPECT_EQ(tree.at("graphs"), nlohmann::json({"eaglet_draft_tree_ar1_cl240", "eaglet_draft_tree_ar16_cl240"}));
  EXPECT_EQ(tree.at("tree").at("depth"), 5);
  EXPECT_EQ(tree.at("tree").at("branches"), 4);
  EXPECT_EQ(tree.at("io").at("variants").at(1).at("cl"), 240);
  for (const auto& g : p->pkg.meta.at("graphs"))
    if (g.at("name") == "eaglet_draft_tree_ar16_cl240") {
      std::map<std::string, nlohmann::json> outputs;
      for (const auto& out : g.at("outputs")) outputs[out.at("name").get<std::string>()] = out.value("shape", nlohmann::json());
      EXPECT_EQ(outputs["tree_tokens"], nlohmann::json({1, 4 + 4 * 16})) << g.dump();
      EXPECT_EQ(outputs["present.4.key"], kv_layout == "htp" ? nlohmann::json({4, 1, 32, 16}) : nlohmann::json({1, 4, 16, 32}))
          << "the catch-up rows, committed by the runner";
    }

  host::Runner& r = *p->runner;
  nlohmann::json options{{"draft", (p->dir / "assets/eaglet/eaglet").string()}};
  nlohmann::json per_depth = options;
  per_depth["draft_loop_graph"] = false;
  int64_t accepted = 0, accepted_per_depth = 0;
  for (const auto& prompt : heldout_prompts(3, 24, 3)) {
    auto want = plain_greedy(r, prompt, 40);
    host::SpeculativeStats one, each;
    EXPECT_EQ(eaglet(r, prompt, 40, &one, options), want);
    EXPECT_EQ(eaglet(r, prompt, 40, &each, per_depth), want);
    EXPECT_EQ(one.decoder["draft_loop"], "one graph a step");
    EXPECT_EQ(each.decoder["draft_loop"], "one launch per depth");
    int64_t calls = 0;
    for (const auto& [rows, n] : one.decoder["draft_tree_calls"].items()) calls += n.get<int64_t>();
    EXPECT_EQ(calls, one.target_forwards) << "one tree launch a step: " << one.decoder.dump();
    // The 24-token prompt's 24 entries at the first step: 8 through the draft's own 16-row
    // graph, into the cache the tree graph shares, the last 16 with the tree.
    EXPECT_EQ(one.decoder["draft_pass_rows"], nlohmann::json({{"8", 1}})) << one.decoder.dump();
    EXPECT_EQ(one.draft_forwards, calls + 1);
    EXPECT_GT(each.draft_forwards, 3 * each.target_forwards);
    EXPECT_EQ(one.target_forwards, each.target_forwards) << "the same trees";
    accepted += one.decoder["accepted_draft_tokens"].get<int64_t>();
    accepted_per_depth += each.decoder["accepted_draft_tokens"].get<int64_t>();
  }
  EXPECT_EQ(accepted, accepted_per_depth);

  // A package built for another tree: one clear error, not a wrong tree.
  nlohmann::json other = options;
  other["draft_len"] = 3;
  host::SpeculativeStats st;
  try {
    eaglet(r, heldout_prompts(1, 8)[0], 8, &st, other);
    ADD_FAILURE() << "a draft_len the tree graph was not built for was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("built for other draft_len / n_branches"), std::string::npos) << e.what();
  }
  fs::remove_all(work);
}
TEST(EagletPackage, TheDraftLoopIsOneGraphAStep) { expect_one_graph_a_step("hf"); }

// Near the context's end the tree's rows no longer fit (its graphs hold CL 64 - 16): the step
// drafts depth by depth on the draft's graphs, over the cache the two share, as deep as the
// draft's context allows, and the output equals plain greedy's to the last token.
TEST(EagletPackage, TheDraftLoopGraphHandsTheContextsEndToTheDraft) {
  fs::path model = test::model_dir("tiny_llama");
  fs::path work = fs::temp_directory_path() / ("nf_eaglet_tree_end_" + std::to_string(::getpid()));
  fs::remove_all(work);
  auto p = test::build_and_open(
      work, "[model]\nonnx = \"" + (model / "model.onnx").string() + "\"\n\n[[transform]]\nplugin = \"hidden_states\"\n\n"
            "[[transform]]\nplugin = \"arcl\"\narn = [1, 8]\ncontext_length = [64]\n\n"
            "[speculative]\ndecoder = \"eaglet\"\ndraft = \"" + kDraft + "\"\n\n[targets.cpu]\nbackend = \"cpu\"\n");
  host::Runner& r = *p->runner;
  const nlohmann::json options{{"draft", (p->dir / "assets/eaglet/eaglet").string()}};
  const std::vector<int32_t> prompt = heldout_prompts(1, 20)[0];
  const int n = static_cast<int>(64 - prompt.size() + 1);
  const auto want = plain_greedy(r, prompt, n);
  host::SpeculativeStats st;
  EXPECT_EQ(eaglet(r, prompt, n, &st, options), want);
  EXPECT_FALSE(st.decoder["draft_tree_calls"].empty()) << st.decoder.dump();
  EXPECT_TRUE(st.decoder["draft_pass_rows"].contains("4")) << "per-depth passes of 4 nodes near the end: " << st.decoder.dump();
  EXPECT_EQ(r.n_past(), 64u);
  // Depth by depth all the way (it ran out of draft context before: "runner: context full").
  nlohmann::json per_depth = options;
  per_depth["draft_loop_graph"] = false;
  EXPECT_EQ(eaglet(r, prompt, n, &st, per_depth), want);
  fs::remove_all(work);
}
TEST(EagletPackage, TheDraftLoopIsOneGraphAStepInTheHtpKvLayout) { expect_one_graph_a_step("htp"); }

// A draft role whose tree request is malformed (a third-party decoder's hook): arcl refuses it
// with one line naming the rule, before building anything.
TEST(EagletPackage, ArclRefusesAMalformedTreeRequest) {
  for (const char* bad : {R"({"depth": 0, "branches": 4})", R"({"depth": 5, "branches": 4, "feature_input": "x"})",
                          R"({"depth": 5, "branches": 40, "feature_input": "x", "feature_output": "y"})"}) {
    auto ms = host::load_source_model(test::model_dir("tiny_llama") + "/model.onnx", "");
    nf_context ctx{"test", {}};
    host::throw_if_error(plugin(NF_KIND_TRANSFORM, "hidden_states").transform()->apply("{}", host::handle(ms.get()), &ctx),
                         "hidden_states");
    const std::string options = nlohmann::json{{"draft", kDraft}}.dump();
    host::throw_if_error(plugin(NF_KIND_SPECULATIVE, "eaglet").speculative()->build(options.c_str(), host::handle(ms.get()), &ctx),
                         "eaglet build");
    nlohmann::json roles = nlohmann::json::parse(ms->metadata.at("roles"));
    ASSERT_TRUE(roles["draft"].contains("tree")) << roles.dump();
    roles["draft"]["tree"] = nlohmann::json::parse(bad);
    ms->metadata["roles"] = roles.dump();
    const size_t graphs = ms->graphs.size();
    try {
      host::throw_if_error(plugin(NF_KIND_TRANSFORM, "arcl").transform()->apply(R"({"arn": [1, 16], "context_length": [256]})",
                                                                                  host::handle(ms.get()), &ctx),
                           "arcl");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("a role's 'tree'"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
    EXPECT_EQ(ms->graphs.size(), graphs) << "nothing built before the refusal";
  }
}
