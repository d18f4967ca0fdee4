// Header-only C++ layer over plugin.h for plugin authors: RAII handles, thin wrappers over
// host objects, an option reader, and NF_TRY which turns exceptions into statuses at the
// ABI boundary. Nothing here crosses the ABI: it all compiles into the plugin.
#pragma once

#include <npuforge/graph_roles.hpp>
#include <npuforge/plugin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nf {

// The host table handed to this library's entry point.
inline const nf_host_api*& host_api_slot() {
  static const nf_host_api* api = nullptr;
  return api;
}
inline const nf_host_api& host() { return *host_api_slot(); }

// Whether the host's table has `member` (entries appended after the host was built are
// absent). Only needed for entries past NF_PLUGIN_MIN_HOST_API_SIZE (see below).
#define NF_HOST_HAS(member) NF_HAS_ENTRY(nf_host_api, ::nf::host_api_slot(), member)

// An error a plugin reports; NF_TRY turns it into an nf_status with its code.
struct Error : std::runtime_error {
  explicit Error(const std::string& message, nf_status_code c = NF_STATUS_FAIL) : std::runtime_error(message), code(c) {}
  nf_status_code code;
};

// Throws the message (and code) of a failed host call.
inline void check(nf_status* st) {
  if (!st) return;
  std::string msg = host().status_message(st);
  nf_status_code code = NF_HOST_HAS(status_code) ? host().status_code(st) : NF_STATUS_FAIL;
  host().status_release(st);
  throw Error(msg, code);
}

// A status with a code; a host without codes gets the message alone.
inline nf_status* make_status(const char* msg, nf_status_code code = NF_STATUS_FAIL) {
  if (code != NF_STATUS_FAIL && NF_HOST_HAS(status_create_code)) return host().status_create_code(code, msg);
  return host().status_create(msg);
}

// Wraps a plugin function body: `return NF_TRY({ ... });` (variadic: commas inside the
// body, as in brace initializers, are fine).
#define NF_TRY(...)                                           \
  [&]() -> nf_status* {                                       \
    try {                                                     \
      __VA_ARGS__;                                            \
      return nullptr;                                         \
    } catch (const ::nf::Error& e) {                          \
      return ::nf::make_status(e.what(), e.code);             \
    } catch (const std::exception& e) {                       \
      return ::nf::make_status(e.what());                     \
    } catch (...) {                                           \
      return ::nf::make_status("unknown error in plugin");    \
    }                                                         \
  }()

inline size_t dtype_size(nf_dtype t) {
  switch (t) {
    case NF_DTYPE_FLOAT32: case NF_DTYPE_INT32: case NF_DTYPE_UINT32: return 4;
    case NF_DTYPE_UINT8: case NF_DTYPE_INT8: case NF_DTYPE_BOOL: return 1;
    case NF_DTYPE_UINT16: case NF_DTYPE_INT16: case NF_DTYPE_FLOAT16: case NF_DTYPE_BFLOAT16: return 2;
    case NF_DTYPE_INT64: case NF_DTYPE_UINT64: case NF_DTYPE_FLOAT64: return 8;
    default: return 0;
  }
}

inline const char* dtype_name(nf_dtype t) {
  switch (t) {
    case NF_DTYPE_FLOAT32: return "float32";
    case NF_DTYPE_UINT8: return "uint8";
    case NF_DTYPE_INT8: return "int8";
    case NF_DTYPE_UINT16: return "uint16";
    case NF_DTYPE_INT16: return "int16";
    case NF_DTYPE_INT32: return "int32";
    case NF_DTYPE_INT64: return "int64";
    case NF_DTYPE_STRING: return "string";
    case NF_DTYPE_BOOL: return "bool";
    case NF_DTYPE_FLOAT16: return "float16";
    case NF_DTYPE_FLOAT64: return "float64";
    case NF_DTYPE_UINT32: return "uint32";
    case NF_DTYPE_UINT64: return "uint64";
    case NF_DTYPE_BFLOAT16: return "bfloat16";
    case NF_DTYPE_UINT4: return "uint4";
    case NF_DTYPE_INT4: return "int4";
    default: return "undefined";
  }
}

