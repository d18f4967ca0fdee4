// Graphs of several roles in one model set. A speculative decoder's build hook adds its
// draft next to the target decoder; model-set metadata "roles" names the graphs that are
// not the target's:
//   "roles": {"draft": {"graphs": ["eaglet_draft"], "decoder": "eaglet", ...}}
// A role may name, under "replaces", files beside the graph file it imported that a package
// holding the role's graphs compiled does not need (eaglet: ["draft.bin"], the host's float
// copy of the draft); the build leaves them out of such packages, and keeps them in a
// package whose backend could not compile the role.
// Every graph no role lists is the target's. Stages that reshape the target (arcl, split,
// hidden_states, the single-graph recipes) take target graphs only; the backends compile
// every graph, and the runner opens a role's graphs with a KV cache of their own.
// Header-only over nlohmann::json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace nf::roles {

inline constexpr const char* kMetadataKey = "roles";
inline constexpr const char* kDraft = "draft";

// The KV prefix role (ssd's trained prefix; graph state): one graph without inputs whose
// outputs kv_prefix.N.key and kv_prefix.N.value ([1, kv_heads, P, head_dim] each, keys after
// RoPE) are P extra KV rows per layer that only rows flagged NF_ROW_SEES_PREFIX attend to.
// The role entry says "rows": P. arcl builds the rows into every static variant (a constant
// between the cache slots and the new rows: each cache input is P slots shorter; io
// "kv_prefix_rows": P) and drops the role; a dynamic runner runs the graph once and keeps
// its outputs. Either way the rows come from the model's graphs, compiled with them (htp
// stores them on the grid of the cache they join), not from a file beside the package.
inline constexpr const char* kKvPrefix = "kv_prefix";
inline std::string kv_prefix_output(int64_t layer, bool key) {
  return "kv_prefix." + std::to_string(layer) + (key ? ".key" : ".value");
}
struct KvPrefixRole {
  std::string graph;
  int64_t rows = 0;
};
// The kv_prefix entry of metadata "roles" (`roles` may be null); nullopt without one.
// Throws std::runtime_error when it is not one graph and a positive integer "rows".
inline std::optional<KvPrefixRole> kv_prefix_role(const nlohmann::json& roles) {
  if (!roles.is_object() || !roles.contains(kKvPrefix)) return std::nullopt;
  const nlohmann::json& r = roles[kKvPrefix];
  if (!r.is_object() || !r.contains("rows") || !r["rows"].is_number_unsigned() || r["rows"].get<int64_t>() <= 0 ||
      !r.contains("graphs") || !r["graphs"].is_array() || r["graphs"].size() != 1 || !r["graphs"][0].is_string())
    throw std::runtime_error("metadata roles.kv_prefix needs one graph and a positive integer 'rows'");
  return KvPrefixRole{r["graphs"][0].get<std::string>(), r["rows"].get<int64_t>()};
}

// The role of graph `name` under metadata "roles" (`roles` may be null): "" for the target.
inline std::string role_of(const nlohmann::json& roles, const std::string& name) {
  if (!roles.is_object()) return "";
  for (const auto& [role, entry] : roles.items())
    if (entry.is_object() && entry.contains("graphs") && entry["graphs"].is_array())
      for (const auto& g : entry["graphs"])
        if (g.is_string() && g.get<std::string>() == name) return role;
  return "";
}
inline bool is_target(const nlohmann::json& roles, const std::string& name) { return role_of(roles, name).empty(); }

}  // namespace nf::roles
