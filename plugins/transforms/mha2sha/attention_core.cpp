#include "attention_core.h"

#include <algorithm>
#include <set>

namespace mha2sha {
namespace {

using nf::graph::GraphView;

struct Reject : nf::Error {
  using nf::Error::Error;
};

const std::set<std::string> kHeadwiseOps = {"Add", "Sub", "Mul", "Div", "Neg", "Cast", "Identity", "Slice", "Concat",
                                            "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Relu", "Abs", "Pow"};
const std::set<std::string> kScoreOps = {"Add", "Sub", "Mul", "Div", "Cast", "Identity", "Softmax", "Where"};

std::string node_name(const nf::Node& n) { return std::string(n.name()); }

bool is_perm(const nf::Node& n, const Dims& perm) {
  return n.op_type() == "Transpose" && n.attr_ints("perm") == perm;
}

// Constant int64 values of an initializer input (Slice axes); empty when not constant.
std::vector<int64_t> const_ints(const GraphView& view, const std::string& value) {
  if (value.empty() || !view.is_initializer(value)) return {};
  nf::Tensor t = view.graph().initializer(value);
  std::vector<int64_t> r;
  if (t.dtype() == NF_DTYPE_INT64)
    r.assign(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
  else if (t.dtype() == NF_DTYPE_INT32)
    for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.data_as<int32_t>()[i]);
  return r;
}

// An operand shared by every head's copy must not itself carry heads: in the
// [1, heads, rows, head_dim] alignment its head axis (if it reaches that far) is 1.
void check_shared_operand(const GraphView& view, const std::string& v, const std::string& where) {
  if (v.empty() || view.is_initializer(v)) {
    if (v.empty()) return;
    Dims d = view.graph().initializer(v).dims();
    if (d.size() >= 3 && d[d.size() - 3] != 1) throw Reject(where + ": operand '" + v + "' varies per head");
    return;
  }
  Dims d = static_dims(view.graph(), v, "operand");
  if (d.size() >= 3 && d[d.size() - 3] != 1) throw Reject(where + ": operand '" + v + "' varies per head");
}

// Checks that a head-wise node works on one head as on all: no axis of its own on the
// batch or head axes.
void check_headwise(const GraphView& view, const nf::Node& n) {
  const std::string op(n.op_type());
  if (!kHeadwiseOps.count(op)) throw Reject("node '" + node_name(n) + "' (" + op + ") between a projection and the attention");
  if (op == "Concat") {
    if (normalize_axis(n.attr_int("axis", 0), 4) < 2) throw Reject("Concat '" + node_name(n) + "' joins along the heads");
  } else if (op == "Slice") {
    std::vector<int64_t> axes = const_ints(view, n.input(3));
    if (n.input(3).empty()) axes = {0, 1, 2, 3};  // all axes: only fine if untouched, reject
    if (axes.empty()) throw Reject("Slice '" + node_name(n) + "' has non-constant axes");
    for (int64_t a : axes)
      if (normalize_axis(a, 4) < 2) throw Reject("Slice '" + node_name(n) + "' cuts the batch or head axis");
  }
}

bool carries_heads(const GraphView& view, const std::string& v, int64_t heads) {
  if (v.empty() || view.is_initializer(v)) return false;
  auto t = nf::graph::get_value_type(view.graph(), v);
  return t && t->dims && t->dims->size() == 4 && (*t->dims)[1] == heads;
}

// Walks back from `end` ([1, heads, rows, head_dim]) through head-wise nodes to the
// projection that packs the heads.
HeadBranch trace_branch(const GraphView& view, const std::string& end) {
  HeadBranch b;
  b.end = end;
  Dims end_dims = static_dims(view.graph(), end, "attention operand");
  if (end_dims.size() != 4 || end_dims[0] != 1) throw Reject("'" + end + "' is not [1, heads, rows, head_dim]");
  b.heads = end_dims[1];
  std::set<nf_node*> region;
  std::vector<std::string> todo{end};
  std::set<std::string> seen;
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    if (!seen.insert(v).second) continue;
    auto p = view.producer(v);
    if (!p) throw Reject("'" + v + "' carries heads but is not computed from a projection");
    if (is_perm(*p, {0, 2, 1, 3})) {
      auto r = view.producer(p->input(0));
      if (r && r->op_type() == "Reshape") {
        if (!b.heads_out.empty() && b.heads_out != v) throw Reject("two projections meet in '" + end + "'");
        Dims rd = static_dims(view.graph(), r->output(0), "head split");
        Dims pd = static_dims(view.graph(), r->input(0), "projection");
        if (rd.size() != 4 || rd[0] != 1 || rd[2] != b.heads || pd.size() != 3 || pd[2] != rd[2] * rd[3])
          throw Reject("Reshape '" + node_name(*r) + "' does not split [1, rows, heads*head_dim] into heads");
        b.heads_out = v;
        b.rows = rd[1];
        b.head_dim = rd[3];
        // The projection: MatMul(x, W) with an optional bias Add.
        auto m = view.producer(r->input(0));
        if (m && m->op_type() == "Add") {
          for (size_t i = 0; i < 2; ++i)
            if (view.is_initializer(m->input(i))) {
              b.bias = m->input(i);
              b.bias_first = i == 0;
              m = view.producer(m->input(1 - i));
              break;
            }
          if (b.bias.empty()) throw Reject("projection Add '" + node_name(*m) + "' has no constant bias");
        }
        if (!m || m->op_type() != "MatMul" || !view.is_initializer(m->input(1)) || view.is_initializer(m->input(0)))
          throw Reject("'" + r->input(0) + "' is not a MatMul with a constant weight");
        b.x = m->input(0);
        b.weight = m->input(1);
        b.proj_out = m->output(0);
        if (!b.bias.empty()) b.biased_out = r->input(0);
        Dims wd = view.graph().initializer(b.weight).dims();
        if (wd.size() != 2 || wd[1] != b.heads * b.head_dim)
          throw Reject("weight '" + b.weight + "' is not [in, heads*head_dim]");
        if (!b.bias.empty() && view.graph().initializer(b.bias).dims() != Dims{b.heads * b.head_dim})
          throw Reject("bias '" + b.bias + "' is not [heads*head_dim]");
        // The split's own outputs must feed only head-wise nodes (checked when cloning).
        continue;
      }
    }
    check_headwise(view, *p);
    region.insert(p->get());
    for (const std::string& in : p->inputs()) {
      if (carries_heads(view, in, b.heads))
        todo.push_back(in);
      else
        check_shared_operand(view, in, "node '" + node_name(*p) + "'");
    }
  }
  if (b.heads_out.empty()) throw Reject("no projection found for '" + end + "'");
  if (end_dims[3] != b.head_dim || end_dims[2] != b.rows) throw Reject("'" + end + "' changed shape after the head split");
  for (const nf::Node& n : view.nodes())
    if (region.count(n.get())) b.region.push_back(n.get());
  return b;
}

// From a value MatMul's / score MatMul's operand back through repeat_kv (Unsqueeze,
// Expand, Reshape) and the key transpose to the [1, n_kv, T, head_dim] tensor.
std::string through_repeat_kv(const GraphView& view, std::string v, bool expect_transpose) {
  bool transposed = false;
  for (int step = 0; step < 8; ++step) {
    auto p = view.producer(v);
    if (!p) break;
    std::string_view op = p->op_type();
    if (op == "Transpose" && expect_transpose && !transposed && is_perm(*p, {0, 1, 3, 2})) {
      transposed = true;
    } else if (op != "Unsqueeze" && op != "Expand" && op != "Reshape" && op != "Identity") {
      break;
    }
    v = p->input(0);
  }
  if (expect_transpose && !transposed) throw Reject("the key reaches the score MatMul without a Transpose(0, 1, 3, 2)");
  return v;
}

std::optional<PastCache> past_of(const GraphView& view, const nf::Node& concat, std::string* new_rows) {
  if (concat.op_type() != "Concat" || concat.input_count() != 2 || normalize_axis(concat.attr_int("axis", 0), 4) != 2)
    return std::nullopt;
  for (size_t i = 0; i < 2; ++i) {
    std::string past = concat.input(i);
    PastCache pc;
    pc.past_first = i == 0;
    pc.perm = {0, 1, 2, 3};
    if (!view.is_input(past)) {
      auto t = view.producer(past);
      if (!t || t->op_type() != "Transpose" || !view.is_input(t->input(0))) continue;
      pc.perm = t->attr_ints("perm");
      past = t->input(0);
    }
    pc.input = past;
    pc.input_dims = static_dims(view.graph(), past, "KV cache input");
    *new_rows = concat.input(1 - i);
    return pc;
  }
  return std::nullopt;
}

// The nodes besides `concat` that read the new K/V rows must only copy them to graph
// outputs (arcl's present.N.* rows).
std::vector<nf_node*> output_copies(const GraphView& view, const HeadBranch& b, const nf::Node& concat) {
  std::vector<nf_node*> r;
  for (const nf::Node& u : view.consumers(b.end)) {
    if (u.get() == concat.get()) continue;
    bool copy = (u.op_type() == "Identity" || u.op_type() == "Transpose") && view.is_output(u.output(0)) &&
                view.consumers(u.output(0)).empty();
    if (!copy) throw Reject("the new rows '" + b.end + "' also feed node '" + node_name(u) + "'");
    r.push_back(u.get());
  }
  return r;
}

// The operand of a score-chain node that carries the scores: the one shaped like the
// probabilities (the mask broadcasts over heads, scales are scalars).
std::string scores_operand(const GraphView& view, const nf::Node& n, const Dims& probs) {
  const size_t first = n.op_type() == "Where" ? 1 : 0;
  for (size_t i = first; i < n.input_count(); ++i) {
    const std::string in = n.input(i);
    if (in.empty() || view.is_initializer(in)) continue;
    auto t = nf::graph::get_value_type(view.graph(), in);
    if (t && t->dims && *t->dims == probs) return in;
  }
  return n.input(first);
}

AttentionCore match_core(const GraphView& view, const nf::Node& softmax) {
  AttentionCore c;
  c.softmax = softmax.get();
  c.label = node_name(softmax);
  int64_t axis = softmax.attr_int("axis", -1);
  Dims sd = static_dims(view.graph(), softmax.output(0), "attention probabilities");
  if (sd.size() != 4 || normalize_axis(axis, 4) != 3) throw Reject("not a [1, heads, rows, T] Softmax over T");
  // Back to the score MatMul.
  std::vector<nf_node*> before;
  std::string v = softmax.input(0);
  for (int step = 0;; ++step) {
    auto p = view.producer(v);
    if (!p || step > 8) throw Reject("no score MatMul before the Softmax");
    if (p->op_type() == "MatMul") {
      c.score = p->get();
      break;
    }
    if (!kScoreOps.count(std::string(p->op_type())) || p->op_type() == "Softmax")
      throw Reject("node '" + node_name(*p) + "' (" + std::string(p->op_type()) + ") between the scores and the Softmax");
    before.push_back(p->get());
    v = scores_operand(view, *p, sd);
  }
  nf::Node score(c.score);
  if (view.is_initializer(score.input(0)) || view.is_initializer(score.input(1))) throw Reject("the score MatMul has a constant operand");
  // Forward to the value MatMul.
  std::vector<nf_node*> after;
  v = softmax.output(0);
  for (int step = 0;; ++step) {
    const auto& users = view.consumers(v);
    if (users.size() != 1 || step > 4) throw Reject("the probabilities do not reach one value MatMul");
    const nf::Node& u = users[0];
    if (u.op_type() == "MatMul" && u.input(0) == v) {
      c.value = u.get();
      break;
    }
    if (u.op_type() != "Cast" && u.op_type() != "Identity") throw Reject("node '" + node_name(u) + "' after the Softmax");
    after.push_back(u.get());
    v = u.output(0);
  }
  std::reverse(before.begin(), before.end());
  c.score_chain = before;
  c.score_chain.push_back(c.softmax);
  c.score_chain.insert(c.score_chain.end(), after.begin(), after.end());
  // Every chain node reads the previous value and shared operands (mask, scale) only.
  std::string prev = score.output(0);
  for (nf_node* p : c.score_chain) {
    nf::Node n(p);
    const auto& users = view.consumers(prev);
    if (users.size() != 1) throw Reject("the scores '" + prev + "' have other readers");
    for (const std::string& in : n.inputs())
      if (in != prev) check_shared_operand(view, in, "node '" + node_name(n) + "'");
    prev = n.output(0);
  }

  c.q = trace_branch(view, score.input(0));
  nf::Node value(c.value);
  std::string k_full = through_repeat_kv(view, score.input(1), true);
  std::string v_full = through_repeat_kv(view, value.input(1), false);
  for (auto [full, branch, past, outs] : {std::tuple{k_full, &c.k, &c.k_past, &c.k_outputs},
                                          std::tuple{v_full, &c.v, &c.v_past, &c.v_outputs}}) {
    std::string new_rows = full;
    auto prod = view.producer(full);
    if (prod) *past = past_of(view, *prod, &new_rows);
    *branch = trace_branch(view, new_rows);
    if (*past) *outs = output_copies(view, *branch, *prod);
    else if (view.consumers(branch->end).size() != 1 || view.is_output(branch->end))
      throw Reject("the uncached rows '" + branch->end + "' have other readers");
  }
  if (c.k.heads != c.v.heads || c.k.head_dim != c.q.head_dim || c.v.head_dim != c.q.head_dim)
    throw Reject("Q, K and V heads do not line up");
  if (c.q.heads % c.k.heads != 0) throw Reject("query heads are not a multiple of the KV heads");
  if (c.k_past.has_value() != c.v_past.has_value()) throw Reject("only one of K and V has a cache");
  return c;
}

}  // namespace

CoreSearch find_attention_cores(const GraphView& view) {
  CoreSearch s;
  for (const nf::Node& n : view.nodes()) {
    if (n.op_type() != "Softmax") continue;
    try {
      s.cores.push_back(match_core(view, n));
    } catch (const nf::Error& e) {
      // Includes values not typed yet (the copies an earlier rewrite of this graph made).
      s.rejected.push_back(node_name(n) + ": " + e.what());
    }
  }
  return s;
}

const AttentionCore* core_of_node(const std::vector<AttentionCore>& cores, const std::string& name) {
  for (const AttentionCore& c : cores)
    for (nf_node* n : {c.softmax, c.score, c.value})
      if (nf::Node(n).name() == name) return &c;
  return nullptr;
}

}  // namespace mha2sha
