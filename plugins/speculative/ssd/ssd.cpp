// ssd: self-speculative decoding with learned forecast tokens (Qualcomm's ssd-q1 idea).
//
// The target drafts for itself. F forecast embeddings are appended to the vocabulary (the
// build put them in the embedding table: token ids vocab..vocab+F-1) and a learned KV
// prefix, graph state the build added beside them (role kv_prefix), is seen only by forecast
// rows (NF_ROW_SEES_PREFIX), so plain rows keep the target's exact numbers. Under a real
// token at position p, a chain of D forecast rows at p+1..p+D predicts the tokens at
// p+2..p+D+1.
//
// One step is one runner_forward_flags over:
//   tree rows: row 0 = the current token (drawn from the target, not yet in the cache),
//     then a Cartesian tree: level k holds the top-branches[k] tokens of forecast k (the
//     same candidates under every node of level k-1; levels past the list take 1);
//   forecast rows: under every tree node, a chain of D forecast rows.
// The walk samples the target's token at each node and follows the matching child (greedy
// output equals plain greedy; sampled output keeps the target's distribution). The
// forecast chain under the last accepted node drafts the next step's tree: one pass
// verifies this tree and drafts the next one.
//
// Near the end of the context (runner_rows_available) a step's tree shrinks the way the
// constructor fits it to the runner (widest deepest level first, then depth), down to the
// root alone. The prefix's slots belong to the graphs (a static package's caches are P slots
// shorter), so plain decoding on the same package has the same context. The last token of a
// full context is returned without a forward, as in plain decoding.
#include <npuforge/speculative.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "assets.h"

namespace {

constexpr const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "assets": {"type": "string", "format": "asset", "default": "ssd",
               "description": "folder of the trained assets (assets.json, forecast embeddings, KV prefix; made by tools/speculative/train_ssd.py), relative to the manifest; the default is the model's folder's ssd/. The build's first stage (the decoder's build hook) appends the forecast embeddings to the model's embedding table and adds the KV prefix as graph state (arcl builds it into every static graph), and the folder is copied into the package"},
    "forecast_token_count": {"type": "integer", "minimum": 1, "maximum": 16, "default": 1,
                             "description": "D: forecast rows chained under each tree node = draft depth (at most the trained count)"},
    "forecast_prefix": {"type": "integer", "minimum": 0, "maximum": 4096, "default": 16,
                        "description": "KV prefix rows forecast rows attend to: the trained count, or 0 for none (a build with 0 leaves the prefix out of the graphs; a run with 0 does not show it to the forecast rows)"},
    "branches": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 16},
                 "minItems": 1, "maxItems": 16, "default": [15],
                 "description": "top-k per draft level (a Cartesian tree); levels past the list take 1"}
  }
})json";

class Ssd {
 public:
  static constexpr const char* kName = "ssd";
  // The build hook: the forecast embeddings go into the model's embedding table, the KV
  // prefix into a graph of role kv_prefix.
  static void build(const nf::Options& o, nf::ModelSet ms, const nf::Context&) {
    const std::string dir = assets_dir(o);
    const ssd::Assets a = ssd::load_assets(dir, /*kv_rows=*/o.get<int>("forecast_prefix", 16) > 0);
    const bool prefix = checked_prefix(o, a) > 0;
    if (prefix) ssd::check_kv_prefix(a, dir, ms);  // a refusal leaves the model set as it was
    ssd::append_forecast_embeddings(dir, ms);
    if (prefix) ssd::add_kv_prefix_graph(a, ms);
  }
  static std::string assets_dir(const nf::Options& o) {
    std::string dir = o.get<std::string>("assets", "");
    if (dir.empty())
      throw nf::Error("ssd: no assets: set [speculative] assets = DIR (made by tools/speculative/train_ssd.py)");
    return dir;
  }

  // forecast_prefix: the assets' trained row count or 0.
  static int checked_prefix(const nf::Options& o, const ssd::Assets& a) {
    const int prefix = o.get<int>("forecast_prefix", 16);
    if (prefix != 0 && prefix != a.prefix)
      throw nf::Error("ssd: forecast_prefix " + std::to_string(prefix) + " does not match the assets' " +
                      std::to_string(a.prefix) + " trained KV prefix rows (use " + std::to_string(a.prefix) + " or 0)");
    return prefix;
  }

