// ONNX Runtime GenAI's CPU decoders (builders/base.py) hold three contrib operators; each is
// rewritten into the standard operators a torch export of the same layer holds, so arcl,
// mha2sha, spinquant and the backends find attention, heads and norms by what they compute:
//
// GroupQueryAttention(packed qkv | q, k, v, past_key, past_value, seqlens_k, total_length,
//                     cos_cache, sin_cache)                                  (com.microsoft)
//   q, k, v split by heads and put [b, heads, s, head_dim]; with do_rotary, rotated as
//   transformers does (x * cos + rotate_half(x) * sin, the caches gathered at the rows'
//   positions past_len .. past_len + s - 1); present = Concat(past, new) along the rows; K and
//   V repeated to the query heads; softmax(q K^T * scale [soft-capped] + mask) V, heads merged.
//   The mask is made once from attention_mask, as transformers >= 4.53 makes it: key j is seen
//   by the row at position p when j <= p (and p - window < j with local_window_size) and
//   attention_mask says j is a token. seqlens_k and total_sequence_length are computed from
//   attention_mask in these exports and say nothing more.
//   With rotary_interleaved, the rotated pairs are (x[2i], x[2i+1]) (ChatGLM's), not the halves.
// RotaryEmbedding(x, position_ids, cos_cache, sin_cache)                     (com.microsoft)
//   The builder's form where GQA cannot rotate (its DirectML exports): x [b, s, heads x
//   head_dim] (or [b, heads, s, head_dim]) rotated over the first rotary_embedding_dim values
//   of each head at the given positions, halves or interleaved pairs, then GQA without do_rotary.
// The fused operators of ONNX opset 23 (a torch export at that opset):
// RMSNormalization(x, scale): SimplifiedLayerNormalization's numbers over the last axis.
// RotaryEmbedding(x, cos_cache, sin_cache[, position_ids]): the contrib op's, its inputs in
//   another order (without position_ids the caches are the rows already, [b, s, rotary_dim / 2]).
// Attention(q, k, v[, attn_mask, past_key, past_value]): q, k, v [b, heads, s, head_dim] (or
//   [b, s, heads x head_dim] with q_num_heads / kv_num_heads); present = Concat(past, new);
//   K and V repeated to the query heads; softmax(q K^T * scale [soft-capped] + mask) V, the
//   mask added (float) or open where true (bool). is_causal, whose alignment with a cache the
//   rows would have to follow, is refused: torch passes the decoder's mask instead.
// SimplifiedLayerNormalization(x, weight): x * 1 / sqrt(mean(x^2) + eps) * weight (RMSNorm).
// SkipSimplifiedLayerNormalization(input, skip, weight[, bias]): the same over
//   input + skip (+ bias), whose sum is output 3 (the next residual).
#include "npuforge/graph/microsoft_ops.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>

#include "npuforge/graph/eliminate_dead_nodes.h"
#include "npuforge/graph/graph_view.h"
#include "npuforge/graph/unique_names.h"
#include "npuforge/graph/value_types.h"

namespace nf::graph {
namespace {

using Dims = std::vector<int64_t>;
constexpr const char* kMicrosoft = "com.microsoft";

enum class Contrib {
  kNone,
  kGroupQueryAttention,
  kRotaryEmbedding,
  kSimplifiedNorm,
  kSkipSimplifiedNorm,
  kAttention23,
  kRotaryEmbedding23,
  kRmsNorm23
};

Contrib contrib_op(const nf::Node& n) {
  const std::string_view op = n.op_type(), domain = n.domain();
  if (domain.empty() || domain == "ai.onnx") {  // opset 23's fused operators
    if (op == "Attention") return Contrib::kAttention23;
    if (op == "RotaryEmbedding") return Contrib::kRotaryEmbedding23;
    if (op == "RMSNormalization") return Contrib::kRmsNorm23;
  }
  if (op == "GroupQueryAttention" && domain == kMicrosoft) return Contrib::kGroupQueryAttention;
  if (op == "RotaryEmbedding" && domain == kMicrosoft) return Contrib::kRotaryEmbedding;
  if (op == "SimplifiedLayerNormalization" && (domain.empty() || domain == kMicrosoft)) return Contrib::kSimplifiedNorm;
  if (op == "SkipSimplifiedLayerNormalization" && domain == kMicrosoft) return Contrib::kSkipSimplifiedNorm;
  return Contrib::kNone;
}

class Expander {
 public:
  explicit Expander(nf::Graph g) : g_(g), view_(g), names_(g), opset_(g.opset("")) {}

