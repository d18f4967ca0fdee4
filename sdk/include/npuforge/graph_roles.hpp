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

// The draft's depth loop as one graph (role "draft_tree"). A draft role entry that asks for it
//   "tree": {"depth": D, "branches": B, "logit_scale": s,
//            "feature_input": "...", "feature_output": "..."}
// gets, from arcl, one graph per AR variant R of the draft: the catch-up pass of R rows (the
// accepted entries and the root, last real row flagged by the per-row input tree_root = 1)
// at context CL - (D-1)B, then D-1 passes of B rows at context CL, each reading the catch-up
// rows and its ancestors' rows as cache. Expansion, inside the graph: the root's B likeliest
// tokens are depth 1; each pass scores the B nodes of one depth and its B likeliest children
// each; the B likeliest of those children (by cumulative log probability of
// softmax(s x logits)) are the next pass's rows. Outputs beside the catch-up pass's own:
// tree_tokens (int64, vocabulary ids), tree_parents (int64, an earlier node, -1 the root) and
// tree_logp (float32, cumulative from the root), each [1, N], N = B + (D-1) B^2, nodes by depth.
// The role entry repeats "tree", has the runner's "io" (layout static) and "shares_cache_of":
// the draft's role; a runner of it opened from the draft's runner shares that runner's cache.
inline constexpr const char* kDraftTree = "draft_tree";
inline constexpr const char* kTreeRoot = "tree_root";
inline constexpr const char* kTreeTokens = "tree_tokens";
inline constexpr const char* kTreeParents = "tree_parents";
inline constexpr const char* kTreeLogp = "tree_logp";
struct DraftTree {
  int64_t depth = 0, branches = 0;
  float logit_scale = 1.f;
  std::string feature_input, feature_output;
  int64_t nodes() const { return branches + (depth - 1) * branches * branches; }
};
// The "tree" of a role entry; nullopt without one. Throws std::runtime_error when malformed.
inline std::optional<DraftTree> draft_tree_of(const nlohmann::json& entry) {
  if (!entry.is_object() || !entry.contains("tree")) return std::nullopt;
  const nlohmann::json& t = entry["tree"];
  auto positive = [&](const char* k) { return t.contains(k) && t[k].is_number_unsigned() && t[k].get<int64_t>() > 0; };
  auto text = [&](const char* k) { return t.contains(k) && t[k].is_string() && !t[k].get<std::string>().empty(); };
  if (!t.is_object() || !positive("depth") || !positive("branches") || !text("feature_input") || !text("feature_output") ||
      (t.contains("logit_scale") && (!t["logit_scale"].is_number() || !(t["logit_scale"].get<double>() > 0))))
    throw std::runtime_error("a role's 'tree' needs positive integers 'depth' and 'branches', 'feature_input' and "
                             "'feature_output' names, and a positive 'logit_scale'");
  DraftTree r{t["depth"].get<int64_t>(), t["branches"].get<int64_t>(), t.value("logit_scale", 1.f),
              t["feature_input"].get<std::string>(), t["feature_output"].get<std::string>()};
  if (r.depth > 16 || r.branches > 16) throw std::runtime_error("a role's 'tree' is at most 16 deep and 16 wide");
  return r;
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
