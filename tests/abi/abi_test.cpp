// ABI evolution (sdk/docs/abi.md): plugins built against the frozen ABI-1 headers load and
// work in this host, a table cut short loads with its missing entries absent, tables grown
// by an entry this host does not know load beside the old ones, and status codes cross.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "api/host_api.h"
#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "runner/generate.h"
#include "runner/runner.h"
#include "runner/speculative.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "support/plugins.h"

using namespace nf;
using host::PluginInfo;
using host::Registry;
namespace fs = std::filesystem;

namespace {

std::string case_dir(const std::string& c) { return std::string(NF_ABI_PLUGIN_DIR) + "/" + c; }

// A registry over the given case folders; every plugin in them must load.
std::unique_ptr<Registry> load(const std::vector<std::string>& cases) {
  auto reg = std::make_unique<Registry>();
  std::vector<std::string> dirs;
  for (const auto& c : cases) dirs.push_back(case_dir(c));
  reg->load_directories(dirs);
  for (const auto& w : reg->warnings()) ADD_FAILURE() << w;
  return reg;
}

const PluginInfo& find(const Registry& reg, nf_plugin_kind kind, const std::string& name) {
  const PluginInfo* p = reg.find(kind, name);
  if (!p) throw std::runtime_error(name + " not loaded");
  return *p;
}

// One graph "main": y = (x + w) * x over float32 [2, 3].
std::unique_ptr<ir::ModelSet> tiny_model() {
  auto ms = std::make_unique<ir::ModelSet>();
  auto g = std::make_unique<ir::Graph>();
  g->name = "main";
  g->opsets[""] = 17;
  std::vector<ir::Dim> shape{{2, ""}, {3, ""}};
  g->inputs = {"x"};
  g->outputs = {"y"};
  g->types["x"] = {NF_DTYPE_FLOAT32, shape};
  g->types["y"] = {NF_DTYPE_FLOAT32, shape};
  g->initializers["w"] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 3}, {1, 2, 3, -4, 5, 6}));
  auto node = [&](const char* op, std::vector<std::string> in, std::string out) {
    auto n = std::make_unique<ir::Node>();
    n->op_type = op;
    n->name = out;
    n->inputs = std::move(in);
    n->outputs = {std::move(out)};
    g->nodes.push_back(std::move(n));
  };
  node("Add", {"x", "w"}, "s");
  node("Mul", {"s", "x"}, "y");
  ms->graphs.push_back(std::move(g));
  return ms;
}

// An empty folder for a backend's artifacts, new on every call.
fs::path artifacts_dir(const std::string& tag) {
  static int n = 0;
  fs::path dir = test::process_dir("abi") / (tag + "_" + std::to_string(n++));
  fs::create_directories(dir);
  return dir;
}

std::vector<float> run_main(host::BackendSession& s) {
  auto x = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, {2, 3}, {1, 1, 1, 2, 2, 2}));
  auto out = s.run("main", {{"x", x}}, {"y"});
  const float* y = out.at(0)->tensor.as<float>();
  return {y, y + 6};
}
const std::vector<float> kWant{2, 3, 4, -4, 14, 16};  // (x + w) * x

void apply_transform(const PluginInfo& p, ir::ModelSet& ms, const std::string& options) {
  nf_context ctx{"transform " + p.name, {}};
  host::throw_if_error(p.transform()->apply(options.c_str(), host::handle(&ms), &ctx), p.name);
}

