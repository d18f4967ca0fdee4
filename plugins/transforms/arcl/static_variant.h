// Rewrites one copy of the source decoder into a static graph for one (AR, CL[, SCL])
// variant: fixed-size inputs, KV cache inputs of CL-AR (or SCL-AR) slots, the new rows
// as the present outputs, an explicit additive attention mask, every shape folded.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

#include "kv_prefix.h"
#include "model_info.h"
#include "variants.h"

namespace arcl {

using nf::decoder::kAttentionMask;
using nf::decoder::kSlidingAttentionMask;

// What the additive masks hold where a row must not look (io "mask_value": float16's lowest).
inline constexpr float kMaskValue = -65504.f;

// A cache input's or output's dims with `len` rows (cache slots or new rows): hf
// [1, n_kv, len, head_dim]; htp keys [n_kv, 1, head_dim, len], values [n_kv, 1, len, head_dim].
std::vector<int64_t> cache_io_dims(const ModelInfo& info, bool htp, bool key, int64_t len);
// The axis of those dims the rows run along.
inline int64_t cache_row_axis(bool htp, bool key) { return htp && key ? 3 : 2; }

// Cache slots a layer's past input holds in variant `v`.
int64_t cache_slots(const Variant& v, const ModelInfo& info, int64_t layer);

// `g` is a fresh copy of the source graph (renamed to v.graph_name()); `prefix` (may be
// null): KV prefix rows built into every layer's attention. Throws nf::Error.
void build_static_variant(nf::Graph g, const Variant& v, const ModelInfo& info, const std::string& kv_layout,
                          const KvPrefix* prefix = nullptr);

}  // namespace arcl