  size_t run() {
    size_t expanded = 0;
    for (nf::Node n : g_.nodes()) {
      switch (contrib_op(n)) {
        case Contrib::kGroupQueryAttention: group_query_attention(n); break;
        case Contrib::kRotaryEmbedding: rotary_embedding(n, n.input(0), n.input(2), n.input(3), n.input(1)); break;
        case Contrib::kRotaryEmbedding23: rotary_embedding(n, n.input(0), n.input(1), n.input(2), n.input(3)); break;
        case Contrib::kAttention23: attention(n); break;
        case Contrib::kRmsNorm23: simplified_norm(n); break;
        case Contrib::kSimplifiedNorm: simplified_norm(n); break;
        case Contrib::kSkipSimplifiedNorm: skip_simplified_norm(n); break;
        case Contrib::kNone: continue;
      }
      ++expanded;
    }
    if (expanded) {
      eliminate_dead_nodes(g_);  // seqlens_k and total_sequence_length
      g_.sort();
    }
    return expanded;
  }

 private:
  nf::Graph g_;
  GraphView view_;
  UniqueNames names_;
  int64_t opset_;
  std::string label_;  // the node being expanded: the new nodes' and values' prefix
  std::string positions_;
  std::map<int64_t, std::string> masks_;                   // by window (0: none)
  std::map<std::string, std::pair<std::string, std::string>> tables_;  // cos_cache, positions, form -> cos, sin rows
  std::map<std::string, std::pair<std::string, int64_t>> rotated_heads_;  // RotaryEmbedding output -> [b, s, n, d], d

  [[noreturn]] void refuse(const nf::Node& n, const std::string& why) const {
    throw nf::Error(std::string(n.op_type()) + " '" + std::string(n.name()) + "': " + why);
  }

  // One node of the expansion: returns its (only) output, named after the node expanded.
  nf::Node node(const std::string& op, const std::vector<std::string>& in, const std::string& what,
                const std::string& out = "") {
    const std::string name = names_.make(label_ + "/" + what);
    return g_.add_node(op, in, {out.empty() ? names_.make(name + "/output_0") : out}, name);
  }
  std::string value(const std::string& op, const std::vector<std::string>& in, const std::string& what,
                    const std::string& out = "") {
    return node(op, in, what, out).output(0);
  }
  std::string ints(const Dims& v, const std::string& what) {
    const std::string name = names_.make(label_ + "/" + what);
    set_int64_initializer(g_, name, v);
    return name;
  }
  std::string scalar(nf_dtype dtype, double v, const std::string& what) {
    const std::string name = names_.make(label_ + "/" + what);
    nf::Tensor t = nf::Tensor::create(dtype, Dims{});
    if (dtype == NF_DTYPE_FLOAT32) {
      const float f = static_cast<float>(v);
      std::memcpy(t.mutable_data(), &f, sizeof f);
    } else {
      const int64_t i = static_cast<int64_t>(v);
      std::memcpy(t.mutable_data(), &i, sizeof i);
    }
    g_.set_initializer(name, t);
    return name;
  }
  // Axes as an input from opset 13 (Unsqueeze) and 18 (ReduceMean), an attribute before.
  std::string with_axes(const std::string& op, const std::string& x, const Dims& axes, const std::string& what,
                        int64_t input_from) {
    if (opset_ >= input_from) return value(op, {x, ints(axes, what + "_axes")}, what);
    nf::Node n = node(op, {x}, what);
    n.set_attr("axes", axes);
    return n.output(0);
  }
  std::string unsqueeze(const std::string& x, const Dims& axes, const std::string& what) {
    return with_axes("Unsqueeze", x, axes, what, 13);
  }
  std::string slice_last(const std::string& x, int64_t begin, int64_t end, const std::string& what) {
    return value("Slice", {x, ints({begin}, what + "_starts"), ints({end}, what + "_ends"), ints({-1}, what + "_axes")}, what);
  }
  std::string transpose(const std::string& x, const Dims& perm, const std::string& what) {
    nf::Node n = node("Transpose", {x}, what);
    n.set_attr("perm", perm);
    return n.output(0);
  }
  std::string length(const std::string& x, int64_t axis, const std::string& what) {
    return value("Gather", {value("Shape", {x}, what + "_shape"), scalar(NF_DTYPE_INT64, axis, what + "_axis")}, what);
  }

