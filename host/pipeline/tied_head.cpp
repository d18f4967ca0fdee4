#include "pipeline/tied_head.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <cstring>

namespace nf::host {

ir::Node* lm_head_matmul(const ir::Graph& g) {
  auto is_matmul = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    return n && n->op_type == "MatMul" && n->domain.empty();
  };
  auto inputs_of = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    return n ? n->inputs : std::vector<std::string>{};
  };
  const std::string head = decoder::lm_head_output(inputs_of, is_matmul);
  return head.empty() ? nullptr : g.producer(head);
}

namespace {

// Whether b [H, V] equals the transpose of e [V, H] (same element type). A few scattered
// elements first, so an untied head with the same shape is told apart at once; then
// everything, in tiles that keep both reads within cache lines. Tables whose sampled
// elements are all zero are not trained weights (synth_model.py --zeros stands in for
// real, untied ones): they are left as they are.
bool is_transpose_of(const ir::Tensor& b, const ir::Tensor& e) {
  const int64_t H = b.dims[0], V = b.dims[1];
  const size_t es = ir::dtype_size(b.dtype);
  const auto* pb = static_cast<const unsigned char*>(b.data());
  const auto* pe = static_cast<const unsigned char*>(e.data());
  auto same = [&](int64_t h, int64_t v) { return std::memcmp(pb + (h * V + v) * es, pe + (v * H + h) * es, es) == 0; };
  bool nonzero = false;
  for (int64_t i = 0; i < 64; ++i) {
    const int64_t h = (i * 7919) % H, v = (i * 104729) % V;
    if (!same(h, v)) return false;
    for (size_t byte = 0; byte < es; ++byte) nonzero = nonzero || pe[(v * H + h) * es + byte] != 0;
  }
  if (!nonzero) return false;
  constexpr int64_t kTile = 64;
  for (int64_t h0 = 0; h0 < H; h0 += kTile)
    for (int64_t v0 = 0; v0 < V; v0 += kTile)
      for (int64_t h = h0; h < std::min(H, h0 + kTile); ++h)
        for (int64_t v = v0; v < std::min(V, v0 + kTile); ++v)
          if (!same(h, v)) return false;
  return true;
}

}  // namespace

std::string tie_lm_head(ir::Graph& g) {
  ir::Node* head = lm_head_matmul(g);
  if (!head || head->inputs.size() != 2) return "";
  const std::string copy = head->inputs[1];
  auto b = g.initializers.find(copy);
  if (b == g.initializers.end() || b->second->tensor.dims.size() != 2) return "";
  const ir::Tensor& bt = b->second->tensor;
  for (const auto& n : g.nodes) {
    if (n->op_type != "Gather" || !n->domain.empty() || n->inputs.empty()) continue;
    auto e = g.initializers.find(n->inputs[0]);
    if (e == g.initializers.end() || e == b) continue;
    const ir::Tensor& et = e->second->tensor;
    if (et.dtype != bt.dtype || et.dims.size() != 2 || et.dims[0] != bt.dims[1] || et.dims[1] != bt.dims[0]) continue;
    const bool tied = is_transpose_of(bt, et);
    bt.drop_pages();
    et.drop_pages();
    if (!tied) continue;
    // The copy's value name stays: a Transpose of the table now produces it.
    auto t = std::make_unique<ir::Node>();
    t->op_type = "Transpose";
    t->name = head->name + "/tied_transpose";
    t->inputs = {e->first};
    t->outputs = {copy};
    ir::Attribute perm;
    perm.type = NF_ATTR_INTS;
    perm.ints = {1, 0};
    t->attrs["perm"] = perm;
    g.initializers.erase(b);
    g.inputs.erase(std::remove(g.inputs.begin(), g.inputs.end(), copy), g.inputs.end());
    auto at = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const auto& p) { return p.get() == head; });
    g.nodes.insert(at, std::move(t));
    return copy;
  }
  return "";
}

}  // namespace nf::host
