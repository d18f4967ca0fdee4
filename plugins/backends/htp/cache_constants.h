// Constants a graph joins to its KV cache (arcl's kv_prefix rows, ssd's trained prefix): a
// Concat takes its inputs at its output's encoding, so the device stores them on the cache's
// grid. The compile saves them so; the model set it was given is left as it was.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

namespace nf::htp {

// A constant of `graph` to save in place of initializer `name`.
struct ConstantOnGrid {
  Graph graph;
  std::string name;
  Tensor rounded;
};

// Every float initializer that a Concat joins to a KV cache input (past_key_values.*, or a
// Transpose of one) with a per-tensor integer encoding, rounded onto that encoding's grid.
std::vector<ConstantOnGrid> cache_constants_on_grid(const ModelSet& ms);

}  // namespace nf::htp
