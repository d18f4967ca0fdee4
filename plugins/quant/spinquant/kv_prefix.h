// The KV prefix a speculative decoder's build hook put beside the decoder as graph state
// (role kv_prefix, sdk graph_roles.hpp: ssd's trained prefix). Its keys stay as they are
// (R1 rotates the residual stream, which q/k/v's weights absorb); its values are rows of
// v_proj's output space, which R2 rotates per head: they turn with it.
#pragma once

#include <npuforge/plugin.hpp>

#include <deque>
#include <optional>

#include "rotation.h"

namespace spinquant {

// The kv_prefix role's graph, or nullopt without one.
std::optional<nf::Graph> kv_prefix_graph(const nf::ModelSet& ms);

// Every value row of layer i's prefix becomes x R_i (R_i: rotations[i], or rotations[0] for
// all when there is one). Throws nf::Error when the graph lacks a layer's values.
void rotate_prefix_values(nf::Graph prefix, const std::deque<Rotation>& rotations, size_t layers);

}  // namespace spinquant