// Owning reference to a host tensor.
class Tensor {
 public:
  Tensor() = default;
  // Adopts a reference (new tensors, run outputs).
  static Tensor adopt(nf_tensor* t) { Tensor r; r.t_ = t; return r; }
  // Takes a new reference to a borrowed tensor (initializers).
  static Tensor borrow(nf_tensor* t) { if (t) host().tensor_retain(t); return adopt(t); }
  static Tensor create(nf_dtype dtype, std::span<const int64_t> dims) {
    nf_tensor* t = nullptr;
    check(host().tensor_create(dtype, dims.data(), dims.size(), &t));
    return adopt(t);
  }
  Tensor(const Tensor& o) : t_(o.t_) { if (t_) host().tensor_retain(t_); }
  Tensor(Tensor&& o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
  Tensor& operator=(Tensor o) noexcept { std::swap(t_, o.t_); return *this; }
  ~Tensor() { if (t_) host().tensor_release(t_); }

  explicit operator bool() const { return t_ != nullptr; }
  nf_tensor* get() const { return t_; }
  nf_tensor* release() { return std::exchange(t_, nullptr); }
  nf_dtype dtype() const { return host().tensor_dtype(t_); }
  std::vector<int64_t> dims() const {
    const int64_t* d = host().tensor_dims(t_);
    return {d, d + host().tensor_rank(t_)};
  }
  int64_t numel() const {  // straight from the host's dims: no copy of them
    const int64_t* d = host().tensor_dims(t_);
    return std::accumulate(d, d + host().tensor_rank(t_), int64_t{1}, std::multiplies<int64_t>());
  }
  size_t nbytes() const { return host().tensor_nbytes(t_); }
  const void* data() const { return host().tensor_data(t_); }
  void* mutable_data() { return host().tensor_mutable_data(t_); }
  template <class T> const T* data_as() const { return static_cast<const T*>(data()); }
  template <class T> T* mutable_as() { return static_cast<T*>(mutable_data()); }
  // Lets bytes [offset, offset + n) of a mapped weight leave memory until read again (a
  // no-op for other tensors, and on hosts without tensor_drop_pages).
  void drop_pages(size_t offset, size_t n) const {
    if (t_ && NF_HOST_HAS(tensor_drop_pages)) host().tensor_drop_pages(t_, offset, n);
  }

 private:
  nf_tensor* t_ = nullptr;
};

// Non-owning view of a node.
class Node {
 public:
  explicit Node(nf_node* n) : n_(n) {}
  nf_node* get() const { return n_; }
  std::string_view op_type() const { return host().node_op_type(n_); }
  std::string_view domain() const { return host().node_domain(n_); }
  std::string_view name() const { return host().node_name(n_); }
  size_t input_count() const { return host().node_input_count(n_); }
  size_t output_count() const { return host().node_output_count(n_); }
  std::string input(size_t i) const { return i < input_count() ? host().node_input(n_, i) : ""; }
  std::string output(size_t i) const {
    const char* o = host().node_output(n_, i);  // NULL past the end
    if (!o) throw std::out_of_range("node output " + std::to_string(i) + " of " + std::string(name()) + ": no such output");
    return o;
  }
  std::vector<std::string> inputs() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < input_count(); ++i) r.push_back(input(i));
    return r;
  }
  std::vector<std::string> outputs() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < output_count(); ++i) r.push_back(output(i));
    return r;
  }
  void set_input(size_t i, const std::string& v) { check(host().node_set_input(n_, i, v.c_str())); }
  void set_output(size_t i, const std::string& v) { check(host().node_set_output(n_, i, v.c_str())); }
  bool has_attr(const char* name) const { return host().node_attr_type(n_, name) != NF_ATTR_UNDEFINED; }
  int64_t attr_int(const char* name, int64_t dflt) const {
    int64_t v;
    return host().node_attr_int(n_, name, &v) == 0 ? v : dflt;
  }
  float attr_float(const char* name, float dflt) const {
    float v;
    return host().node_attr_float(n_, name, &v) == 0 ? v : dflt;
  }
  std::string attr_string(const char* name, const std::string& dflt) const {
    const char* v;
    return host().node_attr_string(n_, name, &v) == 0 ? std::string(v) : dflt;
  }
  std::vector<int64_t> attr_ints(const char* name, std::vector<int64_t> dflt = {}) const {
    const int64_t* v; size_t n;
    return host().node_attr_ints(n_, name, &v, &n) == 0 ? std::vector<int64_t>(v, v + n) : dflt;
  }
  std::vector<float> attr_floats(const char* name, std::vector<float> dflt = {}) const {
    const float* v; size_t n;
    return host().node_attr_floats(n_, name, &v, &n) == 0 ? std::vector<float>(v, v + n) : dflt;
  }
  Tensor attr_tensor(const char* name) const {
    nf_tensor* t = nullptr;
    return host().node_attr_tensor(n_, name, &t) == 0 ? Tensor::borrow(t) : Tensor();
  }
  void set_attr(const char* name, int64_t v) { check(host().node_set_attr_int(n_, name, v)); }
  void set_attr(const char* name, float v) { check(host().node_set_attr_float(n_, name, v)); }
  void set_attr(const char* name, const std::string& v) { check(host().node_set_attr_string(n_, name, v.c_str())); }
  void set_attr(const char* name, const std::vector<int64_t>& v) {
    check(host().node_set_attr_ints(n_, name, v.data(), v.size()));
  }
  void set_attr(const char* name, const std::vector<float>& v) {
    check(host().node_set_attr_floats(n_, name, v.data(), v.size()));
  }
  void set_attr(const char* name, const Tensor& t) { check(host().node_set_attr_tensor(n_, name, t.get())); }

 private:
  nf_node* n_;
};

