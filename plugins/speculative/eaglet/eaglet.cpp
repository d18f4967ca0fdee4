// eaglet: EAGLE-2 style speculative decoding with a small trained draft.
//
// One step:
//  1. The draft catches up on the tokens accepted last step (their target features, now
//     known) and runs the root entry (feature of the newest committed token, current
//     token): its output predicts the current token's children.
//  2. Dynamic tree: for draft_len - 1 more draft passes, the n_branches most likely nodes
//     of the newest depth (by cumulative draft probability) are expanded, each into its
//     n_branches most likely children. A package built with draft_loop_graph holds steps 1
//     and 2 as one graph (role draft_tree, tree_draft.h): one launch a step, sharing the
//     draft's KV cache.
//  3. Rerank every drafted node by cumulative probability and keep the best ones that fit
//     the target's budget (max_tokens_target_can_evaluate, at most the runner's rows);
//     the kept set is closed under parents because a child is never likelier than its parent.
//  4. One target forward scores the root and the kept nodes; the walk draws the target's
//     token at each node through `sample` and follows the matching child (lossless for
//     greedy; sampled output keeps the target's distribution since the draft is
//     deterministic). The accepted path is committed; the token drawn at the first
//     mismatch is the next step's root.
#include <npuforge/graph_roles.hpp>
#include <npuforge/speculative.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "draft_graph.h"
#include "draft_model.h"
#include "graph_draft.h"
#include "tree_draft.h"

namespace {

constexpr const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "draft": {"type": "string", "format": "asset", "default": "eaglet",
              "description": "directory with draft.json + draft.bin (tools/speculative/train_eaglet.py) and draft.onnx (tools/speculative/export_eaglet_onnx.py); relative to the model's folder. The build's first stage adds draft.onnx to the model set as its draft graph, and the folder is copied into packages (but draft.onnx and draft.bin where the package holds the draft compiled)"},
    "draft_vocab": {"type": "integer", "minimum": 0, "maximum": 1048576, "default": 0,
                    "description": "LM head rows the draft scores: the most frequent tokens of its token map (0: the whole vocabulary); a smaller head makes draft passes cheaper, tokens outside it are never drafted. The build cuts the draft graph's head to these rows"},
    "draft_len": {"type": "integer", "minimum": 1, "maximum": 16, "default": 5,
                  "description": "draft passes per step = the deepest drafted token"},
    "n_branches": {"type": "integer", "minimum": 1, "maximum": 16, "default": 4,
                   "description": "nodes expanded per depth, and children drafted per expanded node"},
    "max_tokens_target_can_evaluate": {"type": "integer", "minimum": 1, "maximum": 1024, "default": 32,
                                       "description": "rows of one target forward (root + drafted tokens); trimmed to the runner's largest AR variant with a warning"},
    "draft_kv_cache": {"type": "boolean", "default": true,
                       "description": "keep the draft's KV cache of the accepted text across steps; false: the draft sees only the current root and its tree"},
    "draft_loop_graph": {"type": "boolean", "default": true,
                         "description": "build the draft's depth loop into one static graph a step (role draft_tree: draft_len passes, top-k inside; arcl makes it beside the draft's variants); false: one draft graph launch per depth"}
  }
})json";

constexpr const char* kFeature = "hidden_states";

struct Node {
  int32_t token = 0;
  int32_t parent = -1;  // node index; -1: the root (current token)
  int depth = 1;
  double logp = 0;      // cumulative draft log probability from the root
  int32_t entry = -1;   // draft scratch entry once expanded
  size_t feature = 0;   // index into features_: the draft's output for the parent's entry
};

// Log-softmax of logits x scale, then the k best (token, log p) pairs.
std::vector<std::pair<int32_t, double>> top_k(const float* logits, size_t vocab, int k, double scale) {
  const double mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (size_t i = 0; i < vocab; ++i) sum += std::exp(scale * (logits[i] - mx));
  const double lse = scale * mx + std::log(sum);
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  const size_t kk = std::min(static_cast<size_t>(k), vocab);
  std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(kk), idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < kk; ++i) out.emplace_back(idx[i], scale * logits[idx[i]] - lse);
  return out;
}