  Ssd(const nf::Options& o, nf_runner* runner, const int32_t* /*prompt*/, size_t /*n_prompt*/, nf::Context ctx)
      : step_(kName, runner) {
    const ssd::Assets a = ssd::load_assets(assets_dir(o), /*kv_rows=*/false);  // the graphs hold the prefix
    depth_ = o.get<int>("forecast_token_count", 1);
    prefix_rows_ = checked_prefix(o, a);
    widths_ = o.get<std::vector<int>>("branches", {15});
    if (depth_ > a.forecast_tokens)
      throw nf::Error("ssd: forecast_token_count " + std::to_string(depth_) + " exceeds the " +
                      std::to_string(a.forecast_tokens) + " forecast embeddings the assets trained");
    if (static_cast<int>(widths_.size()) > depth_)
      throw nf::Error("ssd: branches has " + std::to_string(widths_.size()) + " levels but forecast_token_count is " +
                      std::to_string(depth_) + " (one forecast row per draft level)");
    widths_.resize(static_cast<size_t>(depth_), 1);

    const nf_host_api& h = nf::host();
    first_id_ = static_cast<int32_t>(a.first_id);
    const size_t vocab = step_.vocab();
    if (a.first_id != static_cast<int64_t>(vocab))
      throw nf::Error("ssd: the assets' forecast tokens start at id " + std::to_string(a.first_id) +
                      " but the model's vocab is " + std::to_string(vocab) + " (assets of another model?)");
    if (h.runner_input_vocab_size(runner) < vocab + static_cast<size_t>(a.forecast_tokens))
      throw nf::Error("ssd: the model's graphs have no forecast embeddings (they embed " +
                      std::to_string(h.runner_input_vocab_size(runner)) +
                      " token ids): build the package with [speculative] decoder = \"ssd\" and assets = DIR");
    fit_rows(h.runner_max_rows(runner), ctx);
  }

  size_t step(float* last_logits, int32_t (*sample)(void*, const float*), void* user, int32_t* out, size_t max_out) {
    if (!step_.begin(last_logits, sample, user, out, max_out)) return 1;

    // This step's shape: the configured tree, trimmed to the rows the context still takes.
    Shape shape = fit(Shape{depth_, widths_}, step_.room());
    if (shape.depth != depth_ || shape.widths != widths_) {
      ++stats_.trimmed_steps;
      if (stats_.trimmed_steps == 1)
        nf::Context(nullptr).warn("ssd: near the end of the context (" + std::to_string(step_.n_past()) +
                                  " tokens): steps shrink to the " + std::to_string(step_.room()) +
                                  " rows that still fit (this one: " + describe(shape) + ")");
    }

    // Tree rows: the root, then level by level the forecast candidates under every node.
    nf::DraftTree tree(step_.current());
    std::vector<int32_t> level{0};
    const size_t levels = std::min(draft_.size(), static_cast<size_t>(shape.depth));
    for (size_t k = 0; k < levels; ++k) {
      std::vector<int32_t> next;
      const size_t width = std::min(draft_[k].size(), static_cast<size_t>(shape.widths[k]));
      for (int32_t p : level)
        for (size_t c = 0; c < width; ++c) next.push_back(tree.add_draft(draft_[k][c], p));
      level = std::move(next);
    }
    const size_t nodes = tree.size();
    // Forecast rows: a chain of D under every tree node; chain[node] = its first row.
    const uint32_t fflag = prefix_rows_ > 0 ? NF_ROW_SEES_PREFIX : 0;
    std::vector<int32_t> chain(nodes);
    for (size_t n = 0; n < nodes; ++n) {
      int32_t parent = static_cast<int32_t>(n);
      for (int k = 0; k < shape.depth; ++k) {
        parent = tree.add_unverified(first_id_ + k, parent, fflag);
        if (k == 0) chain[n] = parent;
      }
    }
    step_.forward(tree);
    stats_.drafted += nodes - 1;
    const nf::Accepted accepted = step_.walk(tree, sample, user, max_out);

    // The next tree: top-k of each forecast row under the last accepted node (a trimmed
    // step drafts only the levels it forecast).
    draft_.assign(static_cast<size_t>(depth_), {});
    for (int k = 0; k < shape.depth; ++k)
      draft_[static_cast<size_t>(k)] =
          top_k(step_.logits_of(chain[static_cast<size_t>(accepted.last_row())] + k), widths_[static_cast<size_t>(k)]);
    return step_.commit(accepted, last_logits, out);
  }