struct ValueType {
  nf_dtype dtype = NF_DTYPE_UNDEFINED;
  std::vector<int64_t> dims;          // < 0: symbolic
  std::vector<std::string> dim_params;
};

// Non-owning view of a graph.
class Graph {
 public:
  explicit Graph(nf_graph* g) : g_(g) {}
  nf_graph* get() const { return g_; }
  std::string name() const { return host().graph_name(g_); }
  size_t node_count() const { return host().graph_node_count(g_); }
  Node node(size_t i) const { return Node(host().graph_node(g_, i)); }
  std::vector<Node> nodes() const {
    std::vector<Node> r;
    for (size_t i = 0; i < node_count(); ++i) r.push_back(node(i));
    return r;
  }
  Node add_node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                const std::string& name = "", const std::string& domain = "") {
    std::vector<const char*> i, o;
    for (auto& s : in) i.push_back(s.c_str());
    for (auto& s : out) o.push_back(s.c_str());
    nf_node* n = nullptr;
    check(host().graph_add_node(g_, op.c_str(), domain.c_str(), name.c_str(), i.data(), i.size(), o.data(),
                                o.size(), &n));
    return Node(n);
  }
  void remove_node(Node n) { check(host().graph_remove_node(g_, n.get())); }
  void sort() { check(host().graph_sort(g_)); }
  std::vector<std::string> inputs() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < host().graph_input_count(g_); ++i) r.push_back(host().graph_input(g_, i));
    return r;
  }
  std::vector<std::string> outputs() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < host().graph_output_count(g_); ++i) r.push_back(host().graph_output(g_, i));
    return r;
  }
  void set_inputs(const std::vector<std::string>& names) { set_list(names, host().graph_set_inputs); }
  void set_outputs(const std::vector<std::string>& names) { set_list(names, host().graph_set_outputs); }
  bool value_type(const std::string& v, ValueType* out) const {
    nf_dtype dt; size_t rank; const int64_t* dims;
    if (host().graph_value_type(g_, v.c_str(), &dt, &rank, &dims) != 0) return false;
    out->dtype = dt;
    out->dims.assign(dims, dims + rank);
    out->dim_params.clear();
    for (size_t i = 0; i < rank; ++i) {
      const char* p = host().graph_value_dim_param(g_, v.c_str(), i);
      out->dim_params.emplace_back(p ? p : "");
    }
    return true;
  }
  void set_value_type(const std::string& v, nf_dtype dt, const std::vector<int64_t>& dims,
                      const std::vector<std::string>& params = {}) {
    std::vector<const char*> p;
    for (size_t i = 0; i < dims.size(); ++i) p.push_back(i < params.size() ? params[i].c_str() : "");
    check(host().graph_set_value_type(g_, v.c_str(), dt, dims.data(), p.data(), dims.size()));
  }
  std::vector<std::string> initializer_names() const {
    std::vector<std::string> r;
    for (size_t i = 0; i < host().graph_initializer_count(g_); ++i) r.push_back(host().graph_initializer_name(g_, i));
    return r;
  }
  Tensor initializer(const std::string& name) const {
    return Tensor::borrow(host().graph_initializer(g_, name.c_str()));
  }
  void set_initializer(const std::string& name, const Tensor& t) {
    check(host().graph_set_initializer(g_, name.c_str(), t.get()));
  }
  void remove_initializer(const std::string& name) { check(host().graph_remove_initializer(g_, name.c_str())); }
  int64_t opset(const char* domain = "") const { return host().graph_opset(g_, domain); }
  // Renames values everywhere in the graph (old name -> new name).
  void rename_values(const std::map<std::string, std::string>& renames) {
    std::vector<const char*> from, to;
    for (const auto& [a, b] : renames) {
      from.push_back(a.c_str());
      to.push_back(b.c_str());
    }
    check(host().graph_rename_values(g_, from.data(), to.data(), from.size()));
  }

 private:
  template <class F>
  void set_list(const std::vector<std::string>& names, F fn) {
    std::vector<const char*> p;
    for (auto& s : names) p.push_back(s.c_str());
    check(fn(g_, p.data(), p.size()));
  }
  nf_graph* g_;
};

