#include "pipeline/int64_inputs.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>

namespace nf::host {

size_t int64_decoder_inputs(ir::Graph& g) {
  size_t changed = 0;
  for (const char* name : {decoder::kInputIds, decoder::kAttentionMask, decoder::kPositionIds}) {
    auto t = g.types.find(name);
    if (t == g.types.end() || t->second.dtype != NF_DTYPE_INT32 ||
        std::find(g.inputs.begin(), g.inputs.end(), name) == g.inputs.end())
      continue;
    const std::string narrow = std::string(name) + "/int32";
    for (const auto& n : g.nodes)
      std::replace(n->inputs.begin(), n->inputs.end(), std::string(name), narrow);
    std::replace(g.outputs.begin(), g.outputs.end(), std::string(name), narrow);
    auto cast = std::make_unique<ir::Node>();
    cast->op_type = "Cast";
    cast->name = narrow;
    cast->inputs = {name};
    cast->outputs = {narrow};
    cast->attrs["to"].type = NF_ATTR_INT;
    cast->attrs["to"].i = NF_DTYPE_INT32;
    g.nodes.insert(g.nodes.begin(), std::move(cast));
    g.types[narrow] = t->second;
    t->second.dtype = NF_DTYPE_INT64;
    ++changed;
  }
  return changed;
}

}  // namespace nf::host
