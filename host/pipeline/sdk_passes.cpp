#include "pipeline/sdk_passes.h"

#include <npuforge/graph/fused_cache.h>
#include <npuforge/graph/microsoft_ops.h>
#include <npuforge/plugin.hpp>

namespace {

template <class Pass>
int64_t through_abi(const nf_host_api* api, std::string* error, Pass pass) {
  ::nf::host_api_slot() = api;  // the host's table: this process is the host
  try {
    return pass();
  } catch (const std::exception& e) {
    *error = e.what();
    return 0;
  }
}

}  // namespace

int64_t split_fused_caches_through_abi(const nf_host_api* api, nf_graph* g, int64_t heads, std::string* error) {
  return through_abi(api, error, [&] { return nf::graph::split_fused_caches(nf::Graph(g), heads); });
}

int64_t expand_microsoft_ops_through_abi(const nf_host_api* api, nf_graph* g, std::string* error) {
  return through_abi(api, error, [&] { return static_cast<int64_t>(nf::graph::expand_microsoft_ops(nf::Graph(g))); });
}