// The transform, quant and backend of one build, end to end on the tiny model: the
// transform's Identity nodes and the quant's encodings land, and the backend compiles,
// opens and runs the result.
void smoke(const Registry& reg, const std::string& prefix) {
  SCOPED_TRACE(prefix);
  auto ms = tiny_model();
  apply_transform(find(reg, NF_KIND_TRANSFORM, prefix + "_tag"), *ms, R"({"note": "hello"})");
  EXPECT_EQ(ms->graphs[0]->nodes.back()->op_type, "Identity");
  EXPECT_EQ(nlohmann::json::parse(ms->metadata.at(prefix + "_tag")),
            (nlohmann::json{{"identities", 1}, {"note", "hello"}}));

  const PluginInfo& quant = find(reg, NF_KIND_QUANT, prefix + "_minmax");
  nf_context qctx{"quant", {}};
  host::throw_if_error(quant.quant()->apply("{}", host::handle(ms.get()), nullptr, &qctx), quant.name);
  ASSERT_EQ(ms->encodings.count("w"), 1u);
  EXPECT_FLOAT_EQ(ms->encodings.at("w").scale.at(0), 6.f / 127.f);

  const PluginInfo& backend = find(reg, NF_KIND_BACKEND, prefix + "_eltwise");
  fs::path artifacts = artifacts_dir(prefix);
  nf_context cctx{"backend", {}};
  host::throw_if_error(backend.backend()->compile("{}", host::handle(ms.get()), artifacts.c_str(), &cctx), backend.name);
  auto session = host::BackendSession::open_artifacts(backend, nlohmann::json::object(), artifacts.string());
  EXPECT_EQ(run_main(*session), kWant);
}

}  // namespace

TEST(Abi, FrozenV1PluginsOfEveryKindLoadWithTheirSizes) {
  auto reg = load({"v1"});
  EXPECT_EQ(reg->plugins().size(), 4u);
  EXPECT_EQ(find(*reg, NF_KIND_TRANSFORM, "v1_tag").table_size, 16u);
  EXPECT_EQ(find(*reg, NF_KIND_QUANT, "v1_minmax").table_size, 16u);
  EXPECT_EQ(find(*reg, NF_KIND_BACKEND, "v1_eltwise").table_size, 56u);
  EXPECT_EQ(find(*reg, NF_KIND_SPECULATIVE, "v1_greedy").table_size, 40u);
  EXPECT_EQ(find(*reg, NF_KIND_TRANSFORM, "v1_tag").schema["properties"]["note"]["type"], "string");
  // `validate` was appended after these were built: absent, so check and build skip it.
  EXPECT_EQ(find(*reg, NF_KIND_TRANSFORM, "v1_tag").transform()->validate, nullptr);
  EXPECT_EQ(find(*reg, NF_KIND_QUANT, "v1_minmax").quant()->validate, nullptr);
  // And the split entries: a build runs this recipe as one stage under every executor.
  EXPECT_EQ(find(*reg, NF_KIND_QUANT, "v1_minmax").quant()->shard_count, nullptr);
  EXPECT_EQ(find(*reg, NF_KIND_QUANT, "v1_minmax").quant()->apply_shard, nullptr);
  // So was the speculative build hook: a build with this decoder has no hook stage.
  EXPECT_EQ(find(*reg, NF_KIND_SPECULATIVE, "v1_greedy").speculative()->build, nullptr);
}

TEST(Abi, FrozenV1TransformQuantAndBackendWork) {
  auto reg = load({"v1"});
  smoke(*reg, "v1");
  // The backend's optional entries are there and work: open_model_set and estimate.
  const PluginInfo& backend = find(*reg, NF_KIND_BACKEND, "v1_eltwise");
  auto ms = tiny_model();
  auto session = host::BackendSession::open_model_set(backend, nlohmann::json::object(), *ms);
  EXPECT_EQ(run_main(*session), kWant);
  std::string out;
  host::throw_if_error(backend.backend()->estimate("{}", "", R"({"prompt_len": 3})",
                                                   [](void* u, const char* j) { *static_cast<std::string*>(u) = j; }, &out),
                       "estimate");
  EXPECT_EQ(nlohmann::json::parse(out)["workload"]["prompt_len"], 3);
}