// Non-owning view of a model set.
class ModelSet {
 public:
  explicit ModelSet(nf_model_set* ms) : ms_(ms) {}
  // A read-only view (a validate entry's model set): call only the reading members.
  static ModelSet view(const nf_model_set* ms) { return ModelSet(const_cast<nf_model_set*>(ms)); }
  nf_model_set* get() const { return ms_; }
  size_t graph_count() const { return host().model_set_graph_count(ms_); }
  Graph graph(size_t i) const { return Graph(host().model_set_graph(ms_, i)); }
  std::vector<Graph> graphs() const {
    std::vector<Graph> r;
    for (size_t i = 0; i < graph_count(); ++i) r.push_back(graph(i));
    return r;
  }
  // The target decoder's graphs: every graph no role of metadata "roles" lists (graph_roles.hpp).
  std::vector<Graph> target_graphs() const {
    const nlohmann::json roles = metadata(roles::kMetadataKey);
    std::vector<Graph> r;
    for (const Graph& g : graphs())
      if (roles::is_target(roles, g.name())) r.push_back(g);
    return r;
  }
  Graph add_graph(const std::string& name, const Graph* source = nullptr) {
    nf_graph* g = nullptr;
    check(host().model_set_add_graph(ms_, name.c_str(), source ? source->get() : nullptr, &g));
    return Graph(g);
  }
  void remove_graph(const std::string& name) { check(host().model_set_remove_graph(ms_, name.c_str())); }
  // The graph of an ONNX file, added as `name` (a build hook's own graph).
  Graph import_graph(const std::string& name, const std::string& onnx_path) {
    nf_graph* g = nullptr;
    check(host().model_set_import_graph(ms_, name.c_str(), onnx_path.c_str(), &g));
    return Graph(g);
  }
  nlohmann::json metadata(const char* key) const {
    return nlohmann::json::parse(host().model_set_get_metadata(ms_, key));
  }
  void set_metadata(const char* key, const nlohmann::json& v) {
    check(host().model_set_set_metadata(ms_, key, v.dump().c_str()));
  }
  const nf_encoding* encoding(const std::string& tensor) const {
    return host().model_set_get_encoding(ms_, tensor.c_str());
  }
  void set_encoding(const std::string& tensor, const nf_encoding& e) {
    check(host().model_set_set_encoding(ms_, tensor.c_str(), &e));
  }