  // x * 1 / sqrt(mean(x^2) + eps) * weight, into `out`.
  void rms_norm(const std::string& x, const std::string& weight, float eps, const std::string& out) {
    std::string squares = value("Pow", {x, scalar(NF_DTYPE_FLOAT32, 2.0, "two")}, "Pow");
    std::string mean = with_axes("ReduceMean", squares, {-1}, "ReduceMean", 18);
    std::string root = value("Sqrt", {value("Add", {mean, scalar(NF_DTYPE_FLOAT32, eps, "epsilon")}, "Add")}, "Sqrt");
    std::string normalized = value("Mul", {x, value("Reciprocal", {root}, "Reciprocal")}, "Mul");
    value("Mul", {weight, normalized}, "Mul_weight", out);
  }

  // A norm's outputs beyond the normalized value (and, for the Skip norms, the sum) are its
  // statistics, which the expansion does not make.
  void only_expanded_outputs_read(const nf::Node& n, bool with_sum) {
    for (size_t i = 1; i < n.output_count(); ++i)
      if (!n.output(i).empty() && view_.is_used(n.output(i)) && !(with_sum && i == 3))
        refuse(n, "output " + std::to_string(i) + " is read; only " +
                      (with_sum ? "outputs 0 (the normalized value) and 3 (the sum) are" : "output 0 (the normalized value) is") +
                      " expanded");
  }

  float epsilon(const nf::Node& n) { return n.attr_float("epsilon", 1e-5f); }

  void last_axis(const nf::Node& n) {
    const int64_t axis = n.attr_int("axis", -1);
    if (axis == -1) return;
    auto t = get_value_type(g_, n.input(0));
    if (!t || !t->dims || axis != static_cast<int64_t>(t->dims->size()) - 1)
      refuse(n, "normalizes over axis " + std::to_string(axis) + "; only the last axis is expanded");
  }

  void simplified_norm(nf::Node n) {
    label_ = std::string(n.name());
    last_axis(n);
    only_expanded_outputs_read(n, false);
    const std::string x = n.input(0), weight = n.input(1), out = n.output(0);
    const float eps = epsilon(n);
    g_.remove_node(n);
    rms_norm(x, weight, eps, out);
  }

  void skip_simplified_norm(nf::Node n) {
    label_ = std::string(n.name());
    only_expanded_outputs_read(n, true);
    const std::string input = n.input(0), skip = n.input(1), weight = n.input(2), bias = n.input(3), out = n.output(0);
    const std::string sum_out = n.output_count() > 3 ? n.output(3) : "";
    const float eps = epsilon(n);
    g_.remove_node(n);
    std::string sum = value("Add", {input, skip}, "Add", bias.empty() ? sum_out : "");
    if (!bias.empty()) sum = value("Add", {sum, bias}, "Add_bias", sum_out);
    rms_norm(sum, weight, eps, out.empty() ? names_.make(label_ + "/output_0") : out);
  }

  // This pass's row positions past_len .. past_len + s - 1 (int64 [s]), from the cache's
  // length: made once, as transformers makes cache_position.
  const std::string& positions(const std::string& past_key, const std::string& query) {
    if (positions_.empty()) {
      std::string past_len = length(past_key, 2, "past_length");
      std::string end = value("Add", {past_len, length(query, 1, "sequence_length")}, "positions_end");
      positions_ = value("Range", {past_len, end, scalar(NF_DTYPE_INT64, 1, "one")}, "positions");
    }
    return positions_;
  }

