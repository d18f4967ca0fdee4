// torch's SDPA export scales both operands of attention's score product by Sqrt(scale):
// MatMul(Mul(q, s), Mul(Transpose(K), s)), K being the whole (repeated) key cache. A scale of
// one element on B moves to A: MatMul(Mul(A, s), B) is the same product, the few query rows
// are scaled instead of the cache, and the cache is read in place again (fuse_transposed_matmuls
// folds the Transpose, share_repeated_kv the repeat) instead of being repeated, transposed and
// scaled at every step.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "npuforge/engine/executor.h"

namespace nf::engine {
namespace {

// Ops whose output has one element when every input does.
const std::set<std::string> kElementwise = {"Cast", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log",
                                            "Add", "Sub", "Mul", "Div", "Pow", "Identity"};

// Whether Slice(starts, ends) of a shape vector takes one entry: [-1:] or [i:i+1].
bool one_entry(const k::Tensor& starts, const k::Tensor& ends) {
  if (starts.empty_handle() || ends.empty_handle() || starts.numel() != 1 || ends.numel() != 1) return false;
  const int64_t s = starts.to_int64s()[0], e = ends.to_int64s()[0];
  return (s == -1 && e > (int64_t{1} << 62)) || e == s + 1;
}

}  // namespace

void GraphPlan::move_scalar_scales(ModelSet ms, Graph g) {
  const SlotLinks links = slot_links();
  const auto& producer = links.producer;
  // One element: a folded constant, a value the graph types so, or one computed from such
  // values alone: SDPA's default scale 1/sqrt(E) in a dynamic graph comes from one entry of
  // Shape(query) through Cast, Sqrt and Div (a few nodes: the walk stops 16 producers up, so a
  // hostile chain cannot run the stack out).
  std::map<int, bool> known;
  std::function<bool(int, int)> one_element = [&](int s, int depth) -> bool {
    if (s < 0 || depth > 16) return false;
    if (!constants_[s].empty_handle()) return constants_[s].numel() == 1;
    if (auto it = known.find(s); it != known.end()) return it->second;
    bool one = false;
    ValueType t;
    if (g.value_type(slot_names_[s], &t)) {
      one = std::all_of(t.dims.begin(), t.dims.end(), [](int64_t d) { return d == 1; });
    } else if (auto p = producer.find(s); p != producer.end()) {
      const NodeDef& d = nodes_[p->second];
      if (kElementwise.count(d.op)) {
        one = std::all_of(d.in.begin(), d.in.end(), [&](int i) { return one_element(i, depth + 1); });
      } else if (d.op == "Slice" && d.in.size() == 3 && producer.count(d.in[0]) &&
                 nodes_[producer.at(d.in[0])].op == "Shape") {
        one = one_entry(constants_[d.in[1]], constants_[d.in[2]]);
      }
    }
    return known[s] = one;
  };
  // A value rounded onto an activation grid must keep its meaning.
  auto encoded = [&](int s) { return opts_.use_encodings && ms.encoding(slot_names_[s]) != nullptr; };

  std::map<size_t, size_t> moved_before;  // scale node -> the MatMul it now precedes
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeDef& n = nodes_[i];
    if (n.op != "MatMul" || n.linear || n.in.size() != 2 || n.in[0] < 0 || n.in[1] < 0 || links.uses(n.in[1]) != 1) continue;
    auto p = producer.find(n.in[1]);
    if (p == producer.end() || moved_before.count(p->second)) continue;
    NodeDef& m = nodes_[p->second];
    if ((m.op != "Mul" && m.op != "Div") || m.in.size() != 2 || m.out.size() != 1) continue;
    int scaled = -1, scale = -1;
    for (int j : {1, 0}) {  // Div(B, s) only: s / B is not a scale
      if (m.in[1 - j] < 0 || !one_element(m.in[j], 0) || (m.op == "Div" && j == 0)) continue;
      scale = m.in[j];
      scaled = m.in[1 - j];
      break;
    }
    if (scale < 0 || encoded(m.out[0]) || encoded(n.in[0]) || encoded(scaled)) continue;
    m.in = m.op == "Div" || scale == m.in[1] ? std::vector<int>{n.in[0], scale} : std::vector<int>{scale, n.in[0]};
    n.in = {m.out[0], scaled};
    moved_before[p->second] = i;
  }
  if (moved_before.empty()) return;
  std::map<size_t, std::vector<size_t>> before;
  for (auto [m, n] : moved_before) before[n].push_back(m);
  std::vector<NodeDef> order;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (moved_before.count(i)) continue;
    for (size_t m : before[i]) order.push_back(std::move(nodes_[m]));
    order.push_back(std::move(nodes_[i]));
  }
  nodes_ = std::move(order);
}

}  // namespace nf::engine
