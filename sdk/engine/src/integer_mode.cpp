// Integer mode: when activations run on their encodings' grids, the same value must give
// the same bits wherever it sits (row slot, AR variant, KV cache or rows of the pass), as on
// an integer NPU. Two things break that in float: a value stored on a grid but used
// unrounded inside the pass (arcl's present.N.key = Identity(rotated key) while attention
// reads the rotated key itself), and float sums whose order follows the layout (GEMV vs
// GEMM, softmax and P*V over key columns). This pass fixes the first by giving the stored
// grid to the value the pass uses, and marks MatMul/Gemm/Softmax to run the exact kernels.
#include <algorithm>
#include <cmath>

#include "npuforge/engine/executor.h"

namespace nf::engine {
namespace {

// Ops whose output holds input 0's values, only moved or repeated.
bool moves_values(const std::string& op) {
  static const char* kOps[] = {"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                               "Expand",   "Slice",   "Gather",    "Tile",    "Split"};
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* o) { return op == o; });
}

// Ops whose output is exactly input 0 rearranged: a grid on the output is a grid on the input.
bool is_bijective_move(const std::string& op) {
  return op == "Identity" || op == "Reshape" || op == "Transpose" || op == "Squeeze" || op == "Unsqueeze" ||
         op == "Flatten";
}

bool same_grid(const ActivationGrid& a, const ActivationGrid& b) {
  return a.scale == b.scale && a.offset == b.offset && a.qmax == b.qmax;
}

// Codes q + offset of the grid fit 16 bits signed-magnitude (the exact linear kernel's bound).
bool codes_fit_16_bits(const ActivationGrid& g) {
  return g.qmax <= 65535.f && std::max(std::fabs(g.offset), std::fabs(g.qmax + g.offset)) <= 65535.f;
}

}  // namespace

void GraphPlan::plan_integer_mode() {
  if (!opts_.use_encodings || act_grid_.empty()) return;  // float activations: the fast float kernels
  // 1. A value stored on a grid through a pure rearrangement is rounded where it is made,
  //    so every reader (the cache output and attention in the same pass) sees the stored bits.
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    const NodeDef& n = *it;
    if (!is_bijective_move(n.op) || n.in.empty() || n.in[0] < 0 || n.out.empty() || n.out[0] < 0) continue;
    auto g = act_grid_.find(n.out[0]);
    if (g == act_grid_.end() || act_grid_.count(n.in[0]) || !constants_[n.in[0]].empty_handle()) continue;
    act_grid_[n.in[0]] = g->second;
  }
  // 2. Which values lie on a grid: the rounded ones and what data movement makes of them.
  std::map<int, ActivationGrid> on_grid = act_grid_;
  auto grid_of = [&](int s) -> const ActivationGrid* {
    auto g = on_grid.find(s);
    return s >= 0 && g != on_grid.end() ? &g->second : nullptr;
  };
  for (const NodeDef& n : nodes_) {
    if (n.in.empty() || n.out.empty()) continue;
    const ActivationGrid* g = grid_of(n.in[0]);
    if (n.op == "Concat")
      for (int s : n.in) {
        const ActivationGrid* gi = grid_of(s);
        if (!g || !gi || !same_grid(*g, *gi)) g = nullptr;
      }
    else if (!moves_values(n.op))
      continue;
    if (!g) continue;
    for (int s : n.out)
      if (s >= 0 && !on_grid.count(s)) on_grid[s] = *g;
  }
  // 3. The reductions run their layout-independent forms.
  for (NodeDef& n : nodes_) {
    if (n.op != "MatMul" && n.op != "Gemm" && n.op != "Softmax") continue;
    n.exact.on = true;
    if (n.op == "Softmax") continue;
    if (const ActivationGrid* g = grid_of(n.in[0]); g && codes_fit_16_bits(*g)) n.exact.a_scale = g->scale;
    if (!n.linear && n.in.size() > 1)
      if (const ActivationGrid* g = grid_of(n.in[1])) n.exact.b_scale = g->scale;
  }
}

}  // namespace nf::engine