 private:
  nf_model_set* ms_;
};

// Plugin context: logging and progress with cancellation.
class Context {
 public:
  explicit Context(nf_context* c) : c_(c) {}
  void log(nf_log_level lvl, const std::string& msg) const { host().log(c_, lvl, msg.c_str()); }
  void info(const std::string& msg) const { log(NF_LOG_INFO, msg); }
  void warn(const std::string& msg) const { log(NF_LOG_WARN, msg); }
  void debug(const std::string& msg) const { log(NF_LOG_DEBUG, msg); }
  // Reports progress; throws when the user cancelled.
  void progress(uint64_t done, uint64_t total, const std::string& what) const {
    if (host().progress(c_, done, total, what.c_str())) throw Error("cancelled", NF_STATUS_CANCELLED);
  }
  // Checkpoints of a long stage (nf_host_api checkpoint_save): a step's result saved under
  // `name`, found again when the interrupted build reruns. No-ops on hosts without them.
  void checkpoint_save(const std::string& name, const std::vector<uint8_t>& bytes) const {
    if (NF_HOST_HAS(checkpoint_save)) check(host().checkpoint_save(c_, name.c_str(), bytes.data(), bytes.size()));
  }
  // The bytes saved under `name`, or false when there are none.
  bool checkpoint_load(const std::string& name, std::vector<uint8_t>* bytes) const {
    if (!NF_HOST_HAS(checkpoint_load)) return false;
    nf_tensor* t = nullptr;
    check(host().checkpoint_load(c_, name.c_str(), &t));
    if (!t) return false;
    Tensor held = Tensor::adopt(t);
    const auto* p = static_cast<const uint8_t*>(host().tensor_data(t));
    bytes->assign(p, p + host().tensor_nbytes(t));
    return true;
  }

 private:
  nf_context* c_;
};

// Reads the options object the host validated against the plugin's schema. The schema's
// defaults are already filled in by the host, so `get` with a fallback is for safety only.
class Options {
 public:
  explicit Options(const char* json) : j_(json && *json ? nlohmann::json::parse(json) : nlohmann::json::object()) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  template <class T>
  T get(const char* key, T fallback) const {
    return has(key) ? j_[key].get<T>() : fallback;
  }
  const nlohmann::json& json() const { return j_; }

 private:
  nlohmann::json j_;
};

// The `graph_pass` workload of nf_backend_api.estimate (host/cli/cmd_estimate.cpp): one
// pass of `rows` rows through the linear layers [K, N] of a graph the package does not
// hold, such as a speculative decoder's draft. Backends price it at their own widths.
struct GraphPass {
  std::vector<std::array<int64_t, 2>> linears;
  double rows = 0;

  // Throws Error, prefixed with `backend`, when `g` is not {"linears": [[K, N], ...], "rows": R > 0}.
  static GraphPass from_json(const nlohmann::json& g, const std::string& backend) {
    if (!g.is_object() || !g.contains("linears") || !g["linears"].is_array() || !g.contains("rows") ||
        !g["rows"].is_number() || !(g["rows"].get<double>() > 0))
      throw Error(backend + ": estimate: graph_pass needs \"linears\": [[K, N], ...] and \"rows\" > 0");
    GraphPass p;
    p.rows = g["rows"].get<double>();
    for (const auto& kn : g["linears"]) {
      if (!kn.is_array() || kn.size() != 2 || !kn[0].is_number_integer() || !kn[1].is_number_integer())
        throw Error(backend + ": estimate: graph_pass.linears entries are [K, N]");
      p.linears.push_back({kn[0].get<int64_t>(), kn[1].get<int64_t>()});
    }
    return p;
  }
};

