#include "sha_rewrite.h"

#include <npuforge/graph/value_types.h>

namespace mha2sha {
namespace {

using nf::graph::GraphView;

const Dims kIdentity{0, 1, 2, 3};
const Dims kSwapLast{0, 1, 3, 2};

std::string tag(int64_t h) { return ".h" + std::to_string(h); }

// Copies `nodes` (in order) once, reading `map`ped values, and extends `map` with the copies'
// outputs.
void clone_chain(GraphEditor& ed, const std::vector<nf_node*>& nodes, std::map<std::string, std::string>& map,
                 const std::string& suffix) {
  for (nf_node* p : nodes) {
    nf::Node n(p);
    std::vector<std::string> in, out;
    for (const std::string& v : n.inputs()) in.push_back(map.count(v) ? map[v] : v);
    for (const std::string& v : n.outputs()) {
      out.push_back(v.empty() ? v : ed.fresh(v + suffix));
      map[v] = out.back();
    }
    ed.clone(n, in, out, std::string(n.name()) + suffix);
  }
}

// Each Reshape in `nodes` reshapes one head's copy to its static output dims with the head
// axis `axis` set to 1: the copy reads that shape constant instead (through `map`).
void one_head_reshapes(GraphEditor& ed, const std::vector<nf_node*>& nodes, size_t axis,
                       std::map<std::string, std::string>& map) {
  for (nf_node* p : nodes) {
    nf::Node n(p);
    if (n.op_type() != "Reshape") continue;
    Dims shape = static_dims(ed.graph(), n.output(0), "Reshape output");
    shape[axis] = 1;
    map[n.input(1)] = ed.int64_constant(shape);
  }
}

// `v` through copies of scalar Mul/Div nodes (their constant operand kept), one after another.
std::string apply_scales(const GraphView& view, GraphEditor& ed, const std::vector<nf_node*>& scales, std::string v,
                         const std::string& suffix) {
  for (nf_node* p : scales) {
    nf::Node n(p);
    std::vector<std::string> in = n.inputs();
    for (std::string& x : in)
      if (!view.is_initializer(x)) x = v;
    v = ed.fresh(n.output(0) + suffix);
    ed.clone(n, in, {v}, std::string(n.name()) + suffix);
  }
  return v;
}

// One value [1, 1, rows, head_dim] per head of a branch.
std::vector<std::string> split_branch(GraphEditor& ed, const HeadBranch& b, HeadWeights& weights) {
  nf::Graph g = ed.graph();
  const bool shared = !b.shared_out.empty();  // the projection stays whole: heads take columns
  std::vector<std::string> w, bias;
  if (!shared) w = weights.slices(g, b.weight, b.heads, b.columns());
  if (!b.bias.empty()) bias = weights.slices(g, b.bias, b.heads, b.columns());
  std::vector<std::string> out, projected, biased;
  for (int64_t h = 0; h < b.heads; ++h) {
    const std::string t = tag(h);
    std::string v = ed.fresh(b.heads_out + t + (shared ? ".cols" : ".proj"));
    if (shared)
      ed.add("Slice", {b.shared_out, ed.int64_constant({h * b.head_dim}), ed.int64_constant({(h + 1) * b.head_dim}),
                       ed.int64_constant({2})},
             {v}, b.shared_out + t + "/Slice");
    else
      ed.add("MatMul", {b.x, w[h]}, {v}, b.weight + t + "/MatMul");
    projected.push_back(v);
    if (!bias.empty()) {
      biased.push_back(ed.fresh(v + ".bias"));
      ed.add("Add", b.bias_first ? std::vector<std::string>{bias[h], v} : std::vector<std::string>{v, bias[h]},
             {biased.back()}, b.bias + t + "/Add");
      v = biased.back();
    }
    // The region before the transpose runs on one head's [1, 1, rows, head_dim] when it stays
    // within head_dim, else on its [1, rows, 1, ...] (reshaped to the former afterwards).
    const Dims one_head{1, 1, b.rows, b.head_dim}, rows_first{1, b.rows, 1, b.head_dim};
    const bool row_layout = b.split_row_layout;
    v = ed.reshape(v, {1, b.rows, b.head_dim}, row_layout ? rows_first : one_head,
                   (row_layout ? b.split_out : b.heads_out) + t + "/Reshape");
    if (!b.split_region.empty()) {
      std::map<std::string, std::string> map{{b.split_out, v}};
      one_head_reshapes(ed, b.split_region, 2, map);
      clone_chain(ed, b.split_region, map, t);
      v = map.at(b.split_end);
    }
    if (row_layout) v = ed.reshape(v, rows_first, one_head, b.heads_out + t + "/Reshape");
    std::map<std::string, std::string> map{{b.heads_out, v}};
    one_head_reshapes(ed, b.region, 1, map);
    clone_chain(ed, b.region, map, t);
    out.push_back(map.at(b.end));
  }
  weights.follow_activation(shared ? b.shared_out : b.proj_out, projected, shared ? b.heads * b.head_dim : b.weight_columns,
                            shared ? HeadColumns{0, b.head_dim} : b.columns());
  if (!biased.empty()) weights.follow_activation(b.biased_out, biased, b.weight_columns, b.columns());
  return out;
}

Dims apply_perm(const Dims& d, const Dims& perm) {
  Dims r;
  for (int64_t p : perm) r.push_back(d[p]);
  return r;
}

// The cache input cut per KV head; each piece is returned in the hf view permuted by
// `view_perm` (K^T for keys, the hf view for values).
std::vector<std::string> split_past(GraphEditor& ed, const PastCache& past, const Dims& input_perm, int64_t kv_heads,
                                    const Dims& view_perm) {
  nf::Graph g = ed.graph();
  Dims hf = apply_perm(static_dims(g, past.input, "KV cache input"), input_perm);
  if (hf.size() != 4 || hf[0] != 1 || hf[1] != kv_heads)
    throw nf::Error("mha2sha: graph " + g.name() + ": cache input '" + past.input + "' does not hold " +
                    std::to_string(kv_heads) + " KV heads");
  const int64_t axis = input_perm[1];
  Dims piece_dims = static_dims(g, past.input, "KV cache input");
  piece_dims[axis] = 1;
  std::vector<std::string> pieces;
  for (int64_t h = 0; h < kv_heads; ++h) pieces.push_back(ed.fresh(past.input + tag(h)));
  if (kv_heads == 1) {
    pieces[0] = past.input;
  } else {
    ed.add("Split", {past.input, ed.int64_constant(std::vector<int64_t>(kv_heads, 1))}, pieces, past.input + "/Split")
        .set_attr("axis", axis);
  }
  Dims compose;  // view = Transpose(hf, view_perm) = Transpose(input, input_perm o view_perm)
  for (int64_t p : view_perm) compose.push_back(input_perm[p]);
  for (int64_t h = 0; h < kv_heads; ++h)
    pieces[h] = ed.permute(pieces[h], piece_dims, compose, past.input + tag(h) + "/Transpose");
  return pieces;
}

// The constant KV prefix [1, n_kv, P, head_dim] cut per KV head into constants of the graph:
// [1, 1, head_dim, P] for keys (K^T), [1, 1, P, head_dim] for values.
std::vector<std::string> split_prefix(GraphEditor& ed, const std::string& prefix, bool is_key) {
  nf::Graph g = ed.graph();
  const nf::Tensor t = g.initializer(prefix);
  const Dims d = t.dims();
  if (t.dtype() != NF_DTYPE_FLOAT32 || d.size() != 4 || d[0] != 1)
    throw nf::Error("mha2sha: graph " + g.name() + ": KV prefix '" + prefix + "' is not float32 [1, n_kv, P, head_dim]");
  const int64_t P = d[2], hd = d[3];
  const auto* src = static_cast<const float*>(t.data());
  std::vector<std::string> pieces;
  for (int64_t h = 0; h < d[1]; ++h) {
    nf::Tensor piece = nf::Tensor::create(NF_DTYPE_FLOAT32, is_key ? Dims{1, 1, hd, P} : Dims{1, 1, P, hd});
    auto* dst = static_cast<float*>(piece.mutable_data());
    const float* head = src + h * P * hd;
    for (int64_t r = 0; r < P; ++r)
      for (int64_t c = 0; c < hd; ++c) dst[is_key ? c * P + r : r * hd + c] = head[r * hd + c];
    pieces.push_back(ed.fresh(prefix + tag(h)));
    g.set_initializer(pieces.back(), piece);
  }
  return pieces;
}

std::string concat(GraphEditor& ed, const std::vector<std::string>& parts, int64_t axis, const std::string& out,
                   const std::string& label) {
  if (parts.size() == 1) {
    ed.add("Identity", parts, {out}, label + "/Identity");
  } else {
    ed.add("Concat", parts, {out}, label + "/Concat").set_attr("axis", axis);
  }
  return out;
}

// present.N.* from the new rows of every KV head, in the layout the old copy node wrote
// (or the HTP layout when the cache IO is permuted).
void rebuild_output(GraphEditor& ed, nf_node* copy, const std::vector<std::string>& rows, const Dims& piece,
                    const Dims& htp_perm, bool permute_io) {
  nf::Node n(copy);
  Dims perm = n.op_type() == "Transpose" ? n.attr_ints("perm") : kIdentity;
  if (permute_io && perm == kIdentity) perm = htp_perm;
  const std::string out = n.output(0);
  const std::string label = std::string(n.name());
  nf::Graph g = ed.graph();
  auto type = nf::graph::get_value_type(g, out);
  ed.graph().remove_node(n);
  int64_t axis = 0;
  while (perm[axis] != 1) ++axis;
  std::vector<std::string> parts;
  for (size_t h = 0; h < rows.size(); ++h)
    parts.push_back(ed.permute(rows[h], piece, perm, label + tag(static_cast<int64_t>(h))));
  concat(ed, parts, axis, out, label);
  Dims full = apply_perm(piece, perm);
  full[axis] = static_cast<int64_t>(rows.size());
  nf::graph::set_value_type(g, out, type ? type->dtype : NF_DTYPE_FLOAT32, full);
}

}  // namespace

void rewrite_core(const GraphView& view, const AttentionCore& c, GraphEditor& ed, HeadWeights& weights,
                  const ShaOptions& opts) {
  nf::Graph g = ed.graph();
  const int64_t heads = c.q.heads, kv_heads = c.k.heads, group = heads / kv_heads, hd = c.q.head_dim;
  std::vector<std::string> q = split_branch(ed, c.q, weights);
  std::vector<std::string> k_new = split_branch(ed, c.k, weights);
  std::vector<std::string> v_new = split_branch(ed, c.v, weights);
  const Dims kv_piece{1, 1, c.k.rows, hd};

  // Per KV head: K^T [1, 1, head_dim, T] and V [1, 1, T, head_dim], past columns first.
  std::vector<std::string> k_t(kv_heads), v_all(kv_heads);
  for (int64_t h = 0; h < kv_heads; ++h) {
    k_t[h] = ed.permute(k_new[h], kv_piece, kSwapLast, c.k.end + tag(h) + "/Transpose");
    v_all[h] = v_new[h];
  }
  if (c.k_past) {
    for (auto [past, htp_perm, is_key] : {std::tuple{&*c.k_past, &kHtpKeyPerm, true}, std::tuple{&*c.v_past, &kHtpValuePerm, false}}) {
      Dims input_perm = past->perm;
      if (opts.permute_kv_cache_io && input_perm == kIdentity) {
        // The input takes the HTP layout; its hf view is a transpose of it.
        input_perm = *htp_perm;
        auto type = nf::graph::get_value_type(g, past->input);
        nf::graph::set_value_type(g, past->input, type->dtype, apply_perm(past->input_dims, input_perm));
      }
      std::vector<std::string> pieces = split_past(ed, *past, input_perm, kv_heads, is_key ? kSwapLast : kIdentity);
      std::vector<std::string> prefix = past->prefix.empty() ? std::vector<std::string>{} : split_prefix(ed, past->prefix, is_key);
      if (!prefix.empty() && static_cast<int64_t>(prefix.size()) != kv_heads)
        throw nf::Error("mha2sha: graph " + g.name() + ": KV prefix '" + past->prefix + "' does not hold " +
                        std::to_string(kv_heads) + " KV heads");
      for (int64_t h = 0; h < kv_heads; ++h) {
        std::string& mine = is_key ? k_t[h] : v_all[h];
        std::vector<std::string> parts = past->past_first ? std::vector<std::string>{pieces[h], mine}
                                                          : std::vector<std::string>{mine, pieces[h]};
        if (!prefix.empty()) parts.insert(parts.begin() + 1, prefix[h]);  // past, prefix, new
        std::string label = past->input + tag(h);
        mine = concat(ed, parts, is_key ? 3 : 2, ed.fresh(label + ".all"), label);
      }
    }
    for (nf_node* copy : c.k_outputs) rebuild_output(ed, copy, k_new, kv_piece, kHtpKeyPerm, opts.permute_kv_cache_io);
    for (nf_node* copy : c.v_outputs) rebuild_output(ed, copy, v_new, kv_piece, kHtpValuePerm, opts.permute_kv_cache_io);
  }

  // Per query head: scores against its KV head, the mask/scale/softmax chain, values.
  nf::Node score(c.score), value(c.value);
  std::vector<std::string> per_head;
  for (int64_t h = 0; h < heads; ++h) {
    const std::string t = tag(h);
    std::string s = ed.fresh(score.output(0) + t);
    ed.add("MatMul", {q[h], k_t[h / group]}, {s}, std::string(score.name()) + t);
    std::map<std::string, std::string> map{{score.output(0), apply_scales(view, ed, c.key_scales, s, t)}};
    for (const auto& [operand, axis] : c.per_head_operands) {  // head h's slice of the head axis
      map[operand] = ed.fresh(operand + t);
      ed.add("Slice", {operand, ed.int64_constant({h}), ed.int64_constant({h + 1}), ed.int64_constant({axis})},
             {map[operand]}, operand + t);
    }
    clone_chain(ed, c.score_chain, map, t);
    std::string o = ed.fresh(value.output(0) + t);
    ed.add("MatMul", {map.at(nf::Node(c.score_chain.back()).output(0)), v_all[h / group]}, {o}, std::string(value.name()) + t);
    per_head.push_back(apply_scales(view, ed, c.value_scales, o, t));
  }

  // Merge: [1, rows, heads*head_dim] for the output projection when the block ends in
  // Transpose(0, 2, 1, 3) + Reshape; else [1, heads, rows, head_dim] in place of the
  // value MatMul.
  const int64_t rows = c.q.rows;
  const auto& users = view.consumers(value.output(0));
  if (users.size() == 1 && users[0].op_type() == "Transpose" && users[0].attr_ints("perm") == Dims{0, 2, 1, 3} &&
      view.consumers(users[0].output(0)).size() == 1 && view.consumers(users[0].output(0))[0].op_type() == "Reshape" &&
      static_dims(g, view.consumers(users[0].output(0))[0].output(0), "attention output") == Dims{1, rows, heads * hd}) {
    nf::Node reshape = view.consumers(users[0].output(0))[0];
    std::string out = reshape.output(0), label = std::string(reshape.name());
    std::vector<std::string> parts;
    for (int64_t h = 0; h < heads; ++h) parts.push_back(ed.reshape(per_head[h], {1, 1, rows, hd}, {1, rows, hd}, label + tag(h)));
    g.remove_node(reshape);
    concat(ed, parts, 2, out, label);
  } else {
    std::string out = value.output(0), label = std::string(value.name());
    g.remove_node(value);
    concat(ed, per_head, 1, out, label);
  }
}

}  // namespace mha2sha
