#include "api/host_api.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "onnx/onnx_io.h"

namespace nf::host {
namespace {

using ir::Attribute;
using ir::Graph;
using ir::ModelSet;
using ir::Node;
using ir::TensorRef;

// Every status the host made and nobody released yet. A plugin may hand back anything as a
// status; only one of these is read, the rest is refused instead of dereferenced.
struct LiveStatuses {
  std::mutex mutex;
  std::unordered_set<const nf_status*> set;
};
LiveStatuses& live_statuses() {
  static auto* s = new LiveStatuses();  // never destroyed: plugins may release at exit
  return *s;
}

nf_status* fail(const std::string& msg, nf_status_code code = NF_STATUS_FAIL) { return make_status(msg, code); }

// Runs `f`, turning any exception into a status: no exception crosses the ABI.
template <class F>
nf_status* guarded(F&& f) {
  try {
    f();
    return nullptr;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error in host");
  }
}

Node* node_of(nf_node* n) { return reinterpret_cast<Node*>(n); }
const Node* node_of(const nf_node* n) { return reinterpret_cast<const Node*>(n); }
const Graph* graph_of(const nf_graph* g) { return reinterpret_cast<const Graph*>(g); }

const Attribute* find_attr(const nf_node* n, const char* name, nf_attr_type type) {
  auto& attrs = node_of(n)->attrs;
  auto it = attrs.find(name);
  return it != attrs.end() && it->second.type == type ? &it->second : nullptr;
}

Attribute& set_attr(nf_node* n, const char* name, nf_attr_type type) {
  Attribute& a = node_of(n)->attrs[name];
  a = Attribute{};
  a.type = type;
  return a;
}

std::vector<std::string> to_strings(const char* const* names, size_t n) {
  std::vector<std::string> r;
  for (size_t i = 0; i < n; ++i) r.emplace_back(names[i] ? names[i] : "");
  return r;
}

// ---- status, context -------------------------------------------------------------
nf_status* status_create(const char* m) { return make_status(m ? m : ""); }
nf_status* status_create_code(nf_status_code code, const char* m) {
  // An unknown code (from a newer plugin) stays as it is; the message still says it.
  return make_status(m ? m : "", code == NF_STATUS_OK ? NF_STATUS_FAIL : code);
}
const char* status_message(const nf_status* s) { return is_live_status(s) ? s->message.c_str() : ""; }
nf_status_code status_code(const nf_status* s) {
  if (!s) return NF_STATUS_OK;
  return is_live_status(s) ? s->code : NF_STATUS_INTERNAL;
}
void status_release(nf_status* s) {
  if (!s) return;
  auto& live = live_statuses();
  std::lock_guard lock(live.mutex);
  if (live.set.erase(s)) delete s;  // a status released twice, or not ours, is left alone
}

void log(nf_context* ctx, nf_log_level level, const char* msg) {
  std::string who = ctx ? ctx->plugin : "plugin";
  auto lvl = static_cast<spdlog::level::level_enum>(std::clamp<int>(level, 0, 4));
  spdlog::log(lvl, "{}: {}", who, msg ? msg : "");
}

int progress(nf_context* ctx, uint64_t done, uint64_t total, const char* what) {
  if (!ctx || !ctx->progress) return 0;
  try {
    return ctx->progress(done, total, what ? what : "") ? 1 : 0;
  } catch (...) {
    return 1;
  }
}

// ---- tensors ------------------------------------------------------------------------
nf_status* tensor_create(nf_dtype dtype, const int64_t* dims, size_t rank, nf_tensor** out) {
  if (ir::dtype_size(dtype) == 0 && dtype != NF_DTYPE_INT4 && dtype != NF_DTYPE_UINT4)
    return fail(std::string("tensor_create: unsupported dtype ") + ir::dtype_name(dtype), NF_STATUS_UNSUPPORTED);
  std::vector<int64_t> d(dims, dims + rank);
  for (int64_t x : d)
    if (x < 0) return fail("tensor_create: negative dimension", NF_STATUS_INVALID_ARGUMENT);
  return guarded([&] { *out = new_tensor_handle(ir::Tensor::zeros(dtype, d)); });
}

void tensor_retain(nf_tensor* t) {
  TensorRef* r = unwrap(t);
  if (r->abi_refs.fetch_add(1) == 0) r->abi_keep = r->shared_from_this();
}

std::mutex g_weight_hook_mutex;
std::function<void(ir::TensorRef&)> g_weight_released;

void tensor_release(nf_tensor* t) {
  if (!t) return;
  TensorRef* r = unwrap(t);
  if (r->abi_refs.fetch_sub(1) == 1) {
    // No plugin reads the tensor now: a weight mapped from the model's external data leaves
    // the resident set (its pages come back from the file on the next read), so a stage
    // reading every weight once holds one weight in memory, not the model.
    r->tensor.drop_pages();
    auto keep = std::move(r->abi_keep);  // may destroy r when this goes out of scope
    if (r->is_weight && keep.use_count() > 1) {  // a graph holds it
      std::function<void(ir::TensorRef&)> hook;
      {
        std::lock_guard lock(g_weight_hook_mutex);
        hook = g_weight_released;
      }
      if (hook) hook(*r);
    }
  }
}

void tensor_drop_pages(const nf_tensor* t, size_t byte_offset, size_t bytes) {
  if (!t) return;
  const ir::Tensor& x = unwrap(t)->tensor;
  const size_t n = x.nbytes();
  if (byte_offset >= n || !x.buffer) return;
  x.buffer->drop_pages(x.offset + byte_offset, std::min(bytes, n - byte_offset));
}

// ---- checkpoints ---------------------------------------------------------------------
constexpr const char* kCheckpointNameRule = ": a name is 1-128 of [A-Za-z0-9._-], not starting with '.'";
bool checkpoint_name_ok(const char* name) {
  if (!name || !*name || *name == '.') return false;
  size_t n = 0;
  for (const char* c = name; *c; ++c, ++n)
    if (n >= 128 || !(std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '_' || *c == '-')) return false;
  return true;
}

nf_status* checkpoint_save(nf_context* ctx, const char* name, const void* data, size_t bytes) {
  if (!checkpoint_name_ok(name))
    return fail(std::string("checkpoint_save") + kCheckpointNameRule, NF_STATUS_INVALID_ARGUMENT);
  if (bytes && !data) return fail("checkpoint_save: no data", NF_STATUS_INVALID_ARGUMENT);
  if (!ctx || !ctx->checkpoints) return nullptr;
  return guarded([&] { ctx->checkpoints->save(name, data, bytes); });
}

nf_status* checkpoint_load(nf_context* ctx, const char* name, nf_tensor** out) {
  if (!out) return fail("checkpoint_load: no output", NF_STATUS_INVALID_ARGUMENT);
  if (!checkpoint_name_ok(name))
    return fail(std::string("checkpoint_load") + kCheckpointNameRule, NF_STATUS_INVALID_ARGUMENT);
  return guarded([&] {
    std::string bytes;
    if (!ctx || !ctx->checkpoints || !ctx->checkpoints->load(name, &bytes)) {
      *out = nullptr;
      return;
    }
    ir::Tensor t = ir::Tensor::zeros(NF_DTYPE_UINT8, {static_cast<int64_t>(bytes.size())});
    std::copy(bytes.begin(), bytes.end(), static_cast<char*>(t.mutable_data()));
    *out = new_tensor_handle(std::move(t));
  });
}

nf_dtype tensor_dtype(const nf_tensor* t) { return unwrap(t)->tensor.dtype; }
size_t tensor_rank(const nf_tensor* t) { return unwrap(t)->tensor.dims.size(); }
const int64_t* tensor_dims(const nf_tensor* t) { return unwrap(t)->tensor.dims.data(); }
size_t tensor_nbytes(const nf_tensor* t) { return unwrap(t)->tensor.nbytes(); }
const void* tensor_data(const nf_tensor* t) { return unwrap(t)->tensor.data(); }
void* tensor_mutable_data(nf_tensor* t) { return unwrap(t)->tensor.mutable_data(); }

// ---- model sets ---------------------------------------------------------------------
size_t ms_graph_count(const nf_model_set* ms) { return unwrap(ms)->graphs.size(); }
nf_graph* ms_graph(nf_model_set* ms, size_t i) {
  auto& gs = unwrap(ms)->graphs;
  return i < gs.size() ? handle(gs[i].get()) : nullptr;
}
nf_graph* ms_find_graph(nf_model_set* ms, const char* name) { return handle(unwrap(ms)->find(name)); }

nf_status* ms_add_graph(nf_model_set* ms, const char* name, const nf_graph* source, nf_graph** out) {
  return guarded([&] {
    ModelSet* m = unwrap(ms);
    if (!name || !*name) throw std::runtime_error("model_set_add_graph: empty graph name");
    if (m->find(name)) throw std::runtime_error(std::string("model_set_add_graph: graph '") + name + "' exists");
    auto g = source ? graph_of(source)->clone() : std::make_unique<Graph>();
    g->name = name;
    *out = handle(g.get());
    m->graphs.push_back(std::move(g));
  });
}

nf_status* ms_remove_graph(nf_model_set* ms, const char* name) {
  auto& gs = unwrap(ms)->graphs;
  auto it = std::find_if(gs.begin(), gs.end(), [&](auto& g) { return g->name == name; });
  if (it == gs.end()) return fail(std::string("model_set_remove_graph: no graph '") + name + "'", NF_STATUS_NOT_FOUND);
  gs.erase(it);
  return nullptr;
}

const char* ms_get_metadata(const nf_model_set* ms, const char* key) {
  auto& md = unwrap(ms)->metadata;
  auto it = md.find(key);
  return it == md.end() ? "null" : it->second.c_str();
}

nf_status* ms_set_metadata(nf_model_set* ms, const char* key, const char* json) {
  return guarded([&] {
    // Stored normalized, and refused when it is not JSON; null removes the key.
    nlohmann::json v = nlohmann::json::parse(json);
    if (v.is_null()) unwrap(ms)->metadata.erase(key);
    else unwrap(ms)->metadata[key] = v.dump();
  });
}

const nf_encoding* ms_get_encoding(const nf_model_set* ms, const char* tensor) {
  auto& e = unwrap(ms)->encodings;
  auto it = e.find(tensor);
  return it == e.end() ? nullptr : &it->second.view;
}

nf_status* ms_set_encoding(nf_model_set* ms, const char* tensor, const nf_encoding* enc) {
  return guarded([&] {
    if (!enc || enc->struct_size < sizeof(nf_encoding)) throw std::runtime_error("model_set_set_encoding: bad struct_size");
    if (enc->num_scales == 0 && !enc->is_float) throw std::runtime_error("model_set_set_encoding: no scales");
    unwrap(ms)->encodings[tensor] = ir::Encoding::from(*enc);
  });
}

nf_status* ms_remove_encoding(nf_model_set* ms, const char* tensor) {
  unwrap(ms)->encodings.erase(tensor);
  return nullptr;
}

size_t ms_encoding_count(const nf_model_set* ms) { return unwrap(ms)->encodings.size(); }
const char* ms_encoding_name(const nf_model_set* ms, size_t i) {
  auto& e = unwrap(ms)->encodings;
  if (i >= e.size()) return nullptr;
  return std::next(e.begin(), static_cast<long>(i))->first.c_str();
}

nf_status* ms_save(const nf_model_set* ms, const char* dir) {
  return guarded([&] { onnx_io::save_model_set(*unwrap(ms), dir); });
}

nf_status* ms_load(const char* dir, nf_model_set** out) {
  return guarded([&] { *out = handle(onnx_io::load_model_set(dir).release()); });
}

void ms_release(nf_model_set* ms) { delete unwrap(ms); }

nf_status* ms_clone(const nf_model_set* ms, nf_model_set** out) {
  if (!ms || !out) return fail("model_set_clone: null argument", NF_STATUS_INVALID_ARGUMENT);
  return guarded([&] { *out = handle(unwrap(ms)->clone().release()); });
}

nf_status* ms_import_graph(nf_model_set* ms, const char* name, const char* onnx_path, nf_graph** out) {
  if (!ms || !name || !*name || !onnx_path || !out)
    return fail("model_set_import_graph: null or empty argument", NF_STATUS_INVALID_ARGUMENT);
  return guarded([&] {
    ModelSet* m = unwrap(ms);
    if (m->find(name)) throw std::runtime_error(std::string("model_set_import_graph: graph '") + name + "' exists");
    auto g = onnx_io::load_model(onnx_path);
    g->name = name;
    auto it = m->metadata.find(kImportedFilesMetadata);
    nlohmann::json imported = it == m->metadata.end() ? nlohmann::json() : nlohmann::json::parse(it->second, nullptr, false);
    if (!imported.is_array()) imported = nlohmann::json::array();
    imported.push_back(std::filesystem::weakly_canonical(onnx_path).string());
    m->metadata[kImportedFilesMetadata] = imported.dump();
    *out = handle(g.get());
    m->graphs.push_back(std::move(g));
  });
}

// ---- graphs -------------------------------------------------------------------------
nf_status* graph_rename_values(nf_graph* g, const char* const* from, const char* const* to, size_t n) {
  if (!g || (n && (!from || !to))) return fail("graph_rename_values: null argument", NF_STATUS_INVALID_ARGUMENT);
  return guarded([&] {
    Graph& graph = *unwrap(g);
    std::map<std::string, std::string> renames;
    for (size_t i = 0; i < n; ++i) {
      if (!from[i] || !to[i] || !*from[i] || !*to[i]) throw std::runtime_error("graph_rename_values: empty name");
      if (!renames.emplace(from[i], to[i]).second)
        throw std::runtime_error(std::string("graph_rename_values: '") + from[i] + "' is renamed twice");
    }
    std::set<std::string> values = ir::value_names(graph), targets;
    for (const auto& [old_name, new_name] : renames) {
      if (!targets.insert(new_name).second)
        throw std::runtime_error("graph_rename_values: two values would be named '" + new_name + "'");
      if (values.count(new_name) && !renames.count(new_name))
        throw std::runtime_error("graph_rename_values: '" + new_name + "' is already a value of graph '" + graph.name + "'");
    }
    ir::rename_values(graph, renames);
  });
}

const char* graph_name(const nf_graph* g) { return graph_of(g)->name.c_str(); }
size_t graph_node_count(const nf_graph* g) { return graph_of(g)->nodes.size(); }
nf_node* graph_node(nf_graph* g, size_t i) {
  auto& ns = unwrap(g)->nodes;
  return i < ns.size() ? reinterpret_cast<nf_node*>(ns[i].get()) : nullptr;
}

nf_status* graph_add_node(nf_graph* g, const char* op, const char* domain, const char* name, const char* const* in,
                          size_t n_in, const char* const* outs, size_t n_out, nf_node** out) {
  return guarded([&] {
    if (!op || !*op) throw std::runtime_error("graph_add_node: empty op_type");
    auto n = std::make_unique<Node>();
    n->op_type = op;
    n->domain = domain ? domain : "";
    n->name = name ? name : "";
    n->inputs = to_strings(in, n_in);
    n->outputs = to_strings(outs, n_out);
    if (out) *out = reinterpret_cast<nf_node*>(n.get());
    unwrap(g)->nodes.push_back(std::move(n));
  });
}

nf_status* graph_remove_node(nf_graph* g, nf_node* node) {
  auto& ns = unwrap(g)->nodes;
  auto it = std::find_if(ns.begin(), ns.end(), [&](auto& n) { return n.get() == node_of(node); });
  if (it == ns.end()) return fail("graph_remove_node: node is not in this graph", NF_STATUS_NOT_FOUND);
  ns.erase(it);
  return nullptr;
}

nf_status* graph_sort(nf_graph* g) {
  return guarded([&] { unwrap(g)->sort(); });
}

size_t graph_input_count(const nf_graph* g) { return graph_of(g)->inputs.size(); }
// Index getters return NULL past the end: an exception must not cross the ABI.
const char* name_at(const std::vector<std::string>& names, size_t i) {
  return i < names.size() ? names[i].c_str() : nullptr;
}
const char* graph_input(const nf_graph* g, size_t i) { return name_at(graph_of(g)->inputs, i); }
size_t graph_output_count(const nf_graph* g) { return graph_of(g)->outputs.size(); }
const char* graph_output(const nf_graph* g, size_t i) { return name_at(graph_of(g)->outputs, i); }
nf_status* graph_set_inputs(nf_graph* g, const char* const* names, size_t n) {
  unwrap(g)->inputs = to_strings(names, n);
  return nullptr;
}
nf_status* graph_set_outputs(nf_graph* g, const char* const* names, size_t n) {
  unwrap(g)->outputs = to_strings(names, n);
  return nullptr;
}

int graph_value_type(const nf_graph* g, const char* value, nf_dtype* dtype, size_t* rank, const int64_t** dims) {
  // dims stay valid until the next call on this thread (documented in plugin.h).
  thread_local std::vector<int64_t> scratch;
  const Graph* gr = graph_of(g);
  auto it = gr->types.find(value);
  if (it != gr->types.end() && it->second.shape) {
    scratch.clear();
    for (const auto& d : *it->second.shape) scratch.push_back(d.value);
    *dtype = it->second.dtype;
  } else if (const ir::Tensor* t = gr->initializer(value)) {
    scratch = t->dims;
    *dtype = t->dtype;
  } else {
    return 1;
  }
  *rank = scratch.size();
  *dims = scratch.data();
  return 0;
}

const char* graph_value_dim_param(const nf_graph* g, const char* value, size_t axis) {
  const Graph* gr = graph_of(g);
  auto it = gr->types.find(value);
  if (it == gr->types.end() || !it->second.shape || axis >= it->second.shape->size()) return nullptr;
  return (*it->second.shape)[axis].param.c_str();
}

nf_status* graph_set_value_type(nf_graph* g, const char* value, nf_dtype dtype, const int64_t* dims,
                                const char* const* params, size_t rank) {
  ir::ValueType vt;
  vt.dtype = dtype;
  vt.shape.emplace();
  for (size_t i = 0; i < rank; ++i)
    vt.shape->push_back(ir::Dim{dims[i] < 0 ? -1 : dims[i], params && params[i] ? params[i] : ""});
  unwrap(g)->types[value] = std::move(vt);
  return nullptr;
}

size_t graph_initializer_count(const nf_graph* g) { return graph_of(g)->initializers.size(); }
const char* graph_initializer_name(const nf_graph* g, size_t i) {
  auto& m = graph_of(g)->initializers;
  if (i >= m.size()) return nullptr;
  return std::next(m.begin(), static_cast<long>(i))->first.c_str();
}
nf_tensor* graph_initializer(const nf_graph* g, const char* name) {
  auto& m = graph_of(g)->initializers;
  auto it = m.find(name);
  return it == m.end() ? nullptr : handle(it->second.get());
}
nf_status* graph_set_initializer(nf_graph* g, const char* name, nf_tensor* t) {
  if (!t) return fail("graph_set_initializer: null tensor", NF_STATUS_INVALID_ARGUMENT);
  TensorRef* r = unwrap(t);
  r->is_weight = true;
  unwrap(g)->initializers[name] = r->shared_from_this();
  return nullptr;
}
nf_status* graph_remove_initializer(nf_graph* g, const char* name) {
  if (unwrap(g)->initializers.erase(name) == 0)
    return fail(std::string("graph_remove_initializer: no initializer '") + name + "'", NF_STATUS_NOT_FOUND);
  return nullptr;
}
int64_t graph_opset(const nf_graph* g, const char* domain) {
  auto& o = graph_of(g)->opsets;
  auto it = o.find(domain ? domain : "");
  return it == o.end() ? -1 : it->second;
}

// ---- nodes --------------------------------------------------------------------------
const char* node_op_type(const nf_node* n) { return node_of(n)->op_type.c_str(); }
const char* node_domain(const nf_node* n) { return node_of(n)->domain.c_str(); }
const char* node_name(const nf_node* n) { return node_of(n)->name.c_str(); }
size_t node_input_count(const nf_node* n) { return node_of(n)->inputs.size(); }
const char* node_input(const nf_node* n, size_t i) { return name_at(node_of(n)->inputs, i); }
size_t node_output_count(const nf_node* n) { return node_of(n)->outputs.size(); }
const char* node_output(const nf_node* n, size_t i) { return name_at(node_of(n)->outputs, i); }

// Setting index == count appends; further is an error.
nf_status* set_slot(std::vector<std::string>& slots, size_t i, const char* v, const char* what) {
  if (i > slots.size()) return fail(std::string(what) + ": index out of range", NF_STATUS_INVALID_ARGUMENT);
  if (i == slots.size()) slots.emplace_back();
  slots[i] = v ? v : "";
  return nullptr;
}
nf_status* node_set_input(nf_node* n, size_t i, const char* v) { return set_slot(node_of(n)->inputs, i, v, "node_set_input"); }
nf_status* node_set_output(nf_node* n, size_t i, const char* v) {
  return set_slot(node_of(n)->outputs, i, v, "node_set_output");
}

size_t node_attr_count(const nf_node* n) { return node_of(n)->attrs.size(); }
const char* node_attr_name(const nf_node* n, size_t i) {
  auto& a = node_of(n)->attrs;
  if (i >= a.size()) return nullptr;
  return std::next(a.begin(), static_cast<long>(i))->first.c_str();
}
nf_attr_type node_attr_type(const nf_node* n, const char* name) {
  auto& a = node_of(n)->attrs;
  auto it = a.find(name);
  return it == a.end() ? NF_ATTR_UNDEFINED : it->second.type;
}
int node_attr_int(const nf_node* n, const char* name, int64_t* out) {
  auto* a = find_attr(n, name, NF_ATTR_INT);
  if (!a) return 1;
  *out = a->i;
  return 0;
}
int node_attr_float(const nf_node* n, const char* name, float* out) {
  auto* a = find_attr(n, name, NF_ATTR_FLOAT);
  if (!a) return 1;
  *out = a->f;
  return 0;
}
int node_attr_string(const nf_node* n, const char* name, const char** out) {
  auto* a = find_attr(n, name, NF_ATTR_STRING);
  if (!a) return 1;
  *out = a->s.c_str();
  return 0;
}
int node_attr_ints(const nf_node* n, const char* name, const int64_t** out, size_t* count) {
  auto* a = find_attr(n, name, NF_ATTR_INTS);
  if (!a) return 1;
  *out = a->ints.data();
  *count = a->ints.size();
  return 0;
}
int node_attr_floats(const nf_node* n, const char* name, const float** out, size_t* count) {
  auto* a = find_attr(n, name, NF_ATTR_FLOATS);
  if (!a) return 1;
  *out = a->floats.data();
  *count = a->floats.size();
  return 0;
}
int node_attr_tensor(const nf_node* n, const char* name, nf_tensor** out) {
  auto* a = find_attr(n, name, NF_ATTR_TENSOR);
  if (!a || !a->t) return 1;
  *out = handle(a->t.get());
  return 0;
}
nf_status* node_set_attr_int(nf_node* n, const char* name, int64_t v) {
  set_attr(n, name, NF_ATTR_INT).i = v;
  return nullptr;
}
nf_status* node_set_attr_float(nf_node* n, const char* name, float v) {
  set_attr(n, name, NF_ATTR_FLOAT).f = v;
  return nullptr;
}
nf_status* node_set_attr_string(nf_node* n, const char* name, const char* v) {
  set_attr(n, name, NF_ATTR_STRING).s = v ? v : "";
  return nullptr;
}
nf_status* node_set_attr_ints(nf_node* n, const char* name, const int64_t* v, size_t count) {
  set_attr(n, name, NF_ATTR_INTS).ints.assign(v, v + count);
  return nullptr;
}
nf_status* node_set_attr_floats(nf_node* n, const char* name, const float* v, size_t count) {
  set_attr(n, name, NF_ATTR_FLOATS).floats.assign(v, v + count);
  return nullptr;
}
nf_status* node_set_attr_tensor(nf_node* n, const char* name, nf_tensor* t) {
  if (!t) return fail("node_set_attr_tensor: null tensor", NF_STATUS_INVALID_ARGUMENT);
  set_attr(n, name, NF_ATTR_TENSOR).t = unwrap(t)->shared_from_this();
  return nullptr;
}
nf_status* node_remove_attr(nf_node* n, const char* name) {
  node_of(n)->attrs.erase(name);
  return nullptr;
}

// ---- runner and calibration: forwarded to the host's implementations ----------------
size_t runner_vocab_size(const nf_runner* r) { return r->vocab_size(); }
size_t runner_max_rows(const nf_runner* r) { return r->max_rows(); }
size_t runner_n_past(const nf_runner* r) { return r->n_past(); }
size_t runner_rows_available(const nf_runner* r) { return r->rows_available(); }
nf_status* runner_forward(nf_runner* r, const int32_t* tokens, const int32_t* parents, size_t n, float* logits) {
  return guarded([&] { r->forward(tokens, parents, n, logits); });
}
nf_status* runner_commit(nf_runner* r, const int32_t* rows, size_t n) {
  return guarded([&] { r->commit(rows, n); });
}
nf_tensor* runner_last_output(nf_runner* r, const char* name) { return r->last_output(name); }
size_t runner_input_vocab_size(const nf_runner* r) { return r->input_vocab_size(); }
nf_status* runner_set_prefix_kv(nf_runner* r, size_t layers, size_t kv_heads, size_t n, size_t head_dim,
                                const float* keys, const float* values) {
  return guarded([&] { r->set_prefix_kv(layers, kv_heads, n, head_dim, keys, values); });
}
nf_status* runner_forward_flags(nf_runner* r, const int32_t* tokens, const int32_t* parents, const uint32_t* flags,
                                size_t n, float* logits) {
  return guarded([&] { r->forward_flags(tokens, parents, flags, n, logits); });
}

nf_status* runner_open_role(nf_runner* r, const char* role, nf_runner** out) {
  if (!r || !role || !out) return fail("runner_open_role: null argument", NF_STATUS_INVALID_ARGUMENT);
  nf_runner* opened = nullptr;
  nf_status* st = guarded([&] { opened = r->open_role(role); });
  if (st) return st;
  if (!opened) return fail(std::string("the model has no graphs of role '") + role + "'", NF_STATUS_NOT_FOUND);
  *out = opened;
  return nullptr;
}
void runner_release(nf_runner* r) { delete r; }
nf_status* runner_set_row_input(nf_runner* r, const char* name, const float* data, size_t n_rows, size_t width) {
  if (!r || !name || (n_rows && width && !data)) return fail("runner_set_row_input: null argument", NF_STATUS_INVALID_ARGUMENT);
  return guarded([&] { r->set_row_input(name, data, n_rows, width); });
}

nf_status* runner_forward_scratch(nf_runner* r, const int32_t* tokens, const int32_t* parents, size_t n, float* logits) {
  if (!r || (n && (!tokens || !parents || !logits))) return fail("runner_forward_scratch: null argument", NF_STATUS_INVALID_ARGUMENT);
  if (!r->keeps_scratch())
    return fail("this runner keeps no rows between forwards (dynamic-shape graphs or a sliding-window cache)",
                NF_STATUS_UNSUPPORTED);
  return guarded([&] { r->forward_scratch(tokens, parents, n, logits); });
}
void runner_clear_scratch(nf_runner* r) {
  if (r) r->clear_scratch();
}

size_t calibration_batch_count(const nf_calibration* c) { return c->batch_count(); }
nf_status* calibration_run(nf_calibration* c, nf_model_set* ms, size_t index, const char* const* names, size_t n,
                           nf_tensor** out) {
  return guarded([&] { c->run(*unwrap(ms), index, names, n, out); });
}

nf_host_api make_api() {
  nf_host_api a{};
  a.abi_version = NF_ABI_VERSION;
  a.struct_size = sizeof(nf_host_api);
  a.status_create = status_create;
  a.status_message = status_message;
  a.status_release = status_release;
  a.log = log;
  a.progress = progress;
  a.tensor_create = tensor_create;
  a.tensor_retain = tensor_retain;
  a.tensor_release = tensor_release;
  a.tensor_dtype = tensor_dtype;
  a.tensor_rank = tensor_rank;
  a.tensor_dims = tensor_dims;
  a.tensor_nbytes = tensor_nbytes;
  a.tensor_data = tensor_data;
  a.tensor_mutable_data = tensor_mutable_data;
  a.model_set_graph_count = ms_graph_count;
  a.model_set_graph = ms_graph;
  a.model_set_find_graph = ms_find_graph;
  a.model_set_add_graph = ms_add_graph;
  a.model_set_remove_graph = ms_remove_graph;
  a.model_set_get_metadata = ms_get_metadata;
  a.model_set_set_metadata = ms_set_metadata;
  a.model_set_get_encoding = ms_get_encoding;
  a.model_set_set_encoding = ms_set_encoding;
  a.model_set_remove_encoding = ms_remove_encoding;
  a.model_set_encoding_count = ms_encoding_count;
  a.model_set_encoding_name = ms_encoding_name;
  a.model_set_save = ms_save;
  a.model_set_load = ms_load;
  a.model_set_release = ms_release;
  a.graph_name = graph_name;
  a.graph_node_count = graph_node_count;
  a.graph_node = graph_node;
  a.graph_add_node = graph_add_node;
  a.graph_remove_node = graph_remove_node;
  a.graph_sort = graph_sort;
  a.graph_input_count = graph_input_count;
  a.graph_input = graph_input;
  a.graph_output_count = graph_output_count;
  a.graph_output = graph_output;
  a.graph_set_inputs = graph_set_inputs;
  a.graph_set_outputs = graph_set_outputs;
  a.graph_value_type = graph_value_type;
  a.graph_value_dim_param = graph_value_dim_param;
  a.graph_set_value_type = graph_set_value_type;
  a.graph_initializer_count = graph_initializer_count;
  a.graph_initializer_name = graph_initializer_name;
  a.graph_initializer = graph_initializer;
  a.graph_set_initializer = graph_set_initializer;
  a.graph_remove_initializer = graph_remove_initializer;
  a.graph_opset = graph_opset;
  a.node_op_type = node_op_type;
  a.node_domain = node_domain;
  a.node_name = node_name;
  a.node_input_count = node_input_count;
  a.node_input = node_input;
  a.node_output_count = node_output_count;
  a.node_output = node_output;
  a.node_set_input = node_set_input;
  a.node_set_output = node_set_output;
  a.node_attr_count = node_attr_count;
  a.node_attr_name = node_attr_name;
  a.node_attr_type = node_attr_type;
  a.node_attr_int = node_attr_int;
  a.node_attr_float = node_attr_float;
  a.node_attr_string = node_attr_string;
  a.node_attr_ints = node_attr_ints;
  a.node_attr_floats = node_attr_floats;
  a.node_attr_tensor = node_attr_tensor;
  a.node_set_attr_int = node_set_attr_int;
  a.node_set_attr_float = node_set_attr_float;
  a.node_set_attr_string = node_set_attr_string;
  a.node_set_attr_ints = node_set_attr_ints;
  a.node_set_attr_floats = node_set_attr_floats;
  a.node_set_attr_tensor = node_set_attr_tensor;
  a.node_remove_attr = node_remove_attr;
  a.runner_vocab_size = runner_vocab_size;
  a.runner_max_rows = runner_max_rows;
  a.runner_n_past = runner_n_past;
  a.runner_forward = runner_forward;
  a.runner_commit = runner_commit;
  a.runner_last_output = runner_last_output;
  a.calibration_batch_count = calibration_batch_count;
  a.calibration_run = calibration_run;
  a.runner_input_vocab_size = runner_input_vocab_size;
  a.runner_set_prefix_kv = runner_set_prefix_kv;
  a.runner_forward_flags = runner_forward_flags;
  a.runner_rows_available = runner_rows_available;
  a.status_create_code = status_create_code;
  a.status_code = status_code;
  a.tensor_drop_pages = tensor_drop_pages;
  a.checkpoint_save = checkpoint_save;
  a.checkpoint_load = checkpoint_load;
  a.model_set_clone = ms_clone;
  a.model_set_import_graph = ms_import_graph;
  a.graph_rename_values = graph_rename_values;
  a.runner_open_role = runner_open_role;
  a.runner_release = runner_release;
  a.runner_set_row_input = runner_set_row_input;
  a.runner_forward_scratch = runner_forward_scratch;
  a.runner_clear_scratch = runner_clear_scratch;
  return a;
}

}  // namespace

const nf_host_api* host_api() {
  static const nf_host_api api = make_api();
  return &api;
}

void set_weight_released_hook(std::function<void(ir::TensorRef&)> hook) {
  std::lock_guard lock(g_weight_hook_mutex);
  g_weight_released = std::move(hook);
}

nf_tensor* new_tensor_handle(ir::Tensor t) {
  auto ref = ir::make_tensor_ref(std::move(t));
  ref->abi_refs = 1;
  ref->abi_keep = ref;
  return handle(ref.get());
}

std::shared_ptr<ir::TensorRef> adopt_tensor_handle(nf_tensor* t) {
  auto shared = unwrap(t)->shared_from_this();
  tensor_release(t);
  return shared;
}

nf_status* make_status(const std::string& message, nf_status_code code) {
  auto* s = new nf_status{message, code};
  auto& live = live_statuses();
  std::lock_guard lock(live.mutex);
  live.set.insert(s);
  return s;
}

bool is_live_status(const nf_status* s) {
  auto& live = live_statuses();
  std::lock_guard lock(live.mutex);
  return live.set.count(s) > 0;
}

std::string take_status_message(nf_status* st, nf_status_code* code) {
  if (!is_live_status(st)) {
    if (code) *code = NF_STATUS_INTERNAL;
    return "returned an invalid status (not one made by status_create, or already released)";
  }
  std::string msg = st->message;
  if (code) *code = st->code;
  host_api()->status_release(st);
  return msg;
}

void throw_if_error(nf_status* st, const std::string& prefix) {
  if (!st) return;
  nf_status_code code = NF_STATUS_FAIL;
  std::string msg = take_status_message(st, &code);
  throw PluginError(prefix.empty() ? msg : prefix + ": " + msg, code);
}

void log_plugin_exception(const std::string& who) noexcept {
  try {
    try {
      throw;
    } catch (const std::exception& e) {
      spdlog::warn("{}: threw an exception across the plugin ABI: {}", who, e.what());
    } catch (...) {
      spdlog::warn("{}: threw an exception across the plugin ABI", who);
    }
  } catch (...) {
  }
}

}  // namespace nf::host

nf_runner* nf_runner::open_role(const char*) { return nullptr; }
void nf_runner::set_row_input(const char* name, const float*, size_t, size_t) {
  throw std::runtime_error(std::string("runner: the graphs have no per-row input '") + name + "'");
}

// Defaults for runners without prefix KV: plain rows only.
void nf_runner::set_prefix_kv(size_t, size_t, size_t n, size_t, const float*, const float*) {
  if (n > 0) throw std::runtime_error("runner: this runner has no prefix KV rows");
}

void nf_runner::forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                              float* logits) {
  for (size_t r = 0; flags && r < n_rows; ++r)
    if (flags[r]) throw std::runtime_error("runner: this runner takes no row flags");
  forward(tokens, parents, n_rows, logits);
}
void nf_runner::forward_scratch(const int32_t*, const int32_t*, size_t, float*) {
  throw std::runtime_error("runner: this runner keeps no rows between forwards");
}