class Eaglet {
 public:
  static constexpr const char* kName = "eaglet";
  Eaglet(const nf::Options& o, nf_runner* runner, const int32_t* prompt, size_t n_prompt, nf::Context ctx)
      : runner_(runner), step_(kName, runner), draft_(open_draft(o, runner, ctx)) {
    draft_len_ = o.get<int>("draft_len", 5);
    branches_ = o.get<int>("n_branches", 4);
    use_cache_ = o.get<bool>("draft_kv_cache", true);
    const eaglet::DraftConfig& c = draft_->config();
    H_ = static_cast<size_t>(c.hidden);
    graph_draft_ = dynamic_cast<eaglet::GraphDraft*>(draft_.get());
    if (graph_draft_ && o.get<bool>("draft_loop_graph", true)) {
      tree_ = std::make_unique<eaglet::TreeDraft>(graph_draft_->runner(), c.hidden, static_cast<int64_t>(step_.vocab()),
                                                  draft_len_, branches_);
      if (!tree_->ok()) tree_.reset();  // a package without the tree graph
    }
    if (static_cast<size_t>(c.vocab) != step_.vocab())
      throw nf::Error("eaglet: the draft's vocabulary is " + std::to_string(c.vocab) + ", the target's " +
                      std::to_string(step_.vocab()) + " (a draft is trained for one target)");
    const size_t asked = static_cast<size_t>(o.get<int>("max_tokens_target_can_evaluate", 32));
    const size_t max_rows = nf::host().runner_max_rows(runner);
    budget_ = std::min(asked, max_rows);
    if (budget_ < asked)
      ctx.warn("max_tokens_target_can_evaluate " + std::to_string(asked) + " exceeds the runner's " +
               std::to_string(max_rows) + " rows per forward; using " + std::to_string(budget_));

    // The prefill's features: one row per prompt token.
    nf_tensor* hs = nf::host().runner_last_output(runner, kFeature);
    if (!hs)
      throw nf::Error("eaglet: the target has no 'hidden_states' output (the LM head's input); add the "
                      "hidden_states transform to the manifest's transforms, before arcl");
    std::vector<float> f = features_of(hs, 0, SIZE_MAX);
    const size_t rows = f.size() / H_;
    if (rows == 0) throw nf::Error("eaglet: the target's hidden_states has no rows after the prefill");
    // Entries (f_j, x_{j+1}) for the prompt positions whose features we have.
    const size_t first = n_prompt > rows ? n_prompt - rows : 0;
    for (size_t j = first; j + 1 < n_prompt; ++j)
      pending_.push_back({{f.begin() + static_cast<long>((j - first) * H_), f.begin() + static_cast<long>((j - first + 1) * H_)},
                          prompt[j + 1], static_cast<int64_t>(j)});
    last_feature_.assign(f.end() - static_cast<long>(H_), f.end());
    if (!use_cache_) pending_.clear();
  }

