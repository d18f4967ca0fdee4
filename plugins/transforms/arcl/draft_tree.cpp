// How a tree graph is put together (its contract: graph_roles.hpp, draft_tree). Per context
// length CL the draft's B-row static variant is built once as the template of the tree
// passes; per AR R the R-row variant at CL' = CL - (D-1)B is the catch-up pass and becomes the
// tree graph. Tree pass d (1 .. D-1) is a copy of the template, its values renamed, reading
//   input_ids     the tokens of the depth-d frontier
//   position_ids  the root's position + d
//   features      depth 1: the root row's output features; deeper: each node's parent's
//   cache         Concat(catch-up cache, catch-up rows, rows of passes 1 .. d-1, empty slots):
//                 CL - B slots, the template's cache input
//   mask          the root row's mask over the catch-up cache and rows, each node's
//                 ancestors among the earlier passes' rows, no empty slot, itself.
// The cache of earlier passes is every row they ran; the mask picks a node's ancestors.
#include "draft_tree.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/copy_node.h>
#include <npuforge/graph/make_static.h>
#include <npuforge/graph/unique_names.h>
#include <npuforge/graph/value_types.h>

#include <cstring>
#include <functional>
#include <map>

#include "static_variant.h"

namespace arcl {
namespace {

using Dims = std::vector<int64_t>;

bool same_tensor(const nf::Tensor& a, const nf::Tensor& b) {
  if (a.dtype() != b.dtype() || a.dims() != b.dims() || a.nbytes() != b.nbytes()) return false;
  return a.data() == b.data() || std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Node and constant helpers over the graph being built; every name it makes is fresh.
class Builder {
 public:
  Builder(nf::ModelSet ms, nf::Graph g) : ms_(ms), g_(g), names_(g) {}

  std::string fresh(const std::string& base) { return names_.make("tree/" + base); }
  template <class T>
  std::string constant(nf_dtype dtype, const Dims& dims, const std::vector<T>& values, const std::string& base) {
    nf::Tensor t = nf::Tensor::create(dtype, dims);
    std::memcpy(t.mutable_data(), values.data(), values.size() * sizeof(T));
    const std::string name = fresh(base);
    g_.set_initializer(name, t);
    return name;
  }
  // An int64 vector constant (shapes, axes, k), one per distinct content.
  std::string ints(const std::vector<int64_t>& v) {
    auto it = ints_.find(v);
    if (it == ints_.end()) it = ints_.emplace(v, constant(NF_DTYPE_INT64, {static_cast<int64_t>(v.size())}, v, "i64")).first;
    return it->second;
  }
  std::string scalar(float v) { return constant(NF_DTYPE_FLOAT32, {}, std::vector<float>{v}, "f32"); }
  // One node with one output (named after `base`).
  std::string op(const std::string& type, const std::vector<std::string>& in, const std::string& base,
                 const std::function<void(nf::Node&)>& attrs = {}) {
    const std::string out = fresh(base);
    nf::Node n = g_.add_node(type, in, {out}, names_.make("/tree/" + base + "/" + type));
    if (attrs) attrs(n);
    return out;
  }
  std::string reshape(const std::string& x, const Dims& dims, const std::string& base) {
    return op("Reshape", {x, ints(dims)}, base);
  }
  std::string concat(const std::vector<std::string>& parts, int64_t axis, const std::string& base) {
    return parts.size() == 1 ? parts[0] : op("Concat", parts, base, [&](nf::Node& n) { n.set_attr("axis", axis); });
  }
  // The k largest along the last axis, largest first (ties: the lower index first).
  std::pair<std::string, std::string> topk(const std::string& x, int64_t k, const std::string& base) {
    const std::string v = fresh(base + ".values"), i = fresh(base + ".indices");
    nf::Node n = g_.add_node("TopK", {x, ints({k})}, {v, i}, names_.make("/tree/" + base + "/TopK"));
    n.set_attr("axis", int64_t{-1});
    n.set_attr("largest", int64_t{1});
    n.set_attr("sorted", int64_t{1});
    return {v, i};
  }
  // Copies the static variant `pass` into the graph, every value it computes renamed under
  // "tree/p{d}/", reading `feeds` for its inputs; constants the graph holds with the same
  // bytes (the weights) are shared. Encodings follow the renamed values. Returns the renames.
  std::map<std::string, std::string> copy_pass(nf::Graph pass, int64_t d, const std::map<std::string, std::string>& feeds) {
    std::map<std::string, std::string> name = feeds;
    for (const auto& [input, value] : feeds)  // a fed value is quantized as the input it stands for
      if (const nf_encoding* e = ms_.encoding(input); e && !ms_.encoding(value)) ms_.set_encoding(value, *e);
    const std::string prefix = "p" + std::to_string(d) + "/";
    for (const std::string& w : pass.initializer_names()) {
      auto shared = shared_.find(w);
      if (shared == shared_.end()) {
        const nf::Tensor t = pass.initializer(w);
        std::string mine = w;
        if (!nf::host().graph_initializer(g_.get(), w.c_str()) || !same_tensor(g_.initializer(w), t)) {
          mine = fresh(w);
          g_.set_initializer(mine, t);
        }
        shared = shared_.emplace(w, mine).first;
      }
      name[w] = shared->second;
    }
    for (const nf::Node& n : pass.nodes()) {
      std::vector<std::string> ins, outs;
      for (const std::string& in : n.inputs()) {
        if (in.empty()) {
          ins.push_back(in);
          continue;
        }
        auto it = name.find(in);
        if (it == name.end())
          throw nf::Error("arcl: draft tree: pass value '" + in + "' is neither an input, a constant nor computed before");
        ins.push_back(it->second);
      }
      for (const std::string& out : n.outputs()) {
        const std::string renamed = fresh(prefix + out);
        name[out] = renamed;
        if (const nf_encoding* e = ms_.encoding(out)) ms_.set_encoding(renamed, *e);
        outs.push_back(renamed);
      }
      nf::graph::copy_node(g_, n, ins, outs, names_.make("/tree/" + prefix + std::string(n.name())));
    }
    return name;
  }

 private:
  nf::ModelSet ms_;
  nf::Graph g_;
  nf::graph::UniqueNames names_;
  std::map<std::string, std::string> shared_;  // a pass constant -> the graph's
  std::map<std::vector<int64_t>, std::string> ints_;
};

// Turns the R-row variant `g` (at CL') into the tree graph; `pass` is the B-row variant at CL.
void build_tree(nf::ModelSet ms, nf::Graph g, nf::Graph pass, const ModelInfo& info, bool htp,
                const nf::roles::DraftTree& t, const std::vector<int64_t>& head_tokens, int64_t rows, int64_t cl) {
  namespace dec = nf::decoder;
  const int64_t B = t.branches, D = t.depth, R = rows, CLp = cl - (D - 1) * B;
  Builder b(ms, g);
  auto type_of = [&](const nf::Graph& graph, const std::string& v) {
    auto ty = nf::graph::get_value_type(graph, v);
    if (!ty || !ty->dims) throw nf::Error("arcl: draft tree: graph " + graph.name() + " has no static type for '" + v + "'");
    return *ty;
  };
  const nf_dtype ids_dtype = type_of(pass, dec::kInputIds).dtype;
  if (type_of(pass, dec::kPositionIds).dtype != NF_DTYPE_INT64 || info.kv_dtype != NF_DTYPE_FLOAT32)
    throw nf::Error("arcl: draft tree: the draft needs int64 position_ids and a float32 KV cache");
  const int64_t H = type_of(g, t.feature_output).dims->back();

  // The root: the catch-up row flagged by tree_root.
  g.set_value_type(nf::roles::kTreeRoot, NF_DTYPE_FLOAT32, {1, R, 1});
  const std::string pick = b.reshape(nf::roles::kTreeRoot, {1, 1, R}, "root.pick");
  const std::string root_logits = b.op("MatMul", {pick, dec::kLogits}, "root.logits");
  const std::string root_feature = b.op("MatMul", {pick, t.feature_output}, "root.features");
  const std::string root_mask =
      b.op("MatMul", {b.reshape(nf::roles::kTreeRoot, {1, 1, 1, R}, "root.pick4"), dec::kAttentionMask}, "root.mask");
  const std::string root_flag = b.op("Cast", {b.reshape(nf::roles::kTreeRoot, {1, R}, "root.flag")}, "root.flag64",
                                    [](nf::Node& n) { n.set_attr("to", static_cast<int64_t>(NF_DTYPE_INT64)); });
  const std::string root_pos = b.op("ReduceSum", {b.op("Mul", {dec::kPositionIds, root_flag}, "root.positions"), b.ints({1})},
                                    "root.position", [](nf::Node& n) { n.set_attr("keepdims", int64_t{1}); });  // [1, 1]
  const std::string token_map =
      head_tokens.empty() ? "" : b.constant(NF_DTYPE_INT64, {static_cast<int64_t>(head_tokens.size())}, head_tokens, "head_tokens");
  auto tokens_of = [&](const std::string& columns) { return token_map.empty() ? columns : b.op("Gather", {token_map, columns}, "tokens"); };
  // Log probabilities of the B likeliest tokens of each row of `logits` [..., V], and the tokens.
  // (Each op is a launch on the device: the scale goes only where it is not 1.)
  const std::string scale = t.logit_scale == 1.f ? "" : b.scalar(t.logit_scale);
  auto children = [&](const std::string& logits, const std::string& base) {
    const std::string s = scale.empty() ? logits : b.op("Mul", {logits, scale}, base + ".scaled");
    auto [v, i] = b.topk(b.op("LogSoftmax", {s}, base + ".logp", [](nf::Node& n) { n.set_attr("axis", int64_t{-1}); }), B,
                         base + ".top");
    return std::make_pair(v, tokens_of(i));
  };

  // Depth 1: the root's B likeliest tokens, nodes 0 .. B-1.
  auto [lp1, tok1] = children(root_logits, "d1");
  std::string frontier_logp = b.reshape(lp1, {1, B}, "d1.logp2"), frontier_tokens = b.reshape(tok1, {1, B}, "d1.tokens2");
  std::vector<int64_t> first_ids(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) first_ids[static_cast<size_t>(i)] = i;
  std::string frontier_ids = b.constant(NF_DTYPE_INT64, {1, B}, first_ids, "d1.ids");
  std::vector<std::string> out_tokens{frontier_tokens}, out_logp{frontier_logp},
      out_parents{b.constant(NF_DTYPE_INT64, {1, B}, std::vector<int64_t>(static_cast<size_t>(B), -1), "d1.parents")};

  // Constant mask pieces: each row sees itself; empty slots are seen by none.
  std::vector<float> own(static_cast<size_t>(B * B), kMaskValue);
  for (int64_t i = 0; i < B; ++i) own[static_cast<size_t>(i * B + i)] = 0.f;
  const std::string own_mask = b.constant(NF_DTYPE_FLOAT32, {1, 1, B, B}, own, "mask.self");
  const std::string root_mask_rows = b.op("Expand", {root_mask, b.ints({1, 1, B, CLp})}, "mask.root");
  const std::string parent_rows = b.constant(NF_DTYPE_FLOAT32, {B, B}, own, "mask.parent");  // row r: sees row r

  std::vector<std::vector<std::string>> rows_kv(static_cast<size_t>(info.layers * 2));  // earlier passes' rows per cache
  std::string ancestors;   // [B, (d-1)B] additive: a node's ancestors among the earlier passes' rows
  std::string features = b.op("Expand", {root_feature, b.ints({1, B, H})}, "d1.features");
  std::vector<int64_t> depths;  // pass d's rows sit at the root's position + d
  for (int64_t d = 1; d < D; ++d) depths.push_back(d);
  const std::string depth_positions =
      D > 1 ? b.op("Add", {root_pos, b.constant(NF_DTYPE_INT64, {1, D - 1}, depths, "depths")}, "positions") : "";
  for (int64_t d = 1; d < D; ++d) {
    const std::string p = "p" + std::to_string(d) + ".";
    std::map<std::string, std::string> feeds;
    feeds[dec::kInputIds] =
        ids_dtype == NF_DTYPE_INT64 ? frontier_tokens : b.op("Cast", {frontier_tokens}, p + "ids", [&](nf::Node& n) {
          n.set_attr("to", static_cast<int64_t>(ids_dtype));
        });
    feeds[dec::kPositionIds] = b.op(
        "Expand", {b.op("Slice", {depth_positions, b.ints({d - 1}), b.ints({d}), b.ints({1})}, p + "position"), b.ints({1, B})},
        p + "positions");
    feeds[t.feature_input] = features;
    const int64_t empty = (D - 1 - d) * B;
    std::vector<std::string> mask{root_mask_rows};
    if (!ancestors.empty()) mask.push_back(b.reshape(ancestors, {1, 1, B, (d - 1) * B}, p + "mask.ancestors"));
    if (empty > 0)
      mask.push_back(b.constant(NF_DTYPE_FLOAT32, {1, 1, B, empty}, std::vector<float>(static_cast<size_t>(B * empty), kMaskValue),
                                p + "mask.empty"));
    mask.push_back(own_mask);
    feeds[dec::kAttentionMask] = b.concat(mask, 3, p + "mask");
    for (int64_t l = 0; l < info.layers; ++l)
      for (bool key : {true, false}) {
        const std::string past = key ? info.past_key(l) : info.past_value(l), present = key ? info.present_key(l) : info.present_value(l);
        std::vector<std::string> parts{past, present};
        const auto& earlier = rows_kv[static_cast<size_t>(l * 2 + (key ? 0 : 1))];
        parts.insert(parts.end(), earlier.begin(), earlier.end());
        if (empty > 0)
          parts.push_back(b.constant(NF_DTYPE_FLOAT32, cache_io_dims(info, htp, key, empty),
                                     std::vector<float>(static_cast<size_t>(info.kv_heads * info.head_dim * empty), 0.f),
                                     p + "cache.empty"));
        feeds[past] = b.concat(parts, cache_row_axis(htp, key), p + past);
      }
    const std::map<std::string, std::string> ran = b.copy_pass(pass, d, feeds);
    for (int64_t l = 0; l < info.layers; ++l) {
      rows_kv[static_cast<size_t>(l * 2)].push_back(ran.at(info.present_key(l)));
      rows_kv[static_cast<size_t>(l * 2 + 1)].push_back(ran.at(info.present_value(l)));
    }

    // B children of each of the B nodes: [1, B, B] -> [1, B*B], nodes ordered by parent.
    auto [lp, tok] = children(ran.at(dec::kLogits), p + "children");
    const std::string cum = b.reshape(b.op("Add", {lp, b.reshape(frontier_logp, {1, B, 1}, p + "parent_logp")}, p + "cum"), {1, B * B},
                                      p + "cum2");
    const std::string child_tokens = b.reshape(tok, {1, B * B}, p + "tokens");
    out_tokens.push_back(child_tokens);
    out_logp.push_back(cum);
    out_parents.push_back(b.reshape(b.op("Expand", {b.reshape(frontier_ids, {1, B, 1}, p + "ids3"), b.ints({1, B, B})}, p + "parents3"),
                                    {1, B * B}, p + "parents"));
    if (d + 1 == D) break;

    // The next frontier: the B likeliest children.
    auto [next_logp, pick_c] = b.topk(cum, B, p + "frontier");
    const std::string picked = b.reshape(pick_c, {B}, p + "picked");
    const std::string parent_row = b.op("Div", {picked, b.constant(NF_DTYPE_INT64, {}, std::vector<int64_t>{B}, "B")}, p + "parent_row");
    frontier_logp = next_logp;
    frontier_tokens = b.reshape(b.op("Gather", {b.reshape(child_tokens, {B * B}, p + "tokens1"), picked}, p + "next_tokens"), {1, B},
                                p + "next_tokens2");
    const int64_t first_child = B + (d - 1) * B * B;  // node id of this pass's first child
    frontier_ids = b.op("Add", {pick_c, b.constant(NF_DTYPE_INT64, {}, std::vector<int64_t>{first_child}, "first_child")}, p + "next_ids");
    features = b.op("Gather", {ran.at(t.feature_output), parent_row}, p + "next_features",
                    [](nf::Node& n) { n.set_attr("axis", int64_t{1}); });
    // The picked nodes see their parent's row of this pass and the parent's ancestors.
    const std::string parent = b.op("Gather", {parent_rows, parent_row}, p + "parent_mask",
                                    [](nf::Node& n) { n.set_attr("axis", int64_t{0}); });
    ancestors = ancestors.empty() ? parent
                                  : b.concat({b.op("Gather", {ancestors, parent_row}, p + "inherited",
                                                   [](nf::Node& n) { n.set_attr("axis", int64_t{0}); }),
                                              parent},
                                             1, p + "ancestors");
  }

  const std::string tokens = b.concat(out_tokens, 1, "tokens.all"), logp = b.concat(out_logp, 1, "logp.all"),
                    parents = b.concat(out_parents, 1, "parents.all");
  g.add_node("Identity", {tokens}, {nf::roles::kTreeTokens}, "/tree/tokens/Identity");
  g.add_node("Identity", {logp}, {nf::roles::kTreeLogp}, "/tree/logp/Identity");
  g.add_node("Identity", {parents}, {nf::roles::kTreeParents}, "/tree/parents/Identity");
  std::vector<std::string> ins = g.inputs(), outs = g.outputs();
  ins.push_back(nf::roles::kTreeRoot);
  outs.insert(outs.end(), {nf::roles::kTreeTokens, nf::roles::kTreeParents, nf::roles::kTreeLogp});
  g.set_inputs(ins);
  g.set_outputs(outs);
  g.sort();
  const std::string what = "arcl: draft tree " + g.name();
  nf::graph::make_static(g, what);
  const int64_t N = t.nodes();
  for (const char* out : {nf::roles::kTreeTokens, nf::roles::kTreeParents, nf::roles::kTreeLogp}) {
    auto ty = nf::graph::get_value_type(g, out);
    if (!ty || !ty->dims || *ty->dims != Dims{1, N}) throw nf::Error(what + ": '" + std::string(out) + "' is not [1, " + std::to_string(N) + "]");
  }
}

}  // namespace

nlohmann::json make_draft_trees(nf::ModelSet& ms, nf::Graph source, const ModelInfo& info,
                                const std::vector<Variant>& variants, const std::string& kv_layout,
                                const nf::roles::DraftTree& tree, const std::vector<int64_t>& head_tokens,
                                const std::string& prefix, nf::Context& ctx) {
  nlohmann::json io = nlohmann::json::array();
  if (info.sliding_window) {
    ctx.warn("arcl: the draft has a sliding window: its depth loop stays one graph launch per depth");
    return io;
  }
  const int64_t B = tree.branches, grown = (tree.depth - 1) * B;
  std::map<int64_t, std::vector<int64_t>> ars_by_cl;
  for (const Variant& v : variants) ars_by_cl[v.cl].push_back(v.ar);
  for (const auto& [cl, ars] : ars_by_cl) {
    if (B >= cl) continue;
    const std::string template_name = prefix + "pass_template";
    nf::Graph pass = ms.add_graph(template_name, &source);
    try {
      build_static_variant(pass, {B, cl, std::nullopt}, info, kv_layout);
      for (int64_t ar : ars) {
        const Variant v{ar, cl - grown, std::nullopt};
        if (v.cl <= ar) {
          ctx.warn("arcl: no draft tree for AR " + std::to_string(ar) + " at CL " + std::to_string(cl) + ": its " +
                   std::to_string(grown) + " tree rows leave no cache slot");
          continue;
        }
        ctx.progress(static_cast<size_t>(io.size()), variants.size(), prefix + v.graph_name());
        nf::Graph g = ms.add_graph(prefix + v.graph_name(), &source);
        build_static_variant(g, v, info, kv_layout);
        build_tree(ms, g, pass, info, kv_layout == "htp", tree, head_tokens, ar, cl);
        io.push_back({{"graph", prefix + v.graph_name()}, {"ar", v.ar}, {"cl", v.cl}, {"scl", nullptr}});
      }
    } catch (...) {
      ms.remove_graph(template_name);
      throw;
    }
    ms.remove_graph(template_name);
  }
  if (io.empty()) ctx.warn("arcl: no context length leaves room for the draft tree's " + std::to_string(grown) + " rows");
  return io;
}

}  // namespace arcl
