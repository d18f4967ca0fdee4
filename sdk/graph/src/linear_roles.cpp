#include "npuforge/graph/linear_roles.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/kv_layers.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <set>
#include <vector>

namespace nf::graph {

const char* role_name(LinearRole r) {
  switch (r) {
    case LinearRole::query: return "query";
    case LinearRole::key: return "key";
    case LinearRole::value: return "value";
    case LinearRole::fused_qkv: return "fused_qkv";
    case LinearRole::attention_output: return "attention_output";
    case LinearRole::ffn_input: return "ffn_input";
    case LinearRole::ffn_down: return "ffn_down";
    case LinearRole::lm_head: return "lm_head";
    default: return "other";
  }
}

namespace {

bool is_linear(const GraphView& view, const Node& n) {
  const std::string_view op = n.op_type();
  if (n.output_count() == 0) return false;
  if (op == "MatMulNBits") return true;
  if ((op != "MatMul" && op != "Gemm") || n.input_count() < 2) return false;
  const std::string w = n.input(1);
  if (view.is_initializer(w)) return true;
  auto p = view.producer(w);
  return p && p->op_type() == "Transpose" && view.is_initializer(p->input(0));
}

// ONNX Runtime's fused attention ops and ONNX's opset-23 Attention (q, k, v are inputs 0-2).
// com.microsoft's older Attention takes the packed QKV weight itself: not a core here.
bool is_fused_attention(const Node& n) {
  const std::string_view op = n.op_type(), domain = n.domain();
  if (domain == "com.microsoft") return op == "GroupQueryAttention" || op == "MultiHeadAttention";
  return op == "Attention" && (domain.empty() || domain == "ai.onnx");
}

// The inputs that carry a tensor's data, not a shape, an index or a condition.
std::vector<size_t> data_inputs(const Node& n) {
  static const std::set<std::string_view> none = {"Shape", "Size", "ConstantOfShape", "Range", "NonZero"};
  static const std::set<std::string_view> first = {"Reshape", "Expand", "Tile", "Slice", "Squeeze", "Unsqueeze",
                                                   "Pad", "Gather", "GatherElements", "GatherND", "Split", "TopK"};
  const std::string_view op = n.op_type();
  if (none.count(op)) return {};
  if (first.count(op)) return {0};
  if (op == "Where") return {1, 2};
  if (op == "ScatterND" || op == "ScatterElements") return {0, 2};
  std::vector<size_t> all(n.input_count());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

struct Core {
  nf_node* scores = nullptr;  // QK^T (or the fused op)
  nf_node* mix = nullptr;     // probabilities x V (or the fused op)
  std::string query, key, value, output;
  int64_t block = -1;
};

// The score MatMul behind a Softmax (through scaling, the mask, casts, soft-capping) and the
// MatMul that reads its probabilities; false when the Softmax is not attention (a router).
bool attention_core(const GraphView& view, const Node& softmax, Core* core) {
  static const std::set<std::string_view> score_ops = {"Add", "Sub", "Mul", "Div", "Cast", "Identity", "Where", "Tanh",
                                                       "Reshape"};
  std::vector<Node> found;
  std::set<std::string> seen;
  std::deque<std::pair<std::string, int>> todo{{softmax.input(0), 0}};
  while (!todo.empty()) {
    auto [v, hops] = todo.front();
    todo.pop_front();
    if (!seen.insert(v).second || hops > 12) continue;
    auto p = view.producer(v);
    if (!p) continue;
    if (p->op_type() == "MatMul" && !is_linear(view, *p)) {
      found.push_back(*p);
      continue;
    }
    if (!score_ops.count(p->op_type())) continue;
    for (size_t i : data_inputs(*p)) todo.push_back({p->input(i), hops + 1});
  }
  if (found.size() != 1) return false;
  // Forward from the probabilities to the MatMul that reads them as its left operand.
  std::optional<Node> mix;
  std::deque<std::pair<std::string, int>> fwd{{softmax.output(0), 0}};
  while (!fwd.empty() && !mix) {
    auto [v, hops] = fwd.front();
    fwd.pop_front();
    for (const Node& c : view.consumers(v)) {
      if (c.op_type() == "MatMul" && c.input(0) == v && c.output_count() > 0 && !is_linear(view, c)) {
        mix = c;
        break;
      }
      if (hops < 4 && c.output_count() > 0 &&
          (c.op_type() == "Cast" || c.op_type() == "Identity" || c.op_type() == "Dropout" || c.op_type() == "Where" ||
           c.op_type() == "Reshape"))
        fwd.push_back({c.output(0), hops + 1});
    }
  }
  if (!mix) return false;
  core->scores = found[0].get();
  core->mix = mix->get();
  core->query = found[0].input(0);
  core->key = found[0].input(1);
  core->value = mix->input(1);
  core->output = mix->output(0);
  return true;
}

// What a walk does after visiting a node: go on through it, end this branch, or end the walk.
enum class Walk { on, stop, done };

// Takes each value once from `start` on: `expand(value, todo)` adds the values to go on to
// and returns false to end the walk.
template <class Expand>
void walk_values(const std::string& start, Expand expand) {
  std::set<std::string> seen;
  std::vector<std::string> todo{start};
  while (!todo.empty()) {
    std::string v = std::move(todo.back());
    todo.pop_back();
    if (seen.insert(v).second && !expand(v, todo)) return;
  }
}

// Visits the producers of the values `start` is computed from, through data inputs only.
template <class Visit>
void walk_back(const GraphView& view, const std::string& start, Visit visit) {
  walk_values(start, [&](const std::string& v, std::vector<std::string>& todo) {
    auto p = view.producer(v);
    const Walk w = p ? visit(*p) : Walk::stop;
    if (w == Walk::on)
      for (size_t i : data_inputs(*p)) todo.push_back(p->input(i));
    return w != Walk::done;
  });
}

// Visits the nodes that read `start`'s data and, through them, what is computed from it;
// `visit(node, value)` is told which value the node reads.
template <class Visit>
void walk_forward(const GraphView& view, const std::string& start, Visit visit) {
  walk_values(start, [&](const std::string& v, std::vector<std::string>& todo) {
    for (const Node& n : view.consumers(v)) {
      const std::vector<size_t> data = data_inputs(n);
      if (std::none_of(data.begin(), data.end(), [&](size_t i) { return n.input(i) == v; })) continue;
      const Walk w = visit(n, v);
      if (w == Walk::done) return false;
      if (w == Walk::on)
        for (const std::string& out : n.outputs()) todo.push_back(out);
    }
    return true;
  });
}

}  // namespace

std::map<std::string, LinearUse> linear_roles(Graph g) {
  GraphView view(g);
  const std::vector<Node> order = view.sorted_nodes();
  std::map<nf_node*, LinearUse> use;
  for (const Node& n : order)
    if (is_linear(view, n)) use[n.get()] = {};

  // Attention cores, with the depth of each: one more than the deepest core upstream.
  std::vector<Core> cores;
  for (const Node& n : order) {
    Core c;
    if (n.output_count() == 0) continue;
    if (is_fused_attention(n)) {
      c.scores = c.mix = n.get();
      c.query = n.input(0);
      c.key = n.input(1);
      c.value = n.input(2);
      c.output = n.output(0);
    } else if (n.op_type() != "Softmax" || !attention_core(view, n, &c)) {
      continue;
    }
    cores.push_back(c);
  }
  std::map<nf_node*, const Core*> core_of;
  for (const Core& c : cores) core_of[c.scores] = core_of[c.mix] = &c;
  std::map<std::string, int64_t> depth_of;  // deepest core upstream of a value
  for (const Node& n : order) {
    int64_t d = -1;
    for (const std::string& in : n.inputs())
      if (auto it = depth_of.find(in); it != depth_of.end()) d = std::max(d, it->second);
    if (auto it = core_of.find(n.get()); it != core_of.end() && it->second->scores == n.get()) ++d;
    if (d >= 0)
      for (const std::string& out : n.outputs()) depth_of[out] = d;
  }
  // A core's block: the KV cache layer it reads (past_key_values.N, global across the parts
  // of a split model), else its depth in this graph.
  const std::map<std::string, int64_t> kv_layer = kv_layer_of_values(view);
  for (Core& c : cores) {
    auto kv = kv_layer.find(c.output);
    auto depth = depth_of.find(c.output);
    c.block = kv != kv_layer.end() ? kv->second : depth != depth_of.end() ? depth->second : 0;
  }

  // A sum of two computed values: the residual stream (a bias or a constant is not computed).
  auto is_stream_sum = [&](const Node& n) {
    if (n.op_type() != "Add" && n.op_type() != "Sub") return false;
    for (size_t i = 0; i < 2; ++i) {
      const std::string in = n.input(i);
      auto p = view.producer(in);
      if (view.is_initializer(in) || (p && p->op_type() == "Constant")) return false;
    }
    return true;
  };

  for (const Core& c : cores) {
    // The projections behind its query, key and value (one behind several: fused).
    const std::pair<const std::string*, LinearRole> sides[] = {
        {&c.query, LinearRole::query}, {&c.key, LinearRole::key}, {&c.value, LinearRole::value}};
    for (const auto& [value, role] : sides) {
      if (value->empty()) continue;  // a fused op's packed QKV leaves key and value empty
      walk_back(view, *value, [&](const Node& p) {
        if (core_of.count(p.get())) return Walk::stop;
        auto it = use.find(p.get());
        if (it == use.end()) return Walk::on;
        LinearUse& u = it->second;
        u.role = u.role == LinearRole::other || u.role == role ? role : LinearRole::fused_qkv;
        u.block = c.block;
        return Walk::stop;
      });
    }
    // The output projection: the first linear that reads the core's output as its input
    // (before the residual stream's sum).
    walk_forward(view, c.output, [&](const Node& n, const std::string& v) {
      if (auto it = use.find(n.get()); it != use.end()) {
        if (n.input(0) == v) it->second = {LinearRole::attention_output, c.block};
        return Walk::stop;
      }
      return core_of.count(n.get()) || is_stream_sum(n) ? Walk::stop : Walk::on;
    });
  }

  // The LM head: the first linear met walking back from the logits (decoder_io.hpp).
  nf::decoder::lm_head_output(
      [&](const std::string& v) {
        auto p = view.producer(v);
        return p ? p->inputs() : std::vector<std::string>{};
      },
      [&](const std::string& v) {
        auto p = view.producer(v);
        if (!p || !use.count(p->get())) return false;
        use[p->get()] = {LinearRole::lm_head, -1};
        return true;
      });

  // The MLP: a linear whose input is computed from MLP linears alone (an activation, gate x
  // up, a fused gate_up's halves) is the down projection. An input projection reads the
  // normalized residual stream, computed from the attention's output projection (or from no
  // linear at all in the first block of a parallel-attention model), and feeds a down
  // projection; a linear that feeds none is outside the pattern (a router, EAGLE's fc).
  auto is_mlp = [](LinearRole r) { return r == LinearRole::other || r == LinearRole::ffn_input || r == LinearRole::ffn_down; };
  for (auto& [node, u] : use) {
    if (u.role != LinearRole::other) continue;
    bool from_mlp = false, from_attention = false;
    walk_back(view, Node(node).input(0), [&](const Node& p) {
      auto it = use.find(p.get());
      if (core_of.count(p.get()) || (it != use.end() && !is_mlp(it->second.role))) {
        from_attention = true;
        return Walk::done;
      }
      if (it == use.end()) return Walk::on;
      from_mlp = true;
      return Walk::stop;
    });
    if (from_mlp && !from_attention) u.role = LinearRole::ffn_down;
  }
  for (auto& [node, u] : use) {
    if (u.role != LinearRole::other) continue;
    walk_forward(view, Node(node).output(0), [&](const Node& n, const std::string& v) {
      auto it = use.find(n.get());
      if (it == use.end()) return core_of.count(n.get()) ? Walk::stop : Walk::on;
      if (it->second.role != LinearRole::ffn_down || n.input(0) != v) return Walk::stop;
      u.role = LinearRole::ffn_input;
      return Walk::done;
    });
  }

  // Blocks of the rest. An MLP linear: the block of the deepest attention before it, or one
  // before the nearest block whose attention it feeds if that is later (a parallel block's MLP
  // reads the stream its own attention reads); the graph's last block when it feeds none. (A
  // draft's depth loop unrolled into one graph runs the same block again: the later of the two.)
  // Another linear: the block of the deepest attention before it (a router), or the block it
  // feeds when none is (EAGLE's fc).
  int64_t last = -1;
  for (const Core& c : cores) last = std::max(last, c.block);
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::map<std::string, int64_t> block_before;  // block of the deepest core upstream of a value
  for (const Node& n : order) {
    int64_t b = -1;
    for (const std::string& in : n.inputs())
      if (auto it = block_before.find(in); it != block_before.end()) b = std::max(b, it->second);
    if (auto c = core_of.find(n.get()); c != core_of.end()) b = std::max(b, c->second->block);
    if (b >= 0)
      for (const std::string& out : n.outputs()) block_before[out] = b;
  }
  std::map<std::string, int64_t> block_after;  // nearest attention block downstream of a value
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int64_t b = kNone;
    if (auto u = use.find(it->get()); u != use.end() && (u->second.role == LinearRole::query ||
                                                          u->second.role == LinearRole::key ||
                                                          u->second.role == LinearRole::value ||
                                                          u->second.role == LinearRole::fused_qkv))
      b = u->second.block;
    else if (auto c = core_of.find(it->get()); c != core_of.end())
      b = c->second->block;
    for (const std::string& out : it->outputs())
      if (auto after = block_after.find(out); after != block_after.end()) b = std::min(b, after->second);
    for (const std::string& in : it->inputs())
      if (!in.empty()) {
        auto [slot, fresh] = block_after.emplace(in, b);
        if (!fresh) slot->second = std::min(slot->second, b);
      }
  }
  for (auto& [node, u] : use) {
    if (!is_mlp(u.role)) continue;
    const Node n(node);
    auto after_it = block_after.find(n.output(0));
    auto before_it = block_before.find(n.input(0));
    const int64_t after = after_it == block_after.end() ? kNone : after_it->second;
    const int64_t before = before_it == block_before.end() ? -1 : before_it->second;
    if (u.role != LinearRole::other)
      u.block = after == kNone ? last : std::max(before, after - 1);
    else
      u.block = before >= 0 ? before : after == kNone ? last : after;
  }

  std::map<std::string, LinearUse> out;
  for (const auto& [node, u] : use) out[Node(node).output(0)] = u;
  return out;
}

}  // namespace nf::graph