  size_t step(float* last_logits, int32_t (*sample)(void*, const float*), void* user, int32_t* out, size_t max_out) {
    if (!step_.begin(last_logits, sample, user, out, max_out)) return 1;
    const int32_t cur = step_.current();
    const int64_t P = static_cast<int64_t>(step_.n_past());  // cur's position

    // Near the context's end the tree shrinks, down to the root alone.
    const size_t budget = std::min(budget_, step_.room());
    if (budget < budget_) ++stats_.trimmed_steps;
    std::vector<Node> nodes;
    if (budget > 1) draft_tree(cur, P, nodes);
    std::vector<int32_t> kept = rerank(nodes, budget);

    // Target rows: the root, then kept nodes (parents before children: kept is by depth).
    nf::DraftTree tree(cur);
    std::vector<int32_t> row_of(nodes.size(), -1);
    for (int32_t n : kept) {
      const Node& node = nodes[static_cast<size_t>(n)];
      const int32_t parent_row = node.parent < 0 ? 0 : row_of[static_cast<size_t>(node.parent)];
      row_of[static_cast<size_t>(n)] = tree.add_draft(node.token, parent_row);
    }
    const size_t n_rows = tree.size();
    if (n_rows > nf::host().runner_max_rows(runner_)) throw nf::Error("eaglet: tree exceeds the runner's rows");
    step_.forward(tree);
    stats_.drafted += n_rows - 1;
    const nf::Accepted accepted = step_.walk(tree, sample, user, max_out);

    // Features of the accepted rows, read before the commit (the rows of this forward).
    nf_tensor* hs = nf::host().runner_last_output(runner_, kFeature);
    if (!hs) throw nf::Error("eaglet: the target forward returned no 'hidden_states'");
    std::vector<float> f = features_of(hs, 0, n_rows);
    // Next step's catch-up entries: (feature of path[i], accepted[i+1]) at position P + i.
    const std::vector<int32_t>& path = accepted.path;
    for (size_t i = 0; i + 1 < path.size(); ++i)
      if (use_cache_)
        pending_.push_back({row_feature(f, path[i]), accepted.tokens[i + 1], P + static_cast<int64_t>(i)});
    last_feature_ = row_feature(f, path.back());
    return step_.commit(accepted, last_logits, out);
  }

  // The build hook: the draft graph joins the model set, so the package holds it.
  static void build(const nf::Options& o, nf::ModelSet ms, const nf::Context&) {
    eaglet::TreeShape tree;
    if (o.get<bool>("draft_loop_graph", true)) tree = {o.get<int64_t>("draft_len", 5), o.get<int64_t>("n_branches", 4)};
    eaglet::add_draft_graph(o.get<std::string>("draft", "eaglet"), o.get<int64_t>("draft_vocab", 0), tree, ms);
  }

  std::string stats() const {
    nlohmann::json j{{"draft_len", draft_len_},
                     {"n_branches", branches_},
                     {"max_tokens_target_can_evaluate", budget_},
                     {"draft_kv_cache", use_cache_},
                     {"target_forwards", step_.forwards()},
                     {"draft_forwards", draft_->passes() + eaglet::counts_total(tree_calls())},
                     {"draft_loop", tree_ ? "one graph a step" : "one launch per depth"},
                     {"draft_tree_calls", eaglet::counts_json(tree_calls())},
                     {"draft_rows", draft_->rows_run()},
                     {"draft_pass_rows", eaglet::counts_json(draft_->pass_rows())},
                     {"draft_runs_on", draft_->where()},
                     {"rows", step_.rows()},
                     {"max_rows", step_.max_rows()},
                     {"trimmed_steps", stats_.trimmed_steps},
                     {"drafted_tokens_verified", stats_.drafted},
                     {"accepted_draft_tokens", step_.accepted_drafts()},
                     {"draft_weight_bytes_per_pass", draft_->weight_bytes_per_pass()},
                     {"draft_macs_per_row", draft_->macs_per_row()},
                     {"draft_linears", draft_->linear_shapes()}};
    return j.dump();
  }

 private:
  // The model's draft graph on the backend session; a model built before the draft was a
  // graph has none, and draft.bin runs on the host.
  static std::unique_ptr<eaglet::Draft> open_draft(const nf::Options& o, nf_runner* runner, const nf::Context& ctx) {
    const std::string dir = o.get<std::string>("draft", "eaglet");
    nf_runner* draft = nullptr;
    nf_status* st = nf::host().runner_open_role(runner, nf::roles::kDraft, &draft);
    if (!st) return std::make_unique<eaglet::GraphDraft>(runner, draft, dir);
    if (nf::host().status_code(st) != NF_STATUS_NOT_FOUND) nf::check(st);
    nf::host().status_release(st);
    ctx.warn("the model holds no draft graph (a package built before the draft was a graph, or for a backend that "
             "does not compile it): the draft runs on the host in float32");
    return std::make_unique<eaglet::DraftModel>(dir, o.get<int64_t>("draft_vocab", 0));
  }
  // Calls of the draft tree graph by their rows (none without one).
  const std::map<int64_t, int64_t>& tree_calls() const {
    static const std::map<int64_t, int64_t> none;
    return tree_ ? tree_->calls() : none;
  }
  struct Entry {
    std::vector<float> feature;
    int32_t token;
    int64_t position;
  };

