// The cpu backend: the float reference every other backend and transform is checked
// against. compile saves the model set; open loads it and prepares every graph into an
// execution plan (folding, weight packing: each distinct weight once for the whole set), so
// runs only do shape-dependent work.
#include <npuforge/engine/executor.h>
#include <npuforge/kernels/parallel.h>
#include <npuforge/plugin.hpp>

#include <malloc.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

namespace nf::cpu {
using namespace nf::engine;
namespace {

constexpr const char* kVersion = "0.1.0";

constexpr const char* kSchema = R"({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "threads": {"type": "integer", "minimum": 0, "default": 0,
                "description": "Worker threads for the kernels; 0 uses every core."},
    "weight_dtype": {"type": "string", "enum": ["float32", "int8", "int4"], "default": "float32",
                     "description": "Weight-only quantization of MatMul/Gemm weights without an encoding: int8 per channel, int4 blockwise."},
    "block_size": {"type": "integer", "minimum": 1, "default": 32,
                   "description": "int4 block size along the input dimension."},
    "use_encodings": {"type": "boolean", "default": true,
                      "description": "Run weights that carry an encoding (PER_CHANNEL, PER_BLOCK, LPBQ) on the integer kernel with exactly its scales and offsets."},
    "stream_weights": {"type": "boolean", "default": false,
                       "description": "For one-pass runs such as calibration: float weights are multiplied where they are stored instead of packed into copies, and a tied LM head's embedding is read in row blocks whose pages are let go after use, so it is never in memory whole. Decoding gets slower."}
  }
})";

struct Session {
  nf_model_set* ms = nullptr;
  bool owns_ms = false;  // loaded by open (released here) or lent by open_model_set
  SessionOptions opts;
  std::mutex mu;  // guards plans (prepared at open; a graph missing then is prepared on use)
  std::map<std::string, std::unique_ptr<GraphPlan>> plans;
  PackCache packs;  // packed weights shared by the graphs
  ~Session() {
    if (ms && owns_ms) host().model_set_release(ms);
  }
};

// Per-token buffers the host allocates for us (present KV, logits) come from malloc: keep
// glibc from serving them with mmap/munmap every step (its default threshold is 128 KiB).
void tune_malloc() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    return true;
  }();
  (void)done;
}

void prepare_all(Session& s) {
  tune_malloc();
  for (const Graph& g : ModelSet(s.ms).graphs()) {
    std::string name(g.name());
    if (!s.plans.count(name)) s.plans.emplace(name, std::make_unique<GraphPlan>(ModelSet(s.ms), g, s.opts, &s.packs));
  }
}

void compile_impl(const char* options_json, const nf_model_set* ms_in, const std::string& dir) {
  SessionOptions opts = SessionOptions::parse(Options(options_json).json());
  const ModelSet ms = ModelSet::view(ms_in);
  for (const Graph& g : ms.graphs()) check_supported(g);
  // model_set_save wants an existing, empty folder.
  std::error_code ec;
  std::filesystem::create_directory(dir + "/model", ec);
  if (ec) throw Error("cpu backend: cannot create " + dir + "/model: " + ec.message());
  check(host().model_set_save(ms_in, (dir + "/model").c_str()));
  nlohmann::json info = {{"backend", "cpu"}, {"version", kVersion}, {"options", opts.to_json()}};
  std::ofstream f(dir + "/cpu.json");
  f << info.dump(2) << "\n";
  if (!f) throw Error("cpu backend: cannot write " + dir + "/cpu.json");
}

nf_status* compile(const char* options_json, const nf_model_set* ms, const char* out_dir, nf_context*) {
  return NF_TRY(compile_impl(options_json, ms, out_dir));
}

nf_session* open_impl(const char* options_json, const std::string& dir) {
  // Options given to open win; otherwise those recorded at compile time.
  nlohmann::json opts = Options(options_json).json();
  if (opts.empty()) {
    std::ifstream f(dir + "/cpu.json");
    if (f) {
      nlohmann::json info = nlohmann::json::parse(f, nullptr, false);
      if (info.is_object() && info.contains("options")) opts = info["options"];
    }
  }
  auto s = std::make_unique<Session>();
  s->opts = SessionOptions::parse(opts);
  check(host().model_set_load((dir + "/model").c_str(), &s->ms));
  s->owns_ms = true;
  kernels::set_blas_threads(s->opts.threads);
  prepare_all(*s);
  return reinterpret_cast<nf_session*>(s.release());
}

nf_status* open(const char* options_json, const char* dir, nf_context*, nf_session** out) {
  return NF_TRY(*out = open_impl(options_json, dir));
}

nf_session* open_model_set_impl(const char* options_json, nf_model_set* ms) {
  auto s = std::make_unique<Session>();
  s->opts = SessionOptions::parse(Options(options_json).json());
  for (const Graph& g : ModelSet(ms).graphs()) check_supported(g);
  s->ms = ms;
  kernels::set_blas_threads(s->opts.threads);
  prepare_all(*s);
  return reinterpret_cast<nf_session*>(s.release());
}

nf_status* open_model_set(const char* options_json, nf_model_set* ms, nf_context*, nf_session** out) {
  return NF_TRY(*out = open_model_set_impl(options_json, ms));
}

void close(nf_session* s) { delete reinterpret_cast<Session*>(s); }

// The graph's plan, prepared on first use.
GraphPlan& plan_for(Session& s, const std::string& graph) {
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.plans.find(graph);
  if (it != s.plans.end()) return *it->second;
  nf_graph* g = host().model_set_find_graph(s.ms, graph.c_str());
  if (!g) throw Error("cpu backend: no graph '" + graph + "' in the model set");
  auto plan = std::make_unique<GraphPlan>(ModelSet(s.ms), Graph(g), s.opts, &s.packs);
  return *s.plans.emplace(graph, std::move(plan)).first->second;
}

nf_status* run(nf_session* s, const char* graph, const char* const* input_names, const nf_tensor* const* inputs,
               size_t n_inputs, const char* const* output_names, nf_tensor** outputs, size_t n_outputs) {
  return NF_TRY(plan_for(*reinterpret_cast<Session*>(s), graph)
                    .run(input_names, inputs, n_inputs, output_names, outputs, n_outputs));
}

const nf_backend_api kApi = {NF_ABI_VERSION, sizeof(nf_backend_api), compile, open, close, run, nullptr,
                              open_model_set, nullptr, nullptr};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_BACKEND, "cpu", kVersion,
    "Float reference backend: fp32 kernels over OpenBLAS, weight-only int8/int4 GEMV for decode", kSchema, &kApi};

}  // namespace
}  // namespace nf::cpu

NF_PLUGIN_LIBRARY(&nf::cpu::kDescriptor)