// The speculative table over a decoder class D, which provides
//   static constexpr const char* kName;
//   D(const Options&, nf_runner*, const int32_t* prompt, size_t n_prompt, Context);
//   size_t step(float* last_logits, int32_t (*sample)(void*, const float*), void* user,
//               int32_t* out_tokens, size_t max_out);   // tokens accepted and committed
//   std::string stats() const;                          // a JSON object
// and optionally the build hook (nf_speculative_api.build)
//   static void build(const Options&, ModelSet, const Context&);
// Exceptions become status objects; an empty prompt is refused before D is built.
template <class D>
struct SpeculativeTable {
  static nf_status* create(const char* options_json, nf_runner* runner, const int32_t* prompt, size_t n_prompt,
                           nf_context* ctx, nf_decoder** out) {
    return NF_TRY({
      if (n_prompt == 0) throw Error(std::string(D::kName) + ": empty prompt");
      *out = reinterpret_cast<nf_decoder*>(new D(Options(options_json), runner, prompt, n_prompt, Context(ctx)));
    });
  }
  static void release(nf_decoder* d) { delete reinterpret_cast<D*>(d); }
  static nf_status* step(nf_decoder* d, float* last_logits, int32_t (*sample)(void*, const float*), void* user,
                         int32_t* out_tokens, size_t max_out, size_t* n_out) {
    return NF_TRY({ *n_out = reinterpret_cast<D*>(d)->step(last_logits, sample, user, out_tokens, max_out); });
  }
  static void stats(nf_decoder* d, nf_json_sink sink, void* user) {
    std::string s = reinterpret_cast<D*>(d)->stats();
    sink(user, s.c_str());
  }
  // The build hook, when the decoder has `static void build(const Options&, ModelSet, const
  // Context&)`.
  static nf_status* build(const char* options_json, nf_model_set* ms, nf_context* ctx) {
    return NF_TRY({ D::build(Options(options_json), ModelSet(ms), Context(ctx)); });
  }
  static constexpr auto build_entry() {
    if constexpr (requires { D::build(std::declval<const Options&>(), std::declval<ModelSet>(), std::declval<const Context&>()); })
      return &SpeculativeTable::build;
    else
      return static_cast<decltype(&SpeculativeTable::build)>(nullptr);
  }
  static constexpr nf_speculative_api api = {NF_ABI_VERSION, sizeof(nf_speculative_api), create, release, step, stats,
                                             build_entry()};
};

}  // namespace nf

// The smallest host table this library runs with. By default the whole table it was built
// against, so every nf_host_api entry the plugin calls exists. A plugin that should also
// load in older hosts defines this smaller (NF_SIZE_THROUGH(nf_host_api, <last entry it
// needs>)) before including this header and checks later entries with NF_HOST_HAS.
#ifndef NF_PLUGIN_MIN_HOST_API_SIZE
#define NF_PLUGIN_MIN_HOST_API_SIZE sizeof(nf_host_api)
#endif

// Declares the library's exported symbols. Use once per library:
//   NF_PLUGIN_LIBRARY(&my_transform_descriptor, &my_backend_descriptor)
#define NF_PLUGIN_LIBRARY(...)                                                                       \
  extern "C" NF_EXPORT uint32_t npuforge_plugin_abi_version(void) { return NF_ABI_VERSION; }       \
  extern "C" NF_EXPORT nf_status* npuforge_plugin_entry(uint32_t host_abi, const nf_host_api* host, \
                                                        const nf_plugin_library** out) {            \
    static const nf_plugin_descriptor* const plugins[] = {__VA_ARGS__};                            \
    static const nf_plugin_library library = {NF_ABI_VERSION, sizeof(nf_plugin_library),            \
                                              sizeof(plugins) / sizeof(plugins[0]), plugins};       \
    if (host_abi < NF_ABI_VERSION || host->struct_size < NF_PLUGIN_MIN_HOST_API_SIZE)               \
      return host->status_create(("plugin needs host ABI " + std::to_string(NF_ABI_VERSION) +        \
                                  " with a host table of at least " +                              \
                                  std::to_string(NF_PLUGIN_MIN_HOST_API_SIZE) + " bytes, host has ABI " + \
                                  std::to_string(host_abi) + " with " +                            \
                                  std::to_string(host->struct_size) + " bytes; update npuforge")   \
                                     .c_str());                                                    \
    ::nf::host_api_slot() = host;                                                                  \
    *out = &library;                                                                               \
    return nullptr;                                                                                \
  }
