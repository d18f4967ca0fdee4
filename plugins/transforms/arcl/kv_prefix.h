// The KV prefix a speculative decoder's build hook put in the model set as graph state (role
// kv_prefix, sdk graph_roles.hpp: ssd's trained prefix): arcl builds its rows into every
// static target graph, between the cache slots and the new rows, so the package holds them
// (compiled with the graph) and each cache input is P slots shorter.
#pragma once

#include <npuforge/plugin.hpp>

#include <optional>
#include <vector>

#include "attention_sites.h"

namespace arcl {

struct KvPrefix {
  std::string graph;                  // the role's graph, dropped once the variants hold the rows
  int64_t rows = 0;                   // P
  std::vector<nf::Tensor> keys, values;  // per layer [1, kv_heads, P, head_dim]
};

// P from metadata roles.kv_prefix.rows; 0 without the role. Throws when malformed.
int64_t kv_prefix_rows(const nf::ModelSet& ms);

// The role's rows, read from its graph (each output a constant) and checked against the
// model's KV geometry. std::nullopt without the role.
std::optional<KvPrefix> read_kv_prefix(const nf::ModelSet& ms, const ModelInfo& info);

// Builds layer `layer`'s prefix rows into the Concat(past, new) `kv` of a static variant:
// Concat(past, prefix, new), the prefix a constant of the graph.
void insert_kv_prefix(nf::Graph g, const KvConcat& kv, const nf::Tensor& rows, const std::string& name);

// Removes the role and its graph once every variant holds the rows.
void drop_kv_prefix_role(nf::ModelSet& ms, const KvPrefix& prefix);

}  // namespace arcl
