#include "pipeline/fused_cache.h"

#include <stdexcept>
#include <string>

#include "api/host_api.h"
#include "pipeline/sdk_passes.h"

namespace nf::host {

int64_t read_fused_cache_as_pairs(ir::Graph& g, int64_t heads) {
  std::string error;
  const int64_t layers = split_fused_caches_through_abi(host_api(), handle(&g), heads, &error);
  if (!error.empty()) throw std::runtime_error("the model's fused KV cache: " + error);
  return layers;
}

}  // namespace nf::host
