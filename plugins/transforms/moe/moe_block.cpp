#include "moe_block.h"

#include <npuforge/graph/evaluate_node.h>
#include <npuforge/graph/operators.h>
#include <npuforge/graph/kernel_tensors.h>
#include <npuforge/graph/kv_layers.h>
#include <npuforge/graph/value_types.h>
#include <npuforge/kernels/elementwise.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace moe {
namespace {

using nf::graph::GraphView;

std::string name_of(const nf::Node& n) { return std::string(n.name()); }

// Back from `v` through Cast / Identity.
std::string skip_casts_back(const GraphView& view, std::string v) {
  for (auto p = view.producer(v); p && (p->op_type() == "Cast" || p->op_type() == "Identity"); p = view.producer(v)) v = p->input(0);
  return v;
}

// The nodes computing `out` from `x` (neither included).
std::vector<std::string> expert_nodes(const GraphView& view, const std::string& out, const std::string& x) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::vector<std::string> todo{out};
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    if (v == x || !seen.insert(v).second) continue;
    auto p = view.producer(v);
    if (!p) continue;
    names.push_back(name_of(*p));
    for (const std::string& in : p->inputs())
      if (!in.empty() && !view.is_initializer(in)) todo.push_back(in);
  }
  return names;
}

// Evaluates routing values on made-up TopK outputs with the reference kernels. Shapes the
// routing borrows from the tokens are read from value types, unknown dims taken as 1 (the
// probe is one token).
class RoutingProbe {
 public:
  RoutingProbe(const GraphView& view, std::map<std::string, nf::kernels::Tensor> given)
      : view_(view), known_(std::move(given)) {}

  const nf::kernels::Tensor& eval(const std::string& v) {
    if (auto it = known_.find(v); it != known_.end()) return it->second;
    if (view_.is_initializer(v)) return known_[v] = nf::graph::to_kernel(view_.graph().initializer(v));
    auto p = view_.producer(v);
    if (!p) throw nf::Error("'" + v + "' is a graph input");
    if (p->op_type() == "Shape") {
      auto t = nf::graph::get_value_type(view_.graph(), p->input(0));
      if (!t || !t->dims) throw nf::Error("the rank of '" + p->input(0) + "' is not known");
      std::vector<int64_t> dims = *t->dims;
      for (int64_t& d : dims) d = d < 0 ? 1 : d;
      std::vector<int64_t> part = nf::graph::shape_node_dims(nf::graph::GraphNode(*p), dims);
      return known_[v] = nf::kernels::Tensor::from(NF_DTYPE_INT64, {static_cast<int64_t>(part.size())}, part);
    }
    if (!nf::graph::can_evaluate(*p)) throw nf::Error("node '" + name_of(*p) + "' (" + std::string(p->op_type()) + ") cannot be evaluated");
    std::vector<const nf::kernels::Tensor*> ins;
    for (const std::string& in : p->inputs()) ins.push_back(in.empty() ? nullptr : &eval(in));
    std::vector<nf::kernels::Tensor> outs = nf::graph::evaluate_node(*p, ins);
    for (size_t i = 0; i < outs.size() && i < p->output_count(); ++i) known_[p->output(i)] = outs[i];
    return known_.at(v);
  }

 private:
  const GraphView& view_;
  std::map<std::string, nf::kernels::Tensor> known_;
};

// Dims of a TopK output for the probe: its own where static (arcl's AR rows), 1 where not
// known (the probe is then one token). The rank comes from the first of `values` (TopK
// output, probabilities, router logits, router input) whose type the graph records.
std::vector<int64_t> probe_dims(const GraphView& view, const std::vector<std::string>& values, int64_t k) {
  for (const std::string& v : values) {
    auto t = nf::graph::get_value_type(view.graph(), v);
    if (!t || !t->dims || t->dims->empty()) continue;
    std::vector<int64_t> dims = *t->dims;
    for (int64_t& d : dims) d = d < 0 ? 1 : d;
    dims.back() = k;
    return dims;
  }
  throw nf::Error("the rank of the routing values is not recorded in the graph");
}

