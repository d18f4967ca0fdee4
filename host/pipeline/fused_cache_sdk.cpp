#include "pipeline/fused_cache_sdk.h"

#include <npuforge/graph/fused_cache.h>
#include <npuforge/plugin.hpp>

int64_t split_fused_caches_through_abi(const nf_host_api* api, nf_graph* g, int64_t heads, std::string* error) {
  ::nf::host_api_slot() = api;  // the host's table: this process is the host
  try {
    return nf::graph::split_fused_caches(nf::Graph(g), heads);
  } catch (const std::exception& e) {
    *error = e.what();
    return 0;
  }
}
