#include "pipeline/weight_transposes.h"

#include <cstring>
#include <map>
#include <set>

namespace nf::host {
namespace {

void count_reads(const ir::Graph& g, std::map<std::string, int>& reads) {
  for (const auto& n : g.nodes) {
    for (const auto& in : n->inputs) ++reads[in];
    for (const auto& [key, a] : n->attrs)
      if (a.g) count_reads(*a.g, reads);
  }
  for (const auto& out : g.outputs) ++reads[out];
}

// The Transposes fold_weight_transposes folds.
std::vector<const ir::Node*> foldable(const ir::Graph& g) {
  std::map<std::string, int> reads;
  count_reads(g, reads);
  const std::set<std::string> inputs(g.inputs.begin(), g.inputs.end()), outputs(g.outputs.begin(), g.outputs.end());
  std::vector<const ir::Node*> r;
  for (const auto& n : g.nodes) {
    if (n->op_type != "Transpose" || !n->domain.empty() || n->inputs.size() != 1 || n->outputs.size() != 1) continue;
    const ir::Tensor* w = g.initializer(n->inputs[0]);
    if (!w || w->dims.size() != 2 || !w->data()) continue;
    if (w->dtype != NF_DTYPE_FLOAT32 && w->dtype != NF_DTYPE_FLOAT16 && w->dtype != NF_DTYPE_BFLOAT16 && w->dtype != NF_DTYPE_FLOAT64)
      continue;
    if (auto it = n->attrs.find("perm"); it != n->attrs.end() && it->second.ints != std::vector<int64_t>{1, 0}) continue;
    // Old exports list weights as graph inputs too; a graph output keeps its producer.
    if (reads[n->inputs[0]] != 1 || inputs.count(n->inputs[0]) || reads[n->outputs[0]] == 0 || outputs.count(n->outputs[0]))
      continue;
    r.push_back(n.get());
  }
  return r;
}

}  // namespace

ir::Tensor transposed_2d(const ir::Tensor& w) {
  const int64_t rows = w.dims[0], cols = w.dims[1];
  ir::Tensor t = ir::Tensor::zeros(w.dtype, {cols, rows});
  const size_t es = ir::dtype_size(w.dtype);
  const auto* src = static_cast<const unsigned char*>(w.data());
  auto* dst = static_cast<unsigned char*>(t.mutable_data());
  constexpr int64_t kTile = 64;  // a tile of rows at a time: the source is read once, in order
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + (c * rows + r) * es, src + (r * cols + c) * es, es);
    if (w.buffer) w.buffer->drop_pages(w.offset + static_cast<size_t>(r0 * cols) * es, static_cast<size_t>((r1 - r0) * cols) * es);
  }
  return t;
}

size_t foldable_weight_transposes(const ir::Graph& g) { return foldable(g).size(); }

FoldedTransposes fold_weight_transposes(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep) {
  FoldedTransposes result;
  std::set<const ir::Node*> gone;
  for (const ir::Node* n : foldable(g)) {
    auto ref = ir::make_tensor_ref(transposed_2d(*g.initializer(n->inputs[0])));
    g.initializers.erase(n->inputs[0]);
    g.types.erase(n->inputs[0]);
    g.initializers[n->outputs[0]] = ref;
    ++result.weights;
    result.bytes += ref->tensor.nbytes();
    if (keep) keep(*ref);
    gone.insert(n);
  }
  std::erase_if(g.nodes, [&](const std::unique_ptr<ir::Node>& n) { return gone.count(n.get()) != 0; });
  return result;
}

}  // namespace nf::host