// `row` repeated `rows` times.
template <class T>
std::vector<T> repeat_rows(const std::vector<T>& row, int64_t rows) {
  std::vector<T> r;
  for (int64_t i = 0; i < rows; ++i) r.insert(r.end(), row.begin(), row.end());
  return r;
}

// Which expert each term's weight belongs to, and whether the model renormalises the top-k
// probabilities: the routing is run on made-up TopK outputs (expert e first, then the next
// ones) and each term's weight must equal the probability its expert got, or 0 when the
// expert was not chosen. This holds for every way of writing Mixtral's routing (a Slice
// of a dense matrix, a one-hot product summed, a Gather of a scattered matrix, ...).
void identify_experts(const GraphView& view, MoeBlock& b, const std::string& indices, std::vector<Expert>& terms) {
  const std::string where = "moe: TopK '" + b.topk + "': ";
  const int64_t E = b.experts, K = b.k;
  std::vector<float> top(static_cast<size_t>(K));
  float sum = 0;
  for (int64_t i = 0; i < K; ++i) sum += top[static_cast<size_t>(i)] = 0.4f / static_cast<float>(1 << i);
  std::vector<std::vector<float>> got(terms.size(), std::vector<float>(static_cast<size_t>(E)));
  // Every row (token) of the probe routes the same way.
  const std::vector<int64_t> dims = probe_dims(view, {b.top_values, b.probs, b.logits, b.x}, K);
  std::vector<int64_t> pdims = dims;
  pdims.back() = E;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i];
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> idx(static_cast<size_t>(K));
    std::vector<float> probs(static_cast<size_t>(E), top.back() / static_cast<float>(4 * E));
    for (int64_t i = 0; i < K; ++i) {
      idx[static_cast<size_t>(i)] = (e + i) % E;
      probs[static_cast<size_t>((e + i) % E)] = top[static_cast<size_t>(i)];
    }
    RoutingProbe probe(view, {{b.top_values, nf::kernels::Tensor::from(NF_DTYPE_FLOAT32, dims, repeat_rows(top, rows))},
                              {indices, nf::kernels::Tensor::from(NF_DTYPE_INT64, dims, repeat_rows(idx, rows))},
                              {b.probs, nf::kernels::Tensor::from(NF_DTYPE_FLOAT32, pdims, repeat_rows(probs, rows))}});
    for (size_t j = 0; j < terms.size(); ++j) {
      nf::kernels::Tensor w;
      try {
        w = nf::kernels::cast(probe.eval(terms[j].weight), NF_DTYPE_FLOAT32);
      } catch (const std::exception& ex) {
        throw nf::Error(where + "cannot evaluate the routing weight '" + terms[j].weight + "': " + ex.what());
      }
      if (w.numel() != rows)
        throw nf::Error(where + "the routing weight '" + terms[j].weight + "' is not one number per token");
      got[j][static_cast<size_t>(e)] = w.data<float>()[0];
    }
  }
  // Term j belongs to expert x when its weight is the slot probability whenever x is chosen.
  auto close = [](float a, float c) { return std::abs(a - c) <= 1e-5f * std::max(1.f, std::abs(c)); };
  for (int renorm = 0; renorm < 2; ++renorm) {
    const float scale = renorm ? 1.f / sum : 1.f;
    std::set<int64_t> taken;
    bool all = true;
    for (size_t j = 0; j < terms.size() && all; ++j) {
      int64_t owner = -1;
      for (int64_t x = 0; x < E && owner < 0; ++x) {
        bool fits = true;
        for (int64_t e = 0; e < E && fits; ++e) {
          const int64_t slot = (x - e + E) % E;
          fits = close(got[j][static_cast<size_t>(e)], slot < K ? top[static_cast<size_t>(slot)] * scale : 0.f);
        }
        if (fits) owner = x;
      }
      all = owner >= 0 && taken.insert(owner).second;
      terms[j].index = owner;
    }
    if (all) {
      b.renormalize = renorm == 1;
      return;
    }
  }
  throw nf::Error(where + "the weights multiplied onto the expert outputs are not each one expert's top-" +
                  std::to_string(K) + " probability (plain or renormalised)");
}

