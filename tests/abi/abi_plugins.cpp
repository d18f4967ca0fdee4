// One plugin of each kind, small but working, built four ways (tests/abi/CMakeLists.txt):
//   v1       against the frozen ABI-1 headers in tests/abi/v1 (plugins as built before issue 16)
//   short    the same, with the backend table cut before open_model_set (48 bytes)
//   grown    against today's headers, every table with one more entry at its end, as a
//            later ABI would ship them
//   oldhost  against today's headers, asking only for the host table of a host from before
//            the status codes (NF_PLUGIN_MIN_HOST_API_SIZE), which it then feature-detects
// NF_ABI_PREFIX names the plugins ("v1" gives v1_tag, v1_minmax, v1_eltwise, v1_greedy).
#ifdef NF_ABI_TEST_OLD_HOST
#define NF_PLUGIN_MIN_HOST_API_SIZE NF_SIZE_THROUGH(nf_host_api, runner_rows_available)
#endif
#include <npuforge/plugin.hpp>

// Built against headers of several ABI-1 revisions: each table is initialised with the
// entries they all have, and entries appended since stay NULL (absent).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#define NF_NAME(x) NF_ABI_PREFIX "_" x

namespace {

// ---- transform: every graph output gets an Identity in front of it -------------------
nf_status* tag_apply(const char* options, nf_model_set* handle, nf_context*) {
  return NF_TRY({
    nf::Options opts(options);
    nf::ModelSet ms(handle);
    size_t added = 0;
    for (nf::Graph g : ms.graphs())
      for (const std::string& out : g.outputs()) {
        for (nf::Node n : g.nodes())
          for (size_t i = 0; i < n.output_count(); ++i)
            if (n.output(i) == out) n.set_output(i, out + "_pre");
        g.add_node("Identity", {out + "_pre"}, {out});
        ++added;
      }
    ms.set_metadata(NF_NAME("tag"), {{"identities", added}, {"note", opts.get<std::string>("note", "")}});
  });
}

// ---- quant: an 8-bit symmetric per-tensor encoding for every float32 initializer -------
nf_status* minmax_apply(const char*, nf_model_set* handle, nf_calibration*, nf_context*) {
  return NF_TRY({
    nf::ModelSet ms(handle);
    for (nf::Graph g : ms.graphs())
      for (const std::string& name : g.initializer_names()) {
        nf::Tensor t = g.initializer(name);
        if (t.dtype() != NF_DTYPE_FLOAT32) continue;
        float max_abs = 0;
        for (int64_t i = 0; i < t.numel(); ++i) max_abs = std::max(max_abs, std::fabs(t.data_as<float>()[i]));
        float scale = max_abs > 0 ? max_abs / 127.f : 1.f;
        int32_t offset = -128;
        nf_encoding e{};
        e.struct_size = sizeof(nf_encoding);
        e.enc_type = NF_ENC_PER_TENSOR;
        e.bw = 8;
        e.is_sym = 1;
        e.axis = -1;
        e.block_axis = -1;
        e.num_scales = 1;
        e.scale = &scale;
        e.offset = &offset;
        ms.set_encoding(name, e);
      }
  });
}

// ---- backend: runs float32 Add / Mul / Sub / Identity graphs ----------------------------
struct Session {
  nf_model_set* ms;
  bool owned;  // loaded from artifacts
};

nf_status* eltwise_compile(const char*, const nf_model_set* ms, const char* out_dir, nf_context*) {
  return NF_TRY({ nf::check(nf::host().model_set_save(ms, out_dir)); });
}

nf_status* eltwise_open(const char*, const char* dir, nf_context*, nf_session** out) {
  return NF_TRY({
    nf_model_set* ms = nullptr;
    nf::check(nf::host().model_set_load(dir, &ms));
    *out = reinterpret_cast<nf_session*>(new Session{ms, true});
  });
}

[[maybe_unused]] nf_status* eltwise_open_model_set(const char*, nf_model_set* ms, nf_context*, nf_session** out) {
  return NF_TRY({ *out = reinterpret_cast<nf_session*>(new Session{ms, false}); });
}

void eltwise_close(nf_session* s) {
  auto* session = reinterpret_cast<Session*>(s);
  if (session->owned) nf::host().model_set_release(session->ms);
  delete session;
}

nf::Tensor eltwise(const std::string& op, const nf::Tensor& a, const nf::Tensor& b) {
  if (a.dtype() != NF_DTYPE_FLOAT32 || b.dtype() != NF_DTYPE_FLOAT32 || a.dims() != b.dims())
    throw nf::Error(op + ": want two float32 tensors of one shape");
  nf::Tensor r = nf::Tensor::create(NF_DTYPE_FLOAT32, a.dims());
  const float *x = a.data_as<float>(), *y = b.data_as<float>();
  float* z = r.mutable_as<float>();
  for (int64_t i = 0; i < a.numel(); ++i) z[i] = op == "Add" ? x[i] + y[i] : op == "Mul" ? x[i] * y[i] : x[i] - y[i];
  return r;
}

nf_status* eltwise_run(nf_session* s, const char* graph, const char* const* input_names, const nf_tensor* const* inputs,
                       size_t n_inputs, const char* const* output_names, nf_tensor** outputs, size_t n_outputs) {
  return NF_TRY({
    nf_graph* handle = nf::host().model_set_find_graph(reinterpret_cast<Session*>(s)->ms, graph);
#ifdef NF_HOST_HAS  // today's SDK: the status says what went wrong
    if (!handle) throw nf::Error(std::string("no graph '") + graph + "'", NF_STATUS_NOT_FOUND);
#else
    if (!handle) throw nf::Error(std::string("no graph '") + graph + "'");
#endif
    nf::Graph g(handle);
    std::map<std::string, nf::Tensor> env;
    for (const std::string& name : g.initializer_names()) env[name] = g.initializer(name);
    for (size_t i = 0; i < n_inputs; ++i) env[input_names[i]] = nf::Tensor::borrow(const_cast<nf_tensor*>(inputs[i]));
    auto value = [&](const std::string& name) {
      auto it = env.find(name);
      if (it == env.end()) throw nf::Error("value '" + name + "' is not computed");
      return it->second;
    };
    for (nf::Node n : g.nodes()) {
      std::string op(n.op_type());
      if (op == "Identity")
        env[n.output(0)] = value(n.input(0));
      else if (op == "Add" || op == "Mul" || op == "Sub")
        env[n.output(0)] = eltwise(op, value(n.input(0)), value(n.input(1)));
      else
        throw nf::Error("op " + op + " is not supported");
    }
    for (size_t i = 0; i < n_outputs; ++i) outputs[i] = value(output_names[i]).release();
  });
}

nf_status* eltwise_estimate(const char*, const char*, const char* workload, nf_json_sink sink, void* user) {
  return NF_TRY({
    std::string out = nlohmann::json{{"abi", NF_ABI_PREFIX}, {"workload", nlohmann::json::parse(workload)}}.dump();
    sink(user, out.c_str());
  });
}

// A backend table cut before open_model_set still has that member in today's struct; the
// host must never read it, so this one says so if it is ever called.
[[maybe_unused]] nf_status* read_past_struct_size(const char*, nf_model_set*, nf_context*, nf_session**) {
  return nf::make_status("the host called an entry past the table's struct_size");
}

// ---- speculative: proposes nothing, so every step is one plain greedy/sampled token ----
struct Greedy {
  static constexpr const char* kName = NF_NAME("greedy");
  Greedy(const nf::Options&, nf_runner* r, const int32_t*, size_t, nf::Context) : runner(r) {}
  size_t step(float* last_logits, int32_t (*sample)(void*, const float*), void* user, int32_t* out, size_t) {
    out[0] = sample(user, last_logits);
    ++steps;
    if (nf::host().runner_rows_available(runner) == 0) return 1;  // context full: last token
    const int32_t parent = -1, row = 0;
    nf::check(nf::host().runner_forward(runner, &out[0], &parent, 1, last_logits));
    nf::check(nf::host().runner_commit(runner, &row, 1));
    return 1;
  }
  std::string stats() const { return nlohmann::json{{"steps", steps}}.dump(); }
  nf_runner* runner;
  int64_t steps = 0;
};

#ifdef NF_ABI_TEST_GROWN
// A table as a later ABI ships it: today's layout, then one entry this host does not know.
template <class T>
struct Grown {
  T base;
  void (*later_entry)(void);
};
template <class T>
Grown<T> grow(T table) {
  table.struct_size = sizeof(Grown<T>);
  return {table, [] {}};
}
#define NF_TABLE(T, ...) grow<T>(T{__VA_ARGS__})
#define NF_BASE(table) (&(table).base)
#else
#define NF_TABLE(T, ...) T{__VA_ARGS__}
#define NF_BASE(table) (&(table))
#endif

#ifdef NF_ABI_TEST_SHORT_BACKEND
const uint32_t backend_size = offsetof(nf_backend_api, open_model_set);  // 48: built before open_model_set
const auto backend_api = NF_TABLE(nf_backend_api, NF_ABI_VERSION, backend_size, eltwise_compile, eltwise_open,
                                  eltwise_close, eltwise_run, eltwise_estimate, read_past_struct_size);
#else
const auto backend_api = NF_TABLE(nf_backend_api, NF_ABI_VERSION, sizeof(nf_backend_api), eltwise_compile,
                                  eltwise_open, eltwise_close, eltwise_run, eltwise_estimate, eltwise_open_model_set);
#endif
const auto transform_api = NF_TABLE(nf_transform_api, NF_ABI_VERSION, sizeof(nf_transform_api), tag_apply);
const auto quant_api = NF_TABLE(nf_quant_api, NF_ABI_VERSION, sizeof(nf_quant_api), minmax_apply);
const auto speculative_api = NF_TABLE(nf_speculative_api, nf::SpeculativeTable<Greedy>::api);

const auto transform_desc = NF_TABLE(nf_plugin_descriptor, NF_ABI_VERSION, sizeof(nf_plugin_descriptor),
                                     NF_KIND_TRANSFORM, NF_NAME("tag"), "1.0.0",
                                     "Test transform: an Identity in front of every graph output",
                                     R"({"type": "object", "additionalProperties": false,
                                         "properties": {"note": {"type": "string", "default": "",
                                                                 "description": "copied to the metadata"}}})",
                                     NF_BASE(transform_api));