  std::string stats() const {
    nlohmann::json j{{"forecast_token_count", depth_},
                     {"branches", widths_},
                     {"forecast_prefix", prefix_rows_},
                     {"first_forecast_id", first_id_},
                     {"steps", step_.forwards()},
                     {"rows", step_.rows()},
                     {"max_rows", step_.max_rows()},
                     {"rows_per_step", rows_per_step()},
                     {"trimmed_steps", stats_.trimmed_steps},
                     {"drafted_tokens", stats_.drafted},
                     {"accepted_draft_tokens", step_.accepted_drafts()}};
    return j.dump();
  }

 private:
  // A tree: draft depth D (= forecast rows per node) and top-k per level.
  struct Shape {
    int depth = 0;
    std::vector<int> widths;
  };
  // Root, a draft and a forecast row under each: the smallest step that drafts and verifies.
  static constexpr size_t kMinRows = 4;

  // Tree nodes x (1 + D): every node carries its forecast chain.
  static size_t rows_of(const Shape& s) {
    size_t nodes = 1, level = 1;
    for (int k = 0; k < s.depth; ++k) nodes += (level *= static_cast<size_t>(s.widths[static_cast<size_t>(k)]));
    return nodes * static_cast<size_t>(1 + s.depth);
  }
  size_t rows_per_step() const { return rows_of(Shape{depth_, widths_}); }

  // Shrinks `s` until it fits `max_rows`: the deepest width first, then depth; depth 0 is
  // the root alone (one row).
  static Shape fit(Shape s, size_t max_rows) {
    while (s.depth > 0 && rows_of(s) > max_rows) {
      if (s.depth > 1 && s.widths.back() == 1) {  // a width-1 tail level: drop it first
        --s.depth;
        s.widths.pop_back();
        continue;
      }
      auto wide = std::find_if(s.widths.rbegin(), s.widths.rend(), [](int w) { return w > 1; });
      if (wide != s.widths.rend()) {
        --*wide;
      } else {
        --s.depth;
        s.widths.pop_back();
      }
    }
    return s;
  }

  static std::string describe(const Shape& s) {
    std::string list = "[";
    for (size_t i = 0; i < s.widths.size(); ++i) list += (i ? "," : "") + std::to_string(s.widths[i]);
    return "forecast_token_count " + std::to_string(s.depth) + " / branches " + list + "] (" +
           std::to_string(rows_of(s)) + " rows)";
  }

  // Fits the configured tree to the runner's rows per pass (its largest AR variant).
  void fit_rows(size_t max_rows, const nf::Context& ctx) {
    const Shape want{depth_, widths_};
    const Shape got = fit(want, max_rows);
    if (got.depth == 0)
      throw nf::Error("ssd: a step needs at least 4 rows (root, one draft, one forecast row each); the runner "
                      "scores " + std::to_string(max_rows) + " rows per forward (largest AR variant)");
    if (got.depth != want.depth || got.widths != want.widths)
      ctx.warn(describe(want) + " per step, the runner takes " + std::to_string(max_rows) + "; using " +
               describe(got));
    depth_ = got.depth;
    widths_ = got.widths;
  }

  std::vector<int32_t> top_k(const float* l, int k) const {
    std::vector<int32_t> idx(step_.vocab());
    std::iota(idx.begin(), idx.end(), 0);
    const size_t kk = std::min(static_cast<size_t>(k), step_.vocab());
    std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(kk), idx.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    idx.resize(kk);
    return idx;
  }

  struct Counters {
    size_t drafted = 0, trimmed_steps = 0;
  };

  nf::SpeculativeStep step_;
  int depth_ = 2;
  std::vector<int> widths_;
  int32_t first_id_ = 0;
  int prefix_rows_ = 0;
  std::vector<std::vector<int32_t>> draft_;  // per level: candidates for the next tree
  Counters stats_;
};


const nf_plugin_descriptor kSsd = {NF_ABI_VERSION,
                                   sizeof(nf_plugin_descriptor),
                                   NF_KIND_SPECULATIVE,
                                   "ssd",
                                   "0.2.0",
                                   "self-speculative decoding: learned forecast tokens draft the next tree in the verifying pass",
                                   kSchema,
                                   &nf::SpeculativeTable<Ssd>::api};

}  // namespace

NF_PLUGIN_LIBRARY(&kSsd)
