// One source, several test libraries: each NF_TEST_CASE builds a plugin library that the
// registry must accept or refuse for one reason.
#include <npuforge/plugin.hpp>

#include <chrono>
#include <thread>

namespace {

// Copies the model set unchanged but reports progress step by step, so a test can cancel
// it midway. Option `steps` sets how many.
nf_status* slow_identity(const char* options, nf_model_set*, nf_context* ctx) {
  return NF_TRY({
    nf::Options o(options);
    nf::Context c(ctx);
    int steps = o.get<int>("steps", 10);
    for (int i = 0; i < steps; ++i) {
      c.progress(static_cast<uint64_t>(i), static_cast<uint64_t>(steps), "step");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

const nf_transform_api transform_api = {NF_ABI_VERSION, sizeof(nf_transform_api), slow_identity};

#ifndef NF_PLUGIN_NAME
#define NF_PLUGIN_NAME "slow_identity"
#endif

const nf_plugin_descriptor transform_desc = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM, NF_PLUGIN_NAME, "1.0.0",
    "Test transform: leaves the model as it is, slowly",
    R"({"type":"object","additionalProperties":false,
        "properties":{"steps":{"type":"integer","minimum":0,"maximum":100000,"default":10,
                               "description":"progress steps"}}})",
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

#else
#error "define one NF_TEST_* case"
#endif