  // Rows [from, to) of a [1, rows, hidden] float32 tensor, as floats.
  std::vector<float> features_of(nf_tensor* t, size_t from, size_t to) const {
    nf::Tensor hs = nf::Tensor::borrow(t);
    auto dims = hs.dims();
    if (hs.dtype() != NF_DTYPE_FLOAT32 || dims.size() != 3 || dims[0] != 1 || static_cast<size_t>(dims[2]) != H_)
      throw nf::Error("eaglet: the target's hidden_states should be float32 [1, rows, " + std::to_string(H_) +
                      "] (the draft's hidden size)");
    to = std::min(to, static_cast<size_t>(dims[1]));
    const float* p = hs.data_as<float>();
    return {p + from * H_, p + to * H_};
  }
  std::vector<float> row_feature(const std::vector<float>& f, int32_t row) const {
    return {f.begin() + static_cast<long>(static_cast<size_t>(row) * H_),
            f.begin() + static_cast<long>((static_cast<size_t>(row) + 1) * H_)};
  }

  // Fills `nodes` with the drafted tree under the current token.
  void draft_tree(int32_t cur, int64_t P, std::vector<Node>& nodes) {
    // Catch-up entries and the root entry, committed to the draft's cache in order.
    std::vector<eaglet::Row> rows;
    for (const Entry& e : pending_) rows.push_back({e.feature.data(), e.token, e.position, -1});
    rows.push_back({last_feature_.data(), cur, P - 1, -1});
    if (!use_cache_) {
      draft_->clear_cache();
      if (tree_) tree_->reopen(graph_draft_->runner());
    }
    draft_->clear_scratch();
    if (tree_ && draft_with_graph(rows, nodes)) return;
    const size_t head = static_cast<size_t>(draft_->head_size());
    std::vector<float> feats(rows.size() * H_), logits(rows.size() * head);
    draft_->run_committed(rows, feats.data(), logits.data());
    pending_.clear();
    features_.assign(feats.end() - static_cast<long>(H_), feats.end());  // features_[0]: the root's output
    std::vector<int32_t> frontier;
    for (auto [col, lp] : top_k(logits.data() + (rows.size() - 1) * head, head, branches_, draft_->config().confidence_scale)) {
      frontier.push_back(static_cast<int32_t>(nodes.size()));
      nodes.push_back({draft_->head_token(col), -1, 1, lp, -1, 0});
    }
    for (int depth = 2; depth <= draft_len_ && !frontier.empty(); ++depth) {
      // Expand the n_branches likeliest nodes of the newest depth.
      std::sort(frontier.begin(), frontier.end(), [&](int32_t a, int32_t b) {
        return nodes[static_cast<size_t>(a)].logp > nodes[static_cast<size_t>(b)].logp;
      });
      if (frontier.size() > static_cast<size_t>(branches_)) frontier.resize(static_cast<size_t>(branches_));
      std::vector<eaglet::Row> xs;
      for (int32_t n : frontier) {
        const Node& node = nodes[static_cast<size_t>(n)];
        const int32_t parent_entry = node.parent < 0 ? -1 : nodes[static_cast<size_t>(node.parent)].entry;
        xs.push_back({features_.data() + node.feature * H_, node.token, P + node.depth - 1, parent_entry});
      }
      if (xs.size() > draft_->room()) break;  // the draft's context is full: the tree stops here
      std::vector<float> f(xs.size() * H_), l(xs.size() * head);
      std::vector<int32_t> ids = draft_->run_scratch(xs, f.data(), l.data());
      std::vector<int32_t> next;
      for (size_t i = 0; i < frontier.size(); ++i) {
        const size_t n = static_cast<size_t>(frontier[i]);
        nodes[n].entry = ids[i];
        const size_t feature = features_.size() / H_;
        features_.insert(features_.end(), f.begin() + static_cast<long>(i * H_), f.begin() + static_cast<long>((i + 1) * H_));
        for (auto [col, lp] : top_k(l.data() + i * head, head, branches_, draft_->config().confidence_scale)) {
          next.push_back(static_cast<int32_t>(nodes.size()));
          nodes.push_back({draft_->head_token(col), static_cast<int32_t>(n), nodes[n].depth + 1, nodes[n].logp + lp, -1,
                           feature});
        }
      }
      frontier = std::move(next);
    }
  }