  // The additive mask [b, 1, s, keys] from attention_mask, once per window.
  const std::string& mask(int64_t window, const nf::Node& n) {
    auto it = masks_.find(window);
    if (it != masks_.end()) return it->second;
    if (!view_.is_input("attention_mask")) refuse(n, "the graph has no attention_mask input to make its mask from");
    std::string keys = length("attention_mask", 1, "keys");
    std::string key_index =
        unsqueeze(value("Range", {scalar(NF_DTYPE_INT64, 0, "zero"), keys, scalar(NF_DTYPE_INT64, 1, "one")}, "key_index"),
                  {0}, "key_row");
    std::string row_position = unsqueeze(positions_, {1}, "row_column");
    std::string seen = value("LessOrEqual", {key_index, row_position}, "causal");
    if (window > 0) {
      std::string lowest = value("Sub", {row_position, scalar(NF_DTYPE_INT64, static_cast<double>(window), "window")}, "window_start");
      seen = value("And", {seen, value("Greater", {key_index, lowest}, "in_window")}, "causal_window");
    }
    nf::Node token = node("Cast", {"attention_mask"}, "tokens");
    token.set_attr("to", int64_t{NF_DTYPE_BOOL});
    seen = value("And", {seen, unsqueeze(token.output(0), {1, 2}, "tokens_4d")}, "seen");
    std::string mask = value("Where", {seen, scalar(NF_DTYPE_FLOAT32, 0.0, "open"),
                                       scalar(NF_DTYPE_FLOAT32, std::numeric_limits<float>::lowest(), "closed")},
                             "mask");
    return masks_[window] = mask;
  }

  // The rows' cos and sin from the caches [positions, rotary_dim / 2] at `positions`: [s,
  // rotary_dim] (each half's table twice) for halves, [s, rotary_dim / 2] for interleaved pairs.
  std::pair<std::string, std::string> rotary_rows(const std::string& cos_cache, const std::string& sin_cache,
                                                  const std::string& positions, bool interleaved) {
    const std::string key = cos_cache + "\n" + positions + (interleaved ? "\n1" : "\n0");
    auto it = tables_.find(key);
    if (it != tables_.end()) return it->second;
    auto rows = [&](const std::string& cache, const std::string& what) {
      std::string half = value("Gather", {cache, positions}, what + "_half");
      if (interleaved) return half;
      nf::Node both = node("Concat", {half, half}, what);
      both.set_attr("axis", int64_t{-1});
      return both.output(0);
    };
    return tables_[key] = {rows(cos_cache, "cos"), rows(sin_cache, "sin")};
  }

  std::string concat_last(const std::vector<std::string>& parts, const std::string& what) {
    nf::Node c = node("Concat", parts, what);
    c.set_attr("axis", int64_t{-1});
    return c.output(0);
  }

  // The rotary of x [..., head_dim] over its first rotary_dim values, cos and sin broadcasting
  // over x's leading axes: transformers' halves (x * cos + rotate_half(x) * sin), or with
  // `interleaved` the pairs (x[2i], x[2i+1]) each turned by angle i (cos and sin of rotary_dim / 2).
  std::string rotate(const std::string& x, int64_t head_dim, int64_t rotary_dim, const std::string& cos,
                     const std::string& sin, const std::string& what, bool interleaved = false) {
    const std::string part = rotary_dim == head_dim ? x : slice_last(x, 0, rotary_dim, what + "_rotary_part");
    std::string rotated;
    if (interleaved) {
      auto every_other = [&](int64_t first, const std::string& name) {
        return value("Slice", {part, ints({first}, name + "_starts"), ints({rotary_dim}, name + "_ends"),
                               ints({-1}, name + "_axes"), ints({2}, name + "_steps")},
                     name);
      };
      const std::string even = every_other(0, what + "_even"), odd = every_other(1, what + "_odd");
      auto term = [&](const std::string& a, const std::string& table, const std::string& name) {
        return value("Mul", {a, table}, name);
      };
      std::string new_even = value("Sub", {term(even, cos, what + "_even_cos"), term(odd, sin, what + "_odd_sin")},
                                   what + "_new_even");
      std::string new_odd = value("Add", {term(odd, cos, what + "_odd_cos"), term(even, sin, what + "_even_sin")},
                                  what + "_new_odd");
      std::string pairs = concat_last({unsqueeze(new_even, {-1}, what + "_even_pair"),
                                       unsqueeze(new_odd, {-1}, what + "_odd_pair")},
                                      what + "_pairs");
      rotated = value("Reshape", {pairs, value("Shape", {part}, what + "_part_shape")}, what + "_rotated");
    } else {
      std::string first = slice_last(part, 0, rotary_dim / 2, what + "_first_half");
      std::string second = slice_last(part, rotary_dim / 2, rotary_dim, what + "_second_half");
      std::string turned = concat_last({value("Neg", {second}, what + "_Neg"), first}, what + "_rotate_half");
      rotated = value("Add", {value("Mul", {part, cos}, what + "_cos"), value("Mul", {turned, sin}, what + "_sin")},
                      what + "_rotated");
    }
    if (rotary_dim == head_dim) return rotated;
    const int64_t end = head_dim > 0 ? head_dim : std::numeric_limits<int64_t>::max();
    nf::Node whole = node("Concat", {rotated, slice_last(x, rotary_dim, end, what + "_pass_part")}, what + "_whole");
    whole.set_attr("axis", int64_t{-1});
    return whole.output(0);
  }