MoeBlock match(const GraphView& view, const nf::Node& topk, int64_t ordinal, const std::map<std::string, int64_t>& kv_layer) {
  MoeBlock b;
  b.topk = name_of(topk);
  const std::string where = "moe: TopK '" + b.topk + "': ";
  b.probs = topk.input(0);
  auto sm = view.producer(skip_casts_back(view, b.probs));
  if (!sm || sm->op_type() != "Softmax") throw nf::Error(where + "its input is not a router Softmax");
  b.softmax = name_of(*sm);
  b.logits = sm->input(0);
  auto router = view.producer(skip_casts_back(view, b.logits));
  if (!router || router->op_type() != "MatMul" || !view.is_initializer(router->input(1)))
    throw nf::Error(where + "the Softmax input is not a router MatMul with a constant weight");
  b.x = router->input(0);
  auto wd = view.graph().initializer(router->input(1)).dims();
  if (wd.size() != 2) throw nf::Error(where + "the router weight is not 2-D");
  b.experts = wd[1];
  auto kv = view.constant_ints(topk.input(1));
  if (kv.size() != 1) throw nf::Error(where + "K is not a constant");
  b.k = kv[0];
  if (b.k < 1 || b.k > b.experts) throw nf::Error(where + "K " + std::to_string(b.k) + " is not in [1, experts]");
  if (topk.attr_int("largest", 1) != 1 || (topk.attr_int("axis", -1) != -1 && topk.attr_int("axis", -1) < 0))
    throw nf::Error(where + "not a largest-K selection over the last axis");
  b.top_values = topk.output(0);
  auto layer = kv_layer.find(b.x);
  b.layer = layer != kv_layer.end() ? layer->second : ordinal;
  // The routing: every value computed from the TopK outputs (and the probabilities) with
  // constants and shapes only. It ends in the Muls that weight the expert outputs.
  std::set<std::string> routing{topk.output(0), topk.output(1)};
  std::vector<Expert> terms;
  bool after = false;
  for (const nf::Node& n : view.nodes()) {
    if (n.get() == topk.get()) after = true;
    if (!after || n.get() == topk.get()) continue;
    bool reads_routing = false;
    for (const std::string& in : n.inputs()) reads_routing |= routing.count(in) != 0;
    if (!reads_routing) continue;
    std::vector<std::string> data;
    for (const std::string& in : n.inputs())
      if (!in.empty() && !routing.count(in) && in != b.probs && !view.computed_without_inputs(in)) data.push_back(in);
    if (data.empty()) {
      for (const std::string& out : n.outputs()) routing.insert(out);
    } else if (n.op_type() == "Mul" && data.size() == 1 && n.input_count() == 2) {
      Expert e;
      e.output = data[0];
      e.weight = n.input(0) == data[0] ? n.input(1) : n.input(0);
      e.term = n.output(0);
      terms.push_back(e);
    } else {
      throw nf::Error(where + "routing values meet '" + data[0] + "' in " + std::string(n.op_type()) + " '" + name_of(n) +
                      "'; expected each expert's output multiplied by its routing weight");
    }
  }
  if (static_cast<int64_t>(terms.size()) != b.experts)
    throw nf::Error(where + "found " + std::to_string(terms.size()) + " expert outputs weighted by the routing for " +
                    std::to_string(b.experts) + " router outputs");
  identify_experts(view, b, topk.output(1), terms);
  for (Expert& e : terms) e.nodes = expert_nodes(view, e.output, b.x);
  std::sort(terms.begin(), terms.end(), [](const Expert& a, const Expert& c) { return a.index < c.index; });
  b.expert_terms = std::move(terms);
  return b;
}

}  // namespace

std::vector<MoeBlock> find_moe_blocks(const GraphView& view) {
  std::vector<MoeBlock> blocks;
  const std::map<std::string, int64_t> kv_layer = nf::graph::kv_layer_of_values(view);
  for (const nf::Node& n : view.nodes())
    if (n.op_type() == "TopK") blocks.push_back(match(view, n, static_cast<int64_t>(blocks.size()), kv_layer));
  return blocks;
}

}  // namespace moe