TEST(Abi, FrozenV1SpeculativeDecoderGeneratesWhatGreedyDoes) {
  auto reg = load({"v1"});
  auto ms = host::load_source_model(test::model_dir("tiny_llama") + "/model.onnx", "");
  const PluginInfo& cpu = test::plugin(NF_KIND_BACKEND, "cpu");
  nlohmann::json options = nlohmann::json::object();
  manifest::validate_json(cpu.schema, options);
  auto session = host::BackendSession::open_model_set(cpu, options, *ms);
  host::DynamicRunner runner(*session, host::DecoderIO::from_spec(host::graph_specs(*ms)[0]));
  const std::vector<int32_t> prompt{1, 5, 9, 5, 9};
  host::Sampler greedy({});
  auto want = host::generate(runner, prompt, 12, greedy, {}, nullptr, nullptr);
  runner.reset();
  host::Sampler s({});
  host::SpeculativeStats st;
  auto got = host::generate_speculative(runner, find(*reg, NF_KIND_SPECULATIVE, "v1_greedy"), nlohmann::json::object(),
                                        prompt, 12, s, {}, nullptr, &st);
  EXPECT_EQ(got, want);
  EXPECT_EQ(st.decoder["steps"], 12);
}

TEST(Abi, ABackendTableWithoutOpenModelSetLoadsAndTheEntryIsAbsent) {
  auto reg = load({"short"});
  const PluginInfo& backend = find(*reg, NF_KIND_BACKEND, "short_eltwise");
  EXPECT_EQ(backend.table_size, 48u);
  EXPECT_NE(backend.backend()->estimate, nullptr);
  EXPECT_EQ(backend.backend()->open_model_set, nullptr);  // past struct_size: never read
  auto ms = tiny_model();
  try {
    host::BackendSession::open_model_set(backend, nlohmann::json::object(), *ms);
    ADD_FAILURE() << "open_model_set did not fail";
  } catch (const host::PluginError& e) {
    EXPECT_STREQ(e.what(), "backend 'short_eltwise' cannot run a model without compiling it first");
  }
  fs::path artifacts = artifacts_dir("short");
  nf_context ctx{"backend", {}};
  host::throw_if_error(backend.backend()->compile("{}", host::handle(ms.get()), artifacts.c_str(), &ctx), "compile");
  EXPECT_EQ(run_main(*host::BackendSession::open_artifacts(backend, nlohmann::json::object(), artifacts.string())), kWant);
}

TEST(Abi, TablesWithALaterEntryLoadBesideFrozenOnesAndBothWork) {
  auto reg = load({"v1", "grown"});
  EXPECT_EQ(reg->plugins().size(), 8u);
  // Each grown table is the host's layout plus one pointer; the host uses what it knows.
  EXPECT_EQ(find(*reg, NF_KIND_TRANSFORM, "grown_tag").table_size, sizeof(nf_transform_api) + sizeof(void*));
  EXPECT_EQ(find(*reg, NF_KIND_QUANT, "grown_minmax").table_size, sizeof(nf_quant_api) + sizeof(void*));
  EXPECT_EQ(find(*reg, NF_KIND_BACKEND, "grown_eltwise").table_size, sizeof(nf_backend_api) + sizeof(void*));
  EXPECT_EQ(find(*reg, NF_KIND_SPECULATIVE, "grown_greedy").table_size, sizeof(nf_speculative_api) + sizeof(void*));
  smoke(*reg, "v1");
  smoke(*reg, "grown");
}