  std::string heads_first(const std::string& x, int64_t heads, int64_t head_dim, const std::string& what) {
    // A RotaryEmbedding's output is already split into heads: transpose that view, so the
    // projection reaches attention through one split, as in a torch export that rotates
    // before the transpose (GPT-J), not through a merge and a second split.
    if (auto r = rotated_heads_.find(x); r != rotated_heads_.end() && r->second.second == head_dim)
      return transpose(r->second.first, {0, 2, 1, 3}, what);
    return transpose(value("Reshape", {x, ints({0, 0, heads, head_dim}, what + "_shape")}, what + "_heads"),
                     {0, 2, 1, 3}, what);
  }

  // transformers' repeat_kv: [b, kv, t, d] -> [b, kv * groups, t, d].
  std::string repeat_heads(const std::string& x, int64_t kv_heads, int64_t groups, int64_t head_dim,
                           const std::string& what) {
    if (groups == 1) return x;
    std::string wide = value("Expand", {unsqueeze(x, {2}, what + "_group_axis"), ints({1, 1, groups, 1, 1}, what + "_groups")},
                             what + "_Expand");
    return value("Reshape", {wide, ints({0, kv_heads * groups, -1, head_dim}, what + "_shape")}, what);
  }

  // present = Concat(past, new) along the rows, into `out` (none given: a fresh name); no past: the new rows.
  std::string append_rows(const std::string& past, const std::string& fresh, const std::string& out,
                          const std::string& what) {
    if (past.empty()) return out.empty() ? fresh : value("Identity", {fresh}, what, out);
    nf::Node c = node("Concat", {past, fresh}, what, out);
    c.set_attr("axis", int64_t{2});
    return c.output(0);
  }

  // softmax(q K^T * scale [soft-capped] + bias) V with the cache's kv_heads repeated to the
  // query's heads: the context [b, heads, s, head_dim]. `bias` makes the added mask (or "")
  // when the scores are there, so the nodes keep the order they always had.
  std::string attend(const std::string& q4, const std::string& keys, const std::string& values, int64_t heads,
                     int64_t kv_heads, int64_t head_dim, float scale, float softcap,
                     const std::function<std::string()>& bias, const std::string& out = "") {
    const std::string k = repeat_heads(keys, kv_heads, heads / kv_heads, head_dim, "k_repeated");
    const std::string v = repeat_heads(values, kv_heads, heads / kv_heads, head_dim, "v_repeated");
    std::string scores = value("MatMul", {q4, transpose(k, {0, 1, 3, 2}, "k_transposed")}, "scores");
    scores = value("Mul", {scores, scalar(NF_DTYPE_FLOAT32, scale, "scale")}, "scaled");
    if (softcap > 0.f) {
      std::string cap = scalar(NF_DTYPE_FLOAT32, softcap, "softcap");
      scores = value("Mul", {value("Tanh", {value("Div", {scores, cap}, "capped")}, "Tanh"), cap}, "softcapped");
    }
    if (const std::string b = bias(); !b.empty()) scores = value("Add", {scores, b}, "masked");
    nf::Node probs = node("Softmax", {scores}, "Softmax");
    probs.set_attr("axis", int64_t{-1});
    return value("MatMul", {probs.output(0), v}, "context", out);
  }

