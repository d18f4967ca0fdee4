// Grouped-query attention without the repeated cache. Exporters write GQA's repeat_kv as
// Reshape(Expand(Unsqueeze(kv, axis 2), [b, kv_heads, rep, t, d]), [b, kv_heads * rep, t, d])
// feeding attention's two MatMuls: each step copies the whole KV cache `rep` times. Here a
// MatMul reading such a value takes the cache itself and multiplies each group of `rep`
// query heads by its one KV head: A [b, kv_heads * rep, s, k] is A [b, kv_heads, rep * s, k]
// in memory, so the group's rows are one GEMM against the cache. A Shape of the repeated
// value (exporters read the key length from it) is computed from the shapes alone.
//
// The pattern is found by meaning (the three ops and the axis, the intermediate values read
// by nothing else); the shapes are dynamic, so the kernel checks at run time that the
// removed nodes would have repeated the cache over heads, and otherwise computes them.
#include <npuforge/kernels/exact.h>
#include <npuforge/kernels/matmul.h>
#include <npuforge/kernels/movement.h>

#include <map>
#include <set>

#include "npuforge/engine/executor.h"

namespace nf::engine {
namespace {

bool unsqueezes_axis_2(const NodeDef& u, const std::vector<k::Tensor>& constants) {
  std::vector<int64_t> axes = u.attr_ints("axes");
  if (u.in.size() > 1) {
    if (u.in[1] < 0 || constants[u.in[1]].empty_handle()) return false;
    axes = constants[u.in[1]].to_int64s();
  }
  return axes.size() == 1 && (axes[0] == 2 || axes[0] == -3);  // rank 4 -> 5: -3 is axis 2
}

// Dims of the removed Unsqueeze/Expand/Reshape's result, and whether it is the cache
// repeated over heads: [b, kv_heads * rep, t, d] from kv [b, kv_heads, t, d].
struct Repeat {
  k::Dims unsqueezed, expanded, result;
  bool over_heads = false;
};

// in = {kv, expand_shape, reshape_shape}, from `first` on.
Repeat repeat_of(const NodeDef& n, const std::vector<const k::Tensor*>& in, size_t first) {
  for (size_t i = first; i < first + 3; ++i)
    if (i >= in.size() || !in[i]) throw k::KernelError("input " + std::to_string(i) + " is required");
  const k::Tensor& kv = *in[first];
  if (kv.rank() != 4) throw k::KernelError("Unsqueeze: axis 2 of a rank-" + std::to_string(kv.rank()) + " value");
  Repeat r;
  r.unsqueezed = kv.dims();
  r.unsqueezed.insert(r.unsqueezed.begin() + 2, 1);
  r.expanded = k::broadcast_shape(r.unsqueezed, in[first + 1]->to_int64s(), "Expand");
  r.result = graph::reshape_node_dims(n, r.expanded, in[first + 2]->to_int64s());
  const int64_t b = kv.dim(0), groups = kv.dim(1), rep = r.expanded[2];
  r.over_heads = r.expanded == k::Dims{b, groups, rep, kv.dim(2), kv.dim(3)} &&
                 r.result == k::Dims{b, groups * rep, kv.dim(2), kv.dim(3)};
  return r;
}

// MatMul: in = {A, kv, expand_shape, reshape_shape}.
void repeated_kv_matmul(const NodeDef& n, const std::vector<const k::Tensor*>& in, std::vector<k::Tensor>& out,
                        const RunCtx&) {
  const Repeat r = repeat_of(n, in, 1);
  const k::Tensor &a = *in[0], &kv = *in[1];
  auto product = [&](const k::Tensor& x, const k::Tensor& b) {
    return n.exact.b_scale > 0 && x.dtype() == NF_DTYPE_FLOAT32 ? k::matmul_fixed(x, b, n.trans_b, n.exact.b_scale)
                                                                 : k::matmul(x, b, n.trans_b);
  };
  const int64_t b = kv.dim(0), groups = kv.dim(1), heads = r.result[1];
  if (!r.over_heads || a.rank() != 4 || a.dim(0) != b || a.dim(1) != heads) {
    // Not a repeat over heads, or A broadcasts against it: the nodes as written.
    out[0] = product(a, k::expand(kv.reshaped(r.unsqueezed), r.expanded).reshaped(r.result));
    return;
  }
  const int64_t s = a.dim(2);
  k::Tensor y = product(a.reshaped({b, groups, heads / groups * s, a.dim(3)}), kv);
  out[0] = y.reshaped({b, heads, s, y.dim(3)});
}

// Shape (with its start/end): in = {kv, expand_shape, reshape_shape}.
void repeated_kv_shape(const NodeDef& n, const std::vector<const k::Tensor*>& in, std::vector<k::Tensor>& out,
                       const RunCtx&) {
  const std::vector<int64_t> dims = graph::shape_node_dims(n, repeat_of(n, in, 0).result);
  out[0] = k::Tensor::from(NF_DTYPE_INT64, {static_cast<int64_t>(dims.size())}, dims);
}

}  // namespace

// After fuse_transposed_matmuls (K arrives as trans_b) and plan_integer_mode (the grids of the
// removed values are known, and none of them is rounded).
void GraphPlan::share_repeated_kv() {
  SlotLinks links = slot_links();
  const auto& producer = links.producer;
  auto& readers = links.readers;
  // The `op` node making `value`, when the value is read only by `reader` (and, if
  // `shape_readers`, by Shape nodes), is not a graph output and is not rounded.
  auto made_for = [&](int value, const char* op, size_t reader, bool shape_readers) -> NodeDef* {
    auto p = producer.find(value);
    if (p == producer.end() || links.output_reads.count(value) || act_grid_.count(value)) return nullptr;
    for (size_t r : readers[value])
      if (r != reader && !(shape_readers && nodes_[r].op == "Shape" && nodes_[r].in.size() == 1)) return nullptr;
    NodeDef& d = nodes_[p->second];
    return d.op == op && d.out.size() == 1 ? &d : nullptr;
  };
  std::set<const NodeDef*> dropped;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NodeDef& n = nodes_[i];
    if (n.op != "MatMul" || n.linear || n.in.size() != 2 || n.in[0] < 0 || n.in[1] < 0 || n.in[0] == n.in[1]) continue;
    NodeDef* reshape = made_for(n.in[1], "Reshape", i, true);
    if (!reshape || reshape->in.size() != 2 || reshape->in[1] < 0) continue;
    const size_t reshape_at = static_cast<size_t>(reshape - nodes_.data());
    NodeDef* expand = made_for(reshape->in[0], "Expand", reshape_at, false);
    if (!expand || expand->in.size() != 2 || expand->in[1] < 0) continue;
    NodeDef* unsqueeze = made_for(expand->in[0], "Unsqueeze", static_cast<size_t>(expand - nodes_.data()), false);
    if (!unsqueeze || unsqueeze->in.empty() || unsqueeze->in[0] < 0 || !unsqueezes_axis_2(*unsqueeze, constants_)) continue;
    const std::vector<int> repeat{unsqueeze->in[0], expand->in[1], reshape->in[1]};
    Attr allowzero;
    allowzero.type = NF_ATTR_INT;
    allowzero.i = reshape->attr_int("allowzero", 0);
    for (size_t r : readers[n.in[1]]) {
      NodeDef& reader = nodes_[r];
      const bool matmul = r == i;  // else a Shape
      reader.in = matmul ? std::vector<int>{reader.in[0], repeat[0], repeat[1], repeat[2]} : repeat;
      reader.kernel = matmul ? repeated_kv_matmul : repeated_kv_shape;
      reader.attrs["allowzero"] = allowzero;
    }
    dropped.insert({reshape, expand, unsqueeze});
  }
  if (dropped.empty()) return;
  std::vector<NodeDef> kept;
  for (NodeDef& n : nodes_)
    if (!dropped.count(&n)) kept.push_back(std::move(n));
  nodes_ = std::move(kept);
}

}  // namespace nf::engine
