// One source, one library per NF_FAULT_* case: each breaks the plugin contract in one way
// (NULL tables, garbage statuses, exceptions across the C ABI, graphs no backend can run).
// The host must refuse or report each one with the file or plugin named, never crash.
#include <npuforge/plugin.hpp>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace {

const nf_host_api* g_host = nullptr;

// A transform: leaves the model as it is. The cases below change what `apply` does.
[[maybe_unused]] nf_status* apply_ok(const char*, nf_model_set*, nf_context*) { return nullptr; }

#if defined(NF_FAULT_GARBAGE_STATUS)
// Not a status the host made: a pointer into nowhere.
nf_status* apply(const char*, nf_model_set*, nf_context*) { return reinterpret_cast<nf_status*>(0x10); }
#elif defined(NF_FAULT_RELEASED_STATUS)
// A real status, released before it is returned.
nf_status* apply(const char*, nf_model_set*, nf_context*) {
  nf_status* s = g_host->status_create("gone");
  g_host->status_release(s);
  return s;
}
#elif defined(NF_FAULT_APPLY_THROWS)
// No NF_TRY: the exception would cross the C ABI.
nf_status* apply(const char*, nf_model_set*, nf_context*) { throw std::runtime_error("apply exploded"); }
#elif defined(NF_FAULT_APPLY_THROWS_INT)
nf_status* apply(const char*, nf_model_set*, nf_context*) { throw 42; }
#elif defined(NF_FAULT_TWO_WRITERS)
// Adds a node that writes the value the first node already writes.
nf_status* apply(const char*, nf_model_set* ms, nf_context*) {
  nf_graph* g = g_host->model_set_graph(ms, 0);
  nf_node* first = g_host->graph_node(g, 0);
  const char* in[] = {g_host->graph_input(g, 0)};
  const char* out[] = {g_host->node_output(first, 0)};
  return g_host->graph_add_node(g, "Identity", "", "second_writer", in, 1, out, 1, nullptr);
}
#elif defined(NF_FAULT_CRASH_ONCE)
// Dies the first time it runs: while the file $NF_FAULT_CRASH_ONCE is there (it removes it
// first), as a stage killed by the kernel or a lost node would. Run again, it succeeds.
nf_status* apply(const char* o, nf_model_set* ms, nf_context* c) {
  const char* marker = std::getenv("NF_FAULT_CRASH_ONCE");
  if (marker && std::remove(marker) == 0) std::abort();
  return apply_ok(o, ms, c);
}
#else
[[maybe_unused]] nf_status* apply(const char* o, nf_model_set* ms, nf_context* c) { return apply_ok(o, ms, c); }
#endif

#if defined(NF_FAULT_APPLY_NULL)
const nf_transform_api transform_api = {NF_ABI_VERSION, sizeof(nf_transform_api), nullptr, nullptr};
#else
const nf_transform_api transform_api = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, nullptr};
#endif

const nf_plugin_descriptor transform_desc = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM, "bad_transform", "1.0.0",
    "Fault test transform", "{}",
#if defined(NF_FAULT_API_NULL)
    nullptr};
#else
    &transform_api};
#endif

// A backend whose compile fails or throws: the second target of an all-or-none build.
nf_status* compile(const char*, const nf_model_set*, const char*, nf_context*) {
#if defined(NF_FAULT_COMPILE_THROWS)
  throw std::runtime_error("compile exploded");
#else
  return g_host->status_create("this backend always fails to compile");
#endif
}
nf_status* open(const char*, const char*, nf_context*, nf_session**) { return g_host->status_create("cannot open"); }
void close(nf_session*) {}
nf_status* run(nf_session*, const char*, const char* const*, const nf_tensor* const*, size_t, const char* const*,
               nf_tensor**, size_t) {
  return g_host->status_create("cannot run");
}
const nf_backend_api backend_api = {NF_ABI_VERSION, sizeof(nf_backend_api), compile, open, close, run, nullptr, nullptr, nullptr, nullptr};
const nf_plugin_descriptor backend_desc = {NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_BACKEND,
                                           "bad_backend", "1.0.0", "Fault test backend", "{}", &backend_api};

const nf_plugin_descriptor* const one_plugin[] = {&transform_desc, &backend_desc};
const nf_plugin_descriptor* const null_plugin[] = {nullptr};

#if defined(NF_FAULT_DESCRIPTORS_NULL)
const nf_plugin_library library = {NF_ABI_VERSION, sizeof(nf_plugin_library), 2, nullptr};
#elif defined(NF_FAULT_DESCRIPTOR_NULL)
const nf_plugin_library library = {NF_ABI_VERSION, sizeof(nf_plugin_library), 1, null_plugin};
#else
const nf_plugin_library library = {NF_ABI_VERSION, sizeof(nf_plugin_library), 2, one_plugin};
#endif

}  // namespace

extern "C" NF_EXPORT uint32_t npuforge_plugin_abi_version(void) {
#if defined(NF_FAULT_ABI_THROWS)
  throw std::runtime_error("abi version exploded");
#endif
  return NF_ABI_VERSION;
}

extern "C" NF_EXPORT nf_status* npuforge_plugin_entry(uint32_t, const nf_host_api* host, const nf_plugin_library** out) {
#if defined(NF_FAULT_ENTRY_THROWS)
  throw std::runtime_error("entry exploded");
#elif defined(NF_FAULT_ENTRY_THROWS_INT)
  throw 7;
#elif defined(NF_FAULT_ENTRY_GARBAGE_STATUS)
  return reinterpret_cast<nf_status*>(0x20);
#endif
  g_host = host;
  ::nf::host_api_slot() = host;
  *out = &library;
  return nullptr;
}