const auto quant_desc = NF_TABLE(nf_plugin_descriptor, NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_QUANT,
                                 NF_NAME("minmax"), "1.0.0", "Test quant: 8-bit per-tensor weight encodings",
                                 R"({"type": "object", "additionalProperties": false})", NF_BASE(quant_api));
const auto backend_desc = NF_TABLE(nf_plugin_descriptor, NF_ABI_VERSION, sizeof(nf_plugin_descriptor),
                                   NF_KIND_BACKEND, NF_NAME("eltwise"), "1.0.0",
                                   "Test backend: float32 Add/Mul/Sub/Identity graphs",
                                   R"({"type": "object", "additionalProperties": false})", NF_BASE(backend_api));
const auto speculative_desc = NF_TABLE(nf_plugin_descriptor, NF_ABI_VERSION, sizeof(nf_plugin_descriptor),
                                       NF_KIND_SPECULATIVE, NF_NAME("greedy"), "1.0.0",
                                       "Test decoder: one target token per step",
                                       R"({"type": "object", "additionalProperties": false})",
                                       NF_BASE(speculative_api));

}  // namespace

#if defined(NF_ABI_TEST_SHORT_BACKEND)
NF_PLUGIN_LIBRARY(&backend_desc)

#elif defined(NF_ABI_TEST_GROWN)
// NF_PLUGIN_LIBRARY by hand, for a grown library table.
extern "C" NF_EXPORT uint32_t npuforge_plugin_abi_version(void) { return NF_ABI_VERSION; }
extern "C" NF_EXPORT nf_status* npuforge_plugin_entry(uint32_t, const nf_host_api* host, const nf_plugin_library** out) {
  static const nf_plugin_descriptor* const plugins[] = {NF_BASE(transform_desc), NF_BASE(quant_desc),
                                                        NF_BASE(backend_desc), NF_BASE(speculative_desc)};
  static const auto library = NF_TABLE(nf_plugin_library, NF_ABI_VERSION, 0, 4, plugins);
  ::nf::host_api_slot() = host;
  *out = NF_BASE(library);
  return nullptr;
}

#else
NF_PLUGIN_LIBRARY(&transform_desc, &quant_desc, &backend_desc, &speculative_desc)
#endif
