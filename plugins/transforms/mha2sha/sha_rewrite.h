// Rewrites one attention block into one attention per query head: per-head Q/K/V
// projections (sliced weights), the head-wise nodes (RoPE, scaling) copied per head, the
// KV cache cut per KV head, query heads of a group reading their KV head's slice, and the
// heads' outputs concatenated in front of the output projection.
#pragma once

#include "attention_core.h"
#include "graph_edit.h"
#include "head_weights.h"

namespace mha2sha {

struct ShaOptions {
  bool permute_kv_cache_io = false;
};

// Adds the per-head nodes and takes over the block's outputs (the attention result and the
// present.N.* copies); the old block is left dead for eliminate_dead_nodes.
void rewrite_core(const nf::graph::GraphView& view, const AttentionCore& core, GraphEditor& ed, HeadWeights& weights,
                  const ShaOptions& opts);

// The HTP layouts as a permutation of the hf view [1, n_kv, T, head_dim] (self-inverse).
inline const Dims kHtpKeyPerm{1, 0, 3, 2};
inline const Dims kHtpValuePerm{1, 0, 2, 3};

}  // namespace mha2sha
