// The draft's depth loop as one graph (role draft_tree, sdk graph_roles.hpp; arcl builds it
// when the build hook asks): one launch a step runs the catch-up rows and drafts the whole
// tree on the device, top-k inside.
#pragma once

#include <npuforge/plugin.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "draft.h"

namespace eaglet {

struct TreeNode {
  int32_t token = 0;
  int32_t parent = -1;  // an earlier node; -1: the root
  int depth = 1;
  double logp = 0;      // cumulative draft log probability from the root
};

class TreeDraft {
 public:
  // Takes `tree` (a runner_open_role of `target`, role draft_tree) and releases it.
  TreeDraft(nf_runner* target, nf_runner* tree, int64_t hidden, int depth, int branches);
  ~TreeDraft();
  TreeDraft(const TreeDraft&) = delete;
  TreeDraft& operator=(const TreeDraft&) = delete;

  // Commits `rows` (accepted entries, the root last) to the draft's cache and returns the
  // tree drafted under the root, nodes by depth. False when the context has no room for
  // them and the tree: the step drafts nothing. Throws nf::Error when the graph's tree is
  // not `depth` x `branches` (a package built with other draft_len / n_branches).
  bool draft(std::span<const Row> rows, std::vector<TreeNode>& nodes);
  void clear_cache();
  // Calls by their row count (rows -> calls), for pricing call by call.
  const std::map<int64_t, int64_t>& calls() const { return calls_; }

 private:
  nf_runner* target_;
  nf_runner* r_;
  size_t hidden_;
  int depth_, branches_;
  std::map<int64_t, int64_t> calls_;
};

}  // namespace eaglet