  // [b, heads, s, head_dim] -> [b, s, heads x head_dim], into `out`.
  void merge_heads(const std::string& context, int64_t heads, int64_t head_dim, const std::string& out) {
    value("Reshape", {transpose(context, {0, 2, 1, 3}, "rows_first"), ints({0, 0, heads * head_dim}, "merged_shape")},
          "merged", out.empty() ? names_.make(label_ + "/output_0") : out);
  }

  // The rotary width the cos table [positions, rotary_dim / 2] gives, within the head.
  int64_t table_rotary_dim(const nf::Node& n, const std::string& cos_cache, int64_t head_dim) {
    auto cos_type = get_value_type(g_, cos_cache);
    if (!cos_type || !cos_type->dims || cos_type->dims->size() < 2 || cos_type->dims->back() <= 0)
      refuse(n, "its rotary needs a cos_cache of known width [positions, rotary_dim / 2]");
    const int64_t rotary_dim = 2 * cos_type->dims->back();
    if (rotary_dim > head_dim) refuse(n, "its rotary tables are wider than the head");
    return rotary_dim;
  }

  // RotaryEmbedding of x [b, s, heads x head_dim] viewed [b, s, heads, head_dim] (or [b,
  // heads, s, head_dim] when typed so): each head's first rotary_embedding_dim values rotated
  // with the rows gathered at position_ids [b, s] (none: the caches are the rows, [b, s,
  // rotary_dim / 2]). Without num_heads, whole heads of the tables' width are rotated.
  void rotary_embedding(nf::Node n, const std::string& x, const std::string& cos_cache, const std::string& sin_cache,
                        const std::string& positions) {
    label_ = std::string(n.name());
    if (n.attr_int("is_packed_batching", 0) != 0) refuse(n, "packed batching is not expanded");
    if (n.attr_float("scale", 1.f) != 1.f) refuse(n, "a scale other than 1 is not expanded");
    const std::string out = n.output(0);
    auto pos_type = get_value_type(g_, positions);  // untyped: [b, s] as the builder gives them
    if (pos_type && pos_type->dims && pos_type->dims->size() != 2)
      refuse(n, "its position_ids are not [batch, sequence] (a start offset is not expanded)");
    // The builder types x [b, s, hidden] when it types it at all: an untyped x is read so.
    auto x_type = get_value_type(g_, x);
    const bool heads_first = x_type && x_type->dims && x_type->dims->size() == 4;
    const int64_t last = x_type && x_type->dims && !x_type->dims->empty() ? x_type->dims->back() : -1;
    const int64_t heads = n.attr_int("num_heads", 0);
    const int64_t rotary_dim = table_rotary_dim(n, cos_cache, last > 0 && (heads_first || heads == 0) ? last : std::numeric_limits<int64_t>::max());
    const int64_t given = n.attr_int("rotary_embedding_dim", 0);
    if (given > 0 && given != rotary_dim) refuse(n, "its rotary_embedding_dim differs from its tables' width");
    if (heads > 0 && last > 0 && !heads_first && last % heads != 0) refuse(n, "its num_heads do not divide its input's width");
    // The head's width: the input's last axis, hidden / num_heads, the tables' width (no
    // num_heads), or unknown (-1: the values past the rotary part are kept whatever their count).
    const int64_t head_dim = heads_first ? last : heads == 0 ? rotary_dim : last > 0 ? last / heads : -1;
    const bool interleaved = n.attr_int("interleaved", 0) != 0;
    g_.remove_node(n);
    auto [cos, sin] = positions.empty() ? std::pair{cos_cache, sin_cache} : rotary_rows(cos_cache, sin_cache, positions, interleaved);
    if (positions.empty() && !interleaved) {  // [b, s, rotary_dim / 2]: each half's rows twice
      cos = concat_last({cos, cos}, "cos");
      sin = concat_last({sin, sin}, "sin");
    }
    const int64_t row_axis = heads_first ? 1 : 2;  // the heads' axis in the rows' view
    std::string view = heads_first ? x
                                   : value("Reshape", {x, ints({0, 0, heads > 0 ? heads : -1, heads > 0 ? -1 : head_dim},
                                                               "heads_shape")},
                                           "heads");
    std::string rotated = rotate(view, head_dim, rotary_dim, unsqueeze(cos, {row_axis}, "cos_heads"),
                                 unsqueeze(sin, {row_axis}, "sin_heads"), "x", interleaved);
    if (heads_first) {
      value("Identity", {rotated}, "output", out);
      return;
    }
    value("Reshape", {rotated, value("Shape", {x}, "input_shape")}, "merged", out);
    if (head_dim > 0) rotated_heads_[out] = {rotated, head_dim};
  }

