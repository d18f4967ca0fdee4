#include "attention_sites.h"

#include <optional>
#include <set>

namespace arcl {
namespace {

KvConcat find_kv_concat(const nf::graph::GraphView& view, const std::string& past) {
  // Shape nodes may read the cache too (torch takes the past length from it).
  std::vector<nf::Node> concats;
  for (const nf::Node& u : view.consumers(past)) {
    if (u.op_type() == "Concat") concats.push_back(u);
    else if (u.op_type() != "Shape")
      throw nf::Error("arcl: '" + past + "' feeds a " + std::string(u.op_type()) + " ('" + std::string(u.name()) +
                      "'); expected only the Concat with the new rows");
  }
  if (concats.size() != 1)
    throw nf::Error("arcl: '" + past + "' should feed exactly one Concat with the new rows (found " +
                    std::to_string(concats.size()) + ")");
  nf::Node concat = concats[0];
  int64_t axis = concat.attr_int("axis", 0);
  if (concat.input_count() != 2 || (axis != 2 && axis != -2))
    throw nf::Error("arcl: the Concat '" + std::string(concat.name()) + "' after '" + past +
                    "' is not a two-input concat along the sequence axis");
  KvConcat kv;
  kv.concat = concat.get();
  kv.past_slot = concat.input(0) == past ? 0 : 1;
  kv.new_rows = concat.input(1 - kv.past_slot);
  kv.full = concat.output(0);
  return kv;
}

// The first MatMul on every forward path from `value` (the QK^T product for a key cache;
// GQA's Unsqueeze/Expand/Reshape and the Transpose sit in between).
std::vector<nf::Node> first_matmuls(const nf::graph::GraphView& view, const std::string& value) {
  std::vector<nf::Node> found;
  std::set<nf_node*> seen;
  std::vector<std::pair<std::string, int>> todo{{value, 0}};
  while (!todo.empty()) {
    auto [v, depth] = todo.back();
    todo.pop_back();
    for (const nf::Node& u : view.consumers(v)) {
      // Data paths only: a shape taken from the cache (the past length) is no attention.
      if (u.op_type() == "Shape" || u.op_type() == "Size" || !seen.insert(u.get()).second) continue;
      if (u.op_type() == "MatMul") {
        found.push_back(u);
        continue;
      }
      if (depth < 8)
        for (const std::string& out : u.outputs()) todo.push_back({out, depth + 1});
    }
  }
  return found;
}

// The ops between QK^T and the Softmax that mask the scores: each Add with the index of its
// other operand, and each Where(condition, scores, min).
struct ScorePath {
  std::vector<MaskUse> adds;
  std::vector<nf::Node> wheres;  // Where(condition, scores, other)
  std::vector<nf::Node> fills;   // Where(condition, fill, scores): masked_fill
};

// A scalar float constant (initializer or Constant node), if `value` is one.
std::optional<float> scalar_constant(const nf::graph::GraphView& view, const std::string& value) {
  nf::Tensor t;
  if (view.is_initializer(value)) t = view.graph().initializer(value);
  else if (auto p = view.producer(value); p && p->op_type() == "Constant") t = p->attr_tensor("value");
  if (!t || t.numel() != 1 || t.dtype() != NF_DTYPE_FLOAT32) return std::nullopt;
  return t.data_as<float>()[0];
}

// Follows the scores from QK^T to the Softmax through scaling, casts, soft-capping (Tanh),
// views (Bloom's [b * heads, q, k] -> [b, heads, q, k]), Wheres (GPT-2's causal and GPT-Neo's
// local masks from buffers) and Adds; empty when the path leaves these ops.
ScorePath score_path(const nf::graph::GraphView& view, const nf::Node& qk) {
  ScorePath path;
  std::string v = qk.output(0);
  for (int step = 0; step < 8; ++step) {
    const auto& users = view.consumers(v);
    if (users.size() != 1) return {};
    const nf::Node& u = users[0];
    std::string_view op = u.op_type();
    if (op == "Softmax") return path;
    if (op == "Add" && u.input_count() == 2) path.adds.push_back({u.get(), u.input(0) == v ? size_t{1} : size_t{0}});
    else if (op == "Where" && u.input_count() == 3 && u.input(1) == v) path.wheres.push_back(u);  // the scores as the kept branch
    else if (op == "Where" && u.input_count() == 3 && u.input(2) == v) path.fills.push_back(u);
    else if (op != "Div" && op != "Mul" && op != "Cast" && op != "Identity" && op != "Tanh" && op != "Reshape") return {};
    v = u.output(0);
  }
  return {};
}

}  // namespace

bool counts_positions(const nf::graph::GraphView& view, const std::set<std::string>& upstream,
                      const std::string& mask_input) {
  for (const std::string& v : upstream) {
    auto p = view.producer(v);
    if (p && p->op_type() == "CumSum" && view.upstream(p->input(0)).count(mask_input)) return true;
  }
  return false;
}

std::vector<LayerSites> find_attention_sites(const nf::graph::GraphView& view, const ModelInfo& info,
                                             const std::string& mask_input) {
  std::vector<LayerSites> layers(info.layers);
  for (int64_t l = 0; l < info.layers; ++l) {
    LayerSites& site = layers[l];
    site.key = find_kv_concat(view, info.past_key(l));
    site.value = find_kv_concat(view, info.past_value(l));
    std::string where = "arcl: layer " + std::to_string(l) + ": ";
    std::vector<nf::Node> qk = first_matmuls(view, site.key.full);
    if (qk.size() != 1)
      throw nf::Error(where + "expected one attention-score MatMul after the key Concat, found " + std::to_string(qk.size()));
    // The mask is the Add operand computed from attention_mask's data (its causal and window
    // parts come from shapes and positions, which fold away). By data only: a later layer's
    // operands borrow lengths from keys whose computation read the mask in earlier layers.
    const ScorePath path = score_path(view, qk[0]);
    for (const MaskUse& use : path.adds) {
      const std::string& operand = nf::Node(use.add).input(use.mask_slot);
      const std::set<std::string> data = view.upstream(operand, false);
      if (data.count(mask_input)) {
        (counts_positions(view, data, mask_input) ? site.position_biases : site.masks).push_back(use);
        continue;
      }
      // Data from constants only, its extent from the inputs' lengths: a pattern over key
      // columns (MPT's ALiBi buffer sliced to the keys, a causal mask from shapes alone) that
      // takes columns for positions.
      bool sized_by_inputs = false;
      for (const std::string& u : view.upstream(operand)) sized_by_inputs |= view.is_input(u);
      if (sized_by_inputs && view.computed_without_inputs(operand)) site.slot_biases.push_back(use);
    }
    for (const nf::Node& w : path.wheres)
      if (view.computed_without_inputs(w.input(0))) site.slot_masks.push_back(w.get());
    for (const nf::Node& w : path.fills) {
      auto fill = scalar_constant(view, w.input(1));
      if (view.upstream(w.input(0)).count(mask_input) && fill && *fill <= -1e4f) site.mask_fills.push_back(w.get());
    }
    if (site.masks.empty() && site.mask_fills.empty() && site.slot_biases.empty())
      throw nf::Error(where + "found no mask derived from attention_mask added to the scores before Softmax");
  }
  return layers;
}

}  // namespace arcl