TEST(Abi, StatusCodesCrossTheAbiAndOldPluginsSayFail) {
  auto reg = load({"v1", "grown"});
  auto ms = tiny_model();
  auto code_of_missing_graph = [&](const std::string& backend) {
    auto s = host::BackendSession::open_model_set(find(*reg, NF_KIND_BACKEND, backend), nlohmann::json::object(), *ms);
    try {
      s->run("nope", {}, {"y"});
    } catch (const host::PluginError& e) {
      EXPECT_STREQ(e.what(), ("backend '" + backend + "': no graph 'nope'").c_str());
      return e.code;
    }
    return NF_STATUS_OK;
  };
  EXPECT_EQ(code_of_missing_graph("grown_eltwise"), NF_STATUS_NOT_FOUND);
  EXPECT_EQ(code_of_missing_graph("v1_eltwise"), NF_STATUS_FAIL);  // ABI-1 plugins have no codes

  const nf_host_api* api = host::host_api();
  EXPECT_EQ(api->struct_size, sizeof(nf_host_api));
  EXPECT_EQ(api->status_code(nullptr), NF_STATUS_OK);
  nf_status* plain = api->status_create("plain");
  EXPECT_EQ(api->status_code(plain), NF_STATUS_FAIL);
  api->status_release(plain);
  nf_status* coded = api->status_create_code(NF_STATUS_UNSUPPORTED, "coded");
  EXPECT_EQ(api->status_code(coded), NF_STATUS_UNSUPPORTED);
  EXPECT_STREQ(api->status_message(coded), "coded");
  api->status_release(coded);
  nf_status* missing = api->model_set_remove_graph(host::handle(ms.get()), "nope");
  EXPECT_EQ(api->status_code(missing), NF_STATUS_NOT_FOUND);
  api->status_release(missing);
}

// The other direction: a plugin built against today's header meets a host whose table is
// older (704 bytes: before the status codes). By default it refuses, naming both sizes; one
// that lowers NF_PLUGIN_MIN_HOST_API_SIZE loads and plugin.hpp falls back to plain statuses.
TEST(Abi, APluginRefusesAnOlderHostTableUnlessItLowersItsMinimum) {
  static nf_host_api older = *host::host_api();
  older.struct_size = NF_SIZE_THROUGH(nf_host_api, runner_rows_available);
  auto enter = [](const std::string& path, const nf_host_api* host, const nf_plugin_library** out) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed, as the registry does
    if (!lib) throw std::runtime_error(dlerror());
    auto entry = reinterpret_cast<nf_entry_fn>(dlsym(lib, NF_ENTRY_SYMBOL));
    return entry(NF_ABI_VERSION, host, out);
  };
  const nf_plugin_library* library = nullptr;
  nf_status* st = enter(test::plugin_dir() / "libnpuforge_cpu.so", &older, &library);  // built as usual
  ASSERT_NE(st, nullptr);
  // A plugin built as usual needs the whole table of the SDK it was built with.
  EXPECT_EQ(std::string(host::host_api()->status_message(st)),
            "plugin needs host ABI 1 with a host table of at least " + std::to_string(sizeof(nf_host_api)) +
                " bytes, host has ABI 1 with 704 bytes; update npuforge");
  host::host_api()->status_release(st);

  auto missing_graph_code = [&](const nf_host_api* host) {
    EXPECT_EQ(enter(case_dir("oldhost") + "/libnf_abi_plugin_oldhost.so", host, &library), nullptr);
    const auto* api = static_cast<const nf_backend_api*>(library->plugins[2]->api);
    auto ms = tiny_model();
    nf_session* s = nullptr;
    EXPECT_EQ(api->open_model_set("{}", host::handle(ms.get()), nullptr, &s), nullptr);
    nf_tensor* out = nullptr;
    const char* name = "y";
    nf_status* err = api->run(s, "nope", nullptr, nullptr, 0, &name, &out, 1);
    api->close(s);
    EXPECT_STREQ(host::host_api()->status_message(err), "no graph 'nope'");
    nf_status_code code = host::host_api()->status_code(err);
    host::host_api()->status_release(err);
    return code;
  };
  EXPECT_EQ(missing_graph_code(&older), NF_STATUS_FAIL);  // status_create_code is absent
  EXPECT_EQ(missing_graph_code(host::host_api()), NF_STATUS_NOT_FOUND);
}
