// One source, several test libraries: each NF_TEST_CASE builds a plugin library that the
// registry must accept or refuse for one reason.
#include <npuforge/plugin.hpp>

#include <chrono>
#include <thread>

namespace {

// Copies the model set unchanged but reports progress step by step, so a test can cancel
// it midway. Option `steps` sets how many; `log_every` N > 0 logs an info line every N
// steps (a log line while the progress bar is drawn).
nf_status* slow_identity(const char* options, nf_model_set*, nf_context* ctx) {
  return NF_TRY({
    nf::Options o(options);
    nf::Context c(ctx);
    int steps = o.get<int>("steps", 10);
    int log_every = o.get<int>("log_every", 0);
    for (int i = 0; i < steps; ++i) {
      if (log_every > 0 && i > 0 && i % log_every == 0) c.info("step " + std::to_string(i));
      c.progress(static_cast<uint64_t>(i), static_cast<uint64_t>(steps), "step");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

const nf_transform_api transform_api = {NF_ABI_VERSION, sizeof(nf_transform_api), slow_identity, nullptr};

#ifndef NF_PLUGIN_NAME
#define NF_PLUGIN_NAME "slow_identity"
#endif

const nf_plugin_descriptor transform_desc = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM, NF_PLUGIN_NAME, "1.0.0",
    "Test transform: leaves the model as it is, slowly",
    R"({"type":"object","additionalProperties":false,
        "properties":{"steps":{"type":"integer","minimum":0,"maximum":100000,"default":10,
                               "description":"progress steps"},
                      "log_every":{"type":"integer","minimum":0,"default":0,
                                   "description":"an info line every this many steps, 0 for none"}}})",
    &transform_api};

}  // namespace

#if defined(NF_TEST_GOOD)
NF_PLUGIN_LIBRARY(&transform_desc)

#elif defined(NF_TEST_ABI_TOO_NEW) || defined(NF_TEST_ABI_TOO_OLD)
extern "C" NF_EXPORT uint32_t npuforge_plugin_abi_version(void) {
#ifdef NF_TEST_ABI_TOO_NEW
  return NF_ABI_VERSION + 1;
#else
  return 0;
#endif
}
extern "C" NF_EXPORT nf_status* npuforge_plugin_entry(uint32_t, const nf_host_api*, const nf_plugin_library**) {
  return nullptr;
}

#elif defined(NF_TEST_ENTRY_FAILS)
extern "C" NF_EXPORT uint32_t npuforge_plugin_abi_version(void) { return NF_ABI_VERSION; }
extern "C" NF_EXPORT nf_status* npuforge_plugin_entry(uint32_t, const nf_host_api* host, const nf_plugin_library**) {
  return host->status_create("license file not found");
}

#elif defined(NF_TEST_BAD_NAME)
namespace {
const nf_plugin_descriptor bad_desc = {NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM, "Bad Name!",
                                       "1.0.0", "bad", "{}", &transform_api};
}
NF_PLUGIN_LIBRARY(&bad_desc)

#elif defined(NF_TEST_NO_ENTRY)
// An ordinary shared library: exports something, but not the npuforge entry point.
extern "C" NF_EXPORT int some_other_function(void) { return 42; }

#elif defined(NF_TEST_TABLE_TOO_NEW)
// A function table from a later, incompatible ABI.
namespace {
const nf_transform_api future_api = {NF_ABI_VERSION + 1, sizeof(nf_transform_api), slow_identity, nullptr};
const nf_plugin_descriptor future_desc = {NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM,
                                          "future_table", "1.0.0", "future", "{}", &future_api};
}  // namespace
NF_PLUGIN_LIBRARY(&future_desc)

#elif defined(NF_TEST_TABLE_TOO_SMALL) || defined(NF_TEST_REQUIRED_NULL)
// A backend table that ends before `run`, or has it NULL.
namespace {
nf_status* no_compile(const char*, const nf_model_set*, const char*, nf_context*) { return nullptr; }
nf_status* no_open(const char*, const char*, nf_context*, nf_session**) { return nullptr; }
void no_close(nf_session*) {}
#ifdef NF_TEST_TABLE_TOO_SMALL
const nf_backend_api backend_api = {NF_ABI_VERSION, 24, no_compile, no_open, no_close, nullptr, nullptr, nullptr, nullptr, nullptr};
#define NF_BACKEND_NAME "tiny_table"
#else
const nf_backend_api backend_api = {NF_ABI_VERSION, sizeof(nf_backend_api), no_compile, no_open, no_close,
                                    nullptr, nullptr, nullptr, nullptr, nullptr};
#define NF_BACKEND_NAME "no_run"
#endif
const nf_plugin_descriptor backend_desc = {NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_BACKEND,
                                           NF_BACKEND_NAME, "1.0.0", "broken backend", "{}", &backend_api};
}  // namespace
NF_PLUGIN_LIBRARY(&backend_desc)

#elif defined(NF_TEST_SCHEMA_TYPO) || defined(NF_TEST_SCHEMA_MALFORMED)
// The good transform with a misspelled or malformed keyword in its options schema.
namespace {
#ifdef NF_TEST_SCHEMA_TYPO
#define NF_SCHEMA R"({"type":"object","properties":{"steps":{"type":"integer","maximun":100}}})"
#else
#define NF_SCHEMA R"({"type":"object","properties":{"steps":{"type":"int"}}})"
#endif
const nf_plugin_descriptor schema_desc = {NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM,
                                          "bad_schema", "1.0.0", "bad schema", NF_SCHEMA, &transform_api};
}  // namespace
NF_PLUGIN_LIBRARY(&schema_desc)

#else
#error "define one NF_TEST_* case"
#endif
