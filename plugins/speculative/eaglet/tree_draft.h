// The draft's depth loop as one graph (role draft_tree, sdk graph_roles.hpp; arcl builds it
// when the build hook asks): one launch a step runs the catch-up rows and drafts the whole
// tree on the device, top-k inside. Its runner shares the draft runner's KV cache, so rows
// it cannot take go through the draft's own graphs.
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
  // Opens role draft_tree from `draft` (the draft role's runner), sharing its KV cache; not
  // ok() when the package has no tree graph. `vocab`: the target's (tokens are checked).
  TreeDraft(nf_runner* draft, int64_t hidden, int64_t vocab, int depth, int branches);
  ~TreeDraft();
  TreeDraft(const TreeDraft&) = delete;
  TreeDraft& operator=(const TreeDraft&) = delete;

  bool ok() const { return r_ != nullptr; }
  // After the draft's runner was replaced (a cleared cache): share the new one's.
  void reopen(nf_runner* draft);
  // The most catch-up rows one call takes, and whether `rows` fit the context now (the tree's
  // rows take (depth - 1) x branches slots beyond them).
  size_t max_rows() const;
  bool fits(size_t rows) const;
  // Commits `rows` (at most max_rows(): accepted entries, the root last) to the shared cache
  // and returns the tree drafted under the root, nodes by depth. Throws nf::Error when the
  // graph's tree is not `depth` x `branches` (a package built with other draft_len / n_branches).
  void draft(std::span<const Row> rows, std::vector<TreeNode>& nodes);
  // Calls by their row count (rows -> calls), for pricing call by call.
  const std::map<int64_t, int64_t>& calls() const { return calls_; }

 private:
  nf_runner* r_ = nullptr;
  nf_runner* draft_ = nullptr;  // the draft role's runner, whose cache r_ shares (not owned)
  size_t hidden_;
  int64_t vocab_;
  int depth_, branches_;
  std::map<int64_t, int64_t> calls_;
};

}  // namespace eaglet
