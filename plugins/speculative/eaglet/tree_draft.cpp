#include "tree_draft.h"

#include <npuforge/graph_roles.hpp>

#include <algorithm>
#include <string>
#include <type_traits>

#include "draft_graph.h"

namespace eaglet {
namespace {

// Output `name` of the last call as `n` values of T (int64 or float32).
template <class T>
std::vector<T> read_output(nf_runner* r, const char* name, size_t n) {
  nf_tensor* t = nf::host().runner_last_output(r, name);
  if (!t) throw nf::Error("eaglet: the draft tree graph returned no '" + std::string(name) + "'");
  const nf::Tensor out = nf::Tensor::borrow(t);
  const nf_dtype want = std::is_same_v<T, float> ? NF_DTYPE_FLOAT32 : NF_DTYPE_INT64;
  if (out.dtype() != want || out.nbytes() != n * sizeof(T))
    throw nf::Error("eaglet: the draft tree graph's '" + std::string(name) + "' is not " + std::to_string(n) +
                    " nodes: the package's draft loop graph was built for other draft_len / n_branches (run with the build's, "
                    "or with draft_loop_graph = false)");
  return {out.data_as<T>(), out.data_as<T>() + n};
}

}  // namespace

TreeDraft::TreeDraft(nf_runner* draft, int64_t hidden, int64_t vocab, int depth, int branches)
    : hidden_(static_cast<size_t>(hidden)), vocab_(vocab), depth_(depth), branches_(branches) {
  reopen(draft);
}

TreeDraft::~TreeDraft() {
  if (r_) nf::host().runner_release(r_);
}

void TreeDraft::reopen(nf_runner* draft) {
  if (r_) nf::host().runner_release(r_);
  r_ = nullptr;
  draft_ = draft;
  nf_status* st = nf::host().runner_open_role(draft, nf::roles::kDraftTree, &r_);
  if (!st) return;
  r_ = nullptr;
  if (nf::host().status_code(st) != NF_STATUS_NOT_FOUND) nf::check(st);  // else the package has no tree graph
  nf::host().status_release(st);
}

size_t TreeDraft::max_rows() const { return nf::host().runner_max_rows(r_); }
bool TreeDraft::fits(size_t rows) const { return rows <= nf::host().runner_rows_available(r_); }

void TreeDraft::draft(std::span<const Row> rows, std::vector<TreeNode>& nodes) {
  nodes.clear();
  const size_t B = static_cast<size_t>(branches_), N = B + static_cast<size_t>(depth_ - 1) * B * B, n = rows.size();
  // The rows before these went through the draft's runner: one cache, or the tree would
  // draft from a cache without them.
  if (nf::host().runner_n_past(r_) != nf::host().runner_n_past(draft_))
    throw nf::Error("eaglet: the draft tree graph does not share the draft's KV cache (package metadata "
                    "roles.draft_tree.shares_cache_of should name the draft's role)");
  const Chain c = chain_of(rows, hidden_);
  std::vector<float> root(n, 0.f);
  root.back() = 1.f;
  nf::check(nf::host().runner_set_row_input(r_, kFeatureInput, c.features.data(), n, hidden_));
  nf::check(nf::host().runner_set_row_input(r_, nf::roles::kTreeRoot, root.data(), n, 1));
  std::vector<float> logits(n * nf::host().runner_vocab_size(r_));
  nf::check(nf::host().runner_forward(r_, c.tokens.data(), c.parents.data(), n, logits.data()));
  ++calls_[static_cast<int64_t>(n)];
  const std::vector<int64_t> token = read_output<int64_t>(r_, nf::roles::kTreeTokens, N),
                             parent = read_output<int64_t>(r_, nf::roles::kTreeParents, N);
  const std::vector<float> logp = read_output<float>(r_, nf::roles::kTreeLogp, N);
  for (size_t i = 0; i < N; ++i) {
    if (parent[i] < -1 || parent[i] >= static_cast<int64_t>(i) || token[i] < 0 || token[i] >= vocab_)
      throw nf::Error("eaglet: the draft tree graph's node " + std::to_string(i) + " is token " + std::to_string(token[i]) +
                      " under node " + std::to_string(parent[i]) + " (a token of the vocabulary under an earlier node or -1 expected)");
    const int d = parent[i] < 0 ? 1 : nodes[static_cast<size_t>(parent[i])].depth + 1;
    nodes.push_back({static_cast<int32_t>(token[i]), static_cast<int32_t>(parent[i]), d, static_cast<double>(logp[i])});
  }
  nf::check(nf::host().runner_commit(r_, c.rows.data(), n));
}

}  // namespace eaglet