  // The whole tree in one call of the tree graph. Catch-up rows beyond one call (the prompt's
  // entries at the first step) go first through the draft's own graphs, into the cache the
  // two share; false when the rest does not fit the tree's context (near the end): the step
  // drafts depth by depth with the rows left in `rows`.
  bool draft_with_graph(std::vector<eaglet::Row>& rows, std::vector<Node>& nodes) {
    const size_t lead = rows.size() > tree_->max_rows() ? rows.size() - tree_->max_rows() : 0;
    if (lead > 0) {
      const size_t head = static_cast<size_t>(draft_->head_size());
      std::vector<float> feats(lead * H_), logits(lead * head);
      draft_->run_committed({rows.data(), lead}, feats.data(), logits.data());
      rows.erase(rows.begin(), rows.begin() + static_cast<long>(lead));
    }
    if (!tree_->fits(rows.size())) return false;
    std::vector<eaglet::TreeNode> tree;
    tree_->draft(rows, tree);
    pending_.clear();
    for (const eaglet::TreeNode& t : tree) nodes.push_back({t.token, t.parent, t.depth, t.logp, -1, 0});
    return true;
  }

  // The budget - 1 likeliest nodes, closed under parents, ordered by depth.
  std::vector<int32_t> rerank(const std::vector<Node>& nodes, size_t budget) const {
    std::vector<int32_t> order(nodes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const Node &x = nodes[static_cast<size_t>(a)], &y = nodes[static_cast<size_t>(b)];
      return x.logp > y.logp || (x.logp == y.logp && x.depth < y.depth);
    });
    std::vector<char> in(nodes.size(), 0);
    std::vector<int32_t> kept;
    for (int32_t n : order) {
      if (kept.size() + 1 >= budget) break;
      const Node& node = nodes[static_cast<size_t>(n)];
      if (node.parent >= 0 && !in[static_cast<size_t>(node.parent)]) continue;
      in[static_cast<size_t>(n)] = 1;
      kept.push_back(n);
    }
    std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) {
      return nodes[static_cast<size_t>(a)].depth < nodes[static_cast<size_t>(b)].depth;
    });
    return kept;
  }

  struct Counters {
    size_t drafted = 0, trimmed_steps = 0;
  };

  nf_runner* runner_;
  nf::SpeculativeStep step_;
  std::unique_ptr<eaglet::Draft> draft_;
  eaglet::GraphDraft* graph_draft_ = nullptr;  // draft_ when it runs on the package's graphs
  std::unique_ptr<eaglet::TreeDraft> tree_;    // the depth loop as one graph, when the package has it
  int draft_len_ = 5, branches_ = 4;
  bool use_cache_ = true;
  size_t H_ = 0, budget_ = 1;
  std::vector<Entry> pending_;      // accepted (feature, next token) pairs the draft has not seen
  std::vector<float> last_feature_; // the target's feature of the newest committed token
  std::vector<float> features_;     // this step's draft output features (root's first)
  Counters stats_;
};


const nf_plugin_descriptor kEaglet = {NF_ABI_VERSION,
                                      sizeof(nf_plugin_descriptor),
                                      NF_KIND_SPECULATIVE,
                                      "eaglet",
                                      "0.2.0",
                                      "EAGLE-2 style draft on the target's hidden states: dynamic tree, one target pass",
                                      kSchema,
                                      &nf::SpeculativeTable<Eaglet>::api};

}  // namespace

NF_PLUGIN_LIBRARY(&kEaglet)
