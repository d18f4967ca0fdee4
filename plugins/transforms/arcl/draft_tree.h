// A draft's depth loop as one static graph per AR variant (role draft_tree, sdk
// graph_roles.hpp), built when the draft's role entry asks for it ("tree"): a device then
// launches one graph per speculative step instead of one per depth.
#pragma once

#include <npuforge/graph_roles.hpp>
#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

#include "model_info.h"
#include "variants.h"

namespace arcl {

// Adds one tree graph per AR of `variants` (named prefix + ar{R}_cl{CL - (D-1)B}) from the
// draft's source graph, which stays in the set; `head_tokens` (may be empty) maps the
// draft's logits columns to vocabulary ids. Returns the runner's io variants for them
// (none when no context length leaves room for the tree; a warning says so).
nlohmann::json make_draft_trees(nf::ModelSet& ms, nf::Graph source, const ModelInfo& info,
                                const std::vector<Variant>& variants, const std::string& kv_layout,
                                const nf::roles::DraftTree& tree, const std::vector<int64_t>& head_tokens,
                                const std::string& prefix, nf::Context& ctx);

}  // namespace arcl