  // opset 23's Attention; see the file's comment.
  void attention(nf::Node n) {
    label_ = std::string(n.name());
    if (n.attr_int("is_causal", 0) != 0)
      refuse(n, "is_causal (a causal mask aligned to the cache's start) is not expanded; export with the attention mask");
    if (!n.input(6).empty()) refuse(n, "its nonpad_kv_seqlen input is not expanded");
    if (n.output_count() > 3 && !n.output(3).empty() && view_.is_used(n.output(3))) refuse(n, "its qk_matmul_output is read");
    if (n.input(4).empty() != n.input(5).empty()) refuse(n, "it has a past key without a past value, or the reverse");
    const std::string q = n.input(0), k = n.input(1), v = n.input(2), mask = n.input(3), past_key = n.input(4),
                      past_value = n.input(5);
    auto q_type = get_value_type(g_, q), k_type = get_value_type(g_, k);
    const size_t rank = q_type && q_type->dims ? q_type->dims->size() : 0;
    int64_t heads = n.attr_int("q_num_heads", 0), kv_heads = n.attr_int("kv_num_heads", 0), head_dim = -1;
    if (rank == 4) {
      heads = heads > 0 ? heads : (*q_type->dims)[1];
      head_dim = (*q_type->dims)[3];
      if (kv_heads <= 0 && k_type && k_type->dims && k_type->dims->size() == 4) kv_heads = (*k_type->dims)[1];
    } else if (rank == 3 && heads > 0 && kv_heads > 0 && (*q_type->dims)[2] > 0) {
      head_dim = (*q_type->dims)[2] / heads;
    } else {
      refuse(n, "its query is neither [batch, heads, sequence, head_size] nor [batch, sequence, hidden] with "
                "q_num_heads and kv_num_heads");
    }
    if (heads <= 0 || head_dim <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
      refuse(n, "its heads (" + std::to_string(heads) + " over " + std::to_string(kv_heads) + ") and head size (" +
                    std::to_string(head_dim) + ") are not known or do not group");
    float scale = n.attr_float("scale", 0.f);
    if (scale == 0.f) scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    const float softcap = n.attr_float("softcap", 0.f);
    std::vector<std::string> outs = n.outputs();
    outs.resize(3);
    g_.remove_node(n);

    const std::string q4 = rank == 4 ? q : heads_first(q, heads, head_dim, "q");
    const std::string k4 = rank == 4 ? k : heads_first(k, kv_heads, head_dim, "k");
    const std::string v4 = rank == 4 ? v : heads_first(v, kv_heads, head_dim, "v");
    auto bias = [&]() -> std::string {
      auto mask_type = get_value_type(g_, mask);
      if (mask.empty() || !mask_type || mask_type->dtype != NF_DTYPE_BOOL) return mask;
      return value("Where", {mask, scalar(NF_DTYPE_FLOAT32, 0.0, "open"),  // as torch exports SDPA's boolean mask
                             scalar(NF_DTYPE_FLOAT32, std::numeric_limits<float>::lowest(), "closed")},
                   "mask");
    };
    const std::string keys = append_rows(past_key, k4, outs[1], "present_key");  // in this order: node order and names
    const std::string values = append_rows(past_value, v4, outs[2], "present_value");
    const std::string context =
        attend(q4, keys, values, heads, kv_heads, head_dim, scale, softcap, bias, rank == 4 ? outs[0] : "");
    if (rank == 3) merge_heads(context, heads, head_dim, outs[0]);
  }

  void group_query_attention(nf::Node n) {
    label_ = std::string(n.name());
    const int64_t heads = n.attr_int("num_heads", 0), kv_heads = n.attr_int("kv_num_heads", 0);
    if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
      refuse(n, "num_heads " + std::to_string(heads) + " and kv_num_heads " + std::to_string(kv_heads) +
                    " do not group");
    if (n.attr_int("smooth_softmax", 0) != 0) refuse(n, "smooth_softmax is not expanded");
    for (size_t i : {size_t{9}, size_t{10}, size_t{11}})
      if (!n.input(i).empty())
        refuse(n, std::string("its ") + (i == 9 ? "position_ids" : i == 10 ? "attention_bias" : "head sink") +
                      " input is not expanded");
    for (size_t i = 3; i < n.output_count(); ++i)
      if (!n.output(i).empty() && view_.is_used(n.output(i))) refuse(n, "its attention-score output is read");
    const std::string query = n.input(0), past_key = n.input(3), past_value = n.input(4);
    if (past_key.empty() || past_value.empty()) refuse(n, "without past_key / past_value (no KV cache) it is not expanded");
    auto past_type = get_value_type(g_, past_key);
    const int64_t head_dim = past_type && past_type->dims && past_type->dims->size() == 4 ? (*past_type->dims)[3] : -1;
    if (head_dim <= 0) refuse(n, "the head size is not known from '" + past_key + "' [batch, kv_heads, past, head_size]");
    const bool rotary = n.attr_int("do_rotary", 0) != 0, interleaved = n.attr_int("rotary_interleaved", 0) != 0;
    const int64_t rotary_dim = rotary ? table_rotary_dim(n, n.input(7), head_dim) : head_dim;
    float scale = n.attr_float("scale", 0.f);
    if (scale == 0.f) scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    const float softcap = n.attr_float("softcap", 0.f);
    const int64_t window = std::max<int64_t>(n.attr_int("local_window_size", -1), 0);
    std::string key = n.input(1), val = n.input(2);
    const std::string cos_cache = n.input(7), sin_cache = n.input(8);
    std::vector<std::string> outs = n.outputs();
    outs.resize(3);
    g_.remove_node(n);

    std::string q = query;
    if (key.empty()) {  // packed [b, s, (heads + 2 kv_heads) head_dim]
      q = names_.make(label_ + "/query"), key = names_.make(label_ + "/key"), val = names_.make(label_ + "/value");
      const std::string name = names_.make(label_ + "/Split");
      const Dims widths{heads * head_dim, kv_heads * head_dim, kv_heads * head_dim};
      nf::Node split = opset_ >= 13 ? g_.add_node("Split", {query, ints(widths, "split")}, {q, key, val}, name)
                                    : g_.add_node("Split", {query}, {q, key, val}, name);
      if (opset_ < 13) split.set_attr("split", widths);
      split.set_attr("axis", int64_t{-1});
    }
    std::string q4 = heads_first(q, heads, head_dim, "q");
    std::string k4 = heads_first(key, kv_heads, head_dim, "k");
    std::string v4 = heads_first(val, kv_heads, head_dim, "v");
    positions(past_key, query);
    if (rotary) {
      auto [cos, sin] = rotary_rows(cos_cache, sin_cache, positions_, interleaved);
      q4 = rotate(q4, head_dim, rotary_dim, cos, sin, "q", interleaved);
      k4 = rotate(k4, head_dim, rotary_dim, cos, sin, "k", interleaved);
    }
    const std::string keys = append_rows(past_key, k4, outs[1], "present_key");  // in this order: node order and names
    const std::string values = append_rows(past_value, v4, outs[2], "present_value");
    const std::string context =
        attend(q4, keys, values, heads, kv_heads, head_dim, scale, softcap, [&] { return mask(window, n); });
    merge_heads(context, heads, head_dim, outs[0]);
  }
};

}  // namespace

size_t expand_microsoft_ops(nf::Graph g) {
  for (const nf::Node& n : g.nodes())
    if (contrib_op(n) != Contrib::kNone) return Expander(g).run();  // the view and names only then
  return 0;
}

}  // namespace nf::graph
