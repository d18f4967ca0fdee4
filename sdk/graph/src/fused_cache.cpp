// transformers < 4.54 wrote GPT-BigCode's multi-query attention as
//   key_value = Concat(past_key_values.N.key_value [b, t, 2 hd], c_attn's new [b, s, 2 hd], axis -2)
//   key, value = Split(key_value, [hd, hd], axis -1)            (present.N.key_value = key_value)
//   scores [b, s * heads, t] = MatMul(Reshape(query), Transpose(key)), viewed [b, s, heads, t]
//   Softmax(Where(mask [b, s, 1, t], scores, min))
// Two rewrites give the form of transformers >= 4.54 (what every stage and backend reads), with
// the same numbers:
// - the cache: inputs past_key_values.N.key / .value [b, 1, t, hd] (one KV head), each
//   appended to its half of the new rows along axis 2 into present.N.key / .value;
// - the attention on heads: q [b, heads, s, hd], scores broadcast over the one KV head, the
//   boolean mask made additive and added, heads merged back after the value MatMul.
#include "npuforge/graph/fused_cache.h"

#include <npuforge/decoder_io.hpp>

#include "npuforge/graph/eliminate_dead_nodes.h"
#include "npuforge/graph/graph_view.h"
#include "npuforge/graph/unique_names.h"
#include "npuforge/graph/value_types.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <regex>

namespace nf::graph {
namespace {

using Dims = std::vector<int64_t>;

struct Builder {
  explicit Builder(nf::Graph graph) : g(graph), names(graph) {}
  nf::Graph g;
  UniqueNames names;

  std::string ints(const Dims& v, const std::string& base) {
    const std::string name = names.make(base);
    set_int64_initializer(g, name, v);
    return name;
  }
  std::string zero_like(nf_dtype dtype, const std::string& base) {
    const std::string name = names.make(base);
    nf::Tensor t = nf::Tensor::create(dtype, Dims{});
    std::memset(t.mutable_data(), 0, t.nbytes());
    g.set_initializer(name, t);
    return name;
  }
  nf::Node add(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
               const std::string& label) {
    return g.add_node(op, in, out, names.make("/fused_cache/" + label));
  }
  std::string value(const std::string& base) { return names.make(base); }
};

// GraphView::replace_uses without its refresh: the callers iterate the view's consumer lists,
// and the view is refreshed once after every layer is rewritten.
void replace_uses(GraphView& view, const std::string& from, const std::string& to) {
  for (nf::Node user : view.consumers(from))
    for (size_t i = 0; i < user.input_count(); ++i)
      if (user.input(i) == from) user.set_input(i, to);
}

// The new rows [b, s, 2 hd] cut into key and value. When they are themselves a cut of the
// projection's columns (c_attn's [E, 2 hd] Split), one Split of the projection gives all three,
// so that each half is a column cut of the projection, as mha2sha finds heads. Returns the
// width of the projection's other columns (the queries, E), or 0 when there is no such cut.
int64_t split_new_rows(const GraphView& view, Builder& b, const std::string& fresh, int64_t hd,
                       const std::string& key, const std::string& value, const std::string& layer) {
  auto cut = view.producer(fresh);
  std::vector<int64_t> sizes;
  if (cut && cut->op_type() == "Split")
    sizes = cut->input_count() > 1 ? view.constant_ints(cut->input(1)) : cut->attr_ints("split");
  const int64_t axis = cut ? cut->attr_int("axis", 0) : 0;
  if (cut && !sizes.empty() && sizes.size() == cut->output_count() && (axis == 2 || axis == -1)) {
    std::vector<int64_t> joined;
    std::vector<std::string> outs;
    int64_t others = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (cut->output(i) == fresh) {
        joined.insert(joined.end(), {hd, hd});
        outs.insert(outs.end(), {key, value});
      } else {
        joined.push_back(sizes[i]);
        outs.push_back(cut->output(i));
        others += sizes[i];
      }
    }
    const std::string input = cut->input(0);
    b.g.remove_node(*cut);
    b.add("Split", {input, b.ints(joined, fresh + ".columns")}, outs, "split_columns_" + layer).set_attr("axis", axis);
    return others;
  }
  b.add("Split", {fresh, b.ints({hd, hd}, fresh + ".halves")}, {key, value}, "split_new_" + layer)
      .set_attr("axis", int64_t{-1});
  return 0;
}

// The cache of one layer: past input `fused` -> pairs.
// Returns the head_dim; `query_width` gets the queries' columns when the projection shows them.
int64_t split_layer(GraphView& view, Builder& b, const std::string& fused, int64_t layer,
                    std::map<std::string, std::vector<std::string>>& renamed, int64_t& query_width) {
  auto t = get_value_type(b.g, fused);
  if (!t || !t->dims || t->dims->size() != 3 || (*t->dims)[2] <= 0 || (*t->dims)[2] % 2)
    throw nf::Error("'" + fused + "' is not [batch, past, 2 x head_dim] (a fused multi-query cache); only "
                    "GPT-BigCode's multi-query fused cache is read: re-export with transformers >= 4.54 for pairs");
  const int64_t hd = (*t->dims)[2] / 2;
  const std::string present = "present." + std::to_string(layer) + ".key_value";
  std::optional<nf::Node> concat;
  for (const nf::Node& u : view.consumers(fused))
    if (u.op_type() == "Concat") concat = u;
  const int64_t axis = concat ? concat->attr_int("axis", 0) : 0;
  if (!concat || concat->input_count() != 2 || (axis != 1 && axis != -2) || concat->output(0) != present)
    throw nf::Error("'" + fused + "' should be appended to by one Concat along the sequence axis into '" + present +
                    "'");
  const std::string fresh = concat->input(concat->input(0) == fused ? 1 : 0);
  const std::string pk = nf::decoder::past_key(layer), pv = nf::decoder::past_value(layer);
  const std::string ck = nf::decoder::present_key(layer), cv = nf::decoder::present_value(layer);
  const std::string head_axis = b.ints({1}, fused + ".head_axis");
  const std::string nk = b.value(fresh + ".key"), nv = b.value(fresh + ".value");
  query_width = split_new_rows(view, b, fresh, hd, nk, nv, std::to_string(layer));
  // One KV head, viewed and transposed as every other family writes it: [b, s, hd] -> [b, 1, s, hd].
  const std::string nk4 = b.value(nk + ".head"), nv4 = b.value(nv + ".head");
  const std::string one_head = b.ints({0, 0, 1, hd}, fused + ".one_head");
  for (const auto& [rows, head] : {std::pair{nk, nk4}, std::pair{nv, nv4}}) {
    const std::string viewed = b.value(head + ".view");
    b.add("Reshape", {rows, one_head}, {viewed}, "new_head_view_" + std::to_string(layer));
    b.add("Transpose", {viewed}, {head}, "new_head_" + std::to_string(layer)).set_attr("perm", std::vector<int64_t>{0, 2, 1, 3});
  }
  b.add("Concat", {pk, nk4}, {ck}, "key_" + std::to_string(layer)).set_attr("axis", int64_t{2});
  b.add("Concat", {pv, nv4}, {cv}, "value_" + std::to_string(layer)).set_attr("axis", int64_t{2});
  const std::string k3 = b.value(ck + ".rows"), v3 = b.value(cv + ".rows");
  b.add("Squeeze", {ck, head_axis}, {k3}, "key_rows_" + std::to_string(layer));
  b.add("Squeeze", {cv, head_axis}, {v3}, "value_rows_" + std::to_string(layer));
  // The layer's Split of the fused value reads the halves directly; anything else (a Shape)
  // reads them fused again.
  std::string fused_again;
  for (nf::Node u : view.consumers(present)) {
    std::vector<int64_t> sizes = u.input_count() > 1 ? view.constant_ints(u.input(1)) : u.attr_ints("split");
    if (u.op_type() == "Split" && u.output_count() == 2 && (u.attr_int("axis", 0) == -1 || u.attr_int("axis", 0) == 2) &&
        sizes == std::vector<int64_t>{hd, hd}) {
      replace_uses(view, u.output(0), k3);
      replace_uses(view, u.output(1), v3);
      b.g.remove_node(u);
      continue;
    }
    if (fused_again.empty()) {
      fused_again = b.value(present + ".rows");
      b.add("Concat", {k3, v3}, {fused_again}, "fused_" + std::to_string(layer)).set_attr("axis", int64_t{-1});
    }
    for (size_t i = 0; i < u.input_count(); ++i)
      if (u.input(i) == present) u.set_input(i, fused_again);
  }
  b.g.remove_node(*concat);
  const int64_t batch = (*t->dims)[0], past = (*t->dims)[1];
  set_value_type(b.g, pk, t->dtype, {batch, 1, past, hd});
  set_value_type(b.g, pv, t->dtype, {batch, 1, past, hd});
  set_value_type(b.g, ck, t->dtype, {batch, 1, -1, hd});
  set_value_type(b.g, cv, t->dtype, {batch, 1, -1, hd});
  renamed[fused] = {pk, pv};
  renamed[present] = {ck, cv};
  return hd;
}

// Whether `v` is all zeros by construction: ConstantOfShape of value 0 (its default), or such
// a value times a constant.
bool made_of_zeros(const GraphView& view, const std::string& v) {
  auto p = view.producer(v);
  if (!p) return false;
  if (p->op_type() == "Mul" && p->input_count() == 2)
    return made_of_zeros(view, p->input(0)) || made_of_zeros(view, p->input(1));
  if (p->op_type() != "ConstantOfShape") return false;
  nf::Tensor value = p->has_attr("value") ? p->attr_tensor("value") : nf::Tensor();
  if (!value) return true;
  const auto* bytes = value.data_as<unsigned char>();
  return std::all_of(bytes, bytes + value.nbytes(), [](unsigned char c) { return c == 0; });
}

bool is_constant(const GraphView& view, const std::string& v) {
  auto p = view.producer(v);
  return view.is_initializer(v) || (p && p->op_type() == "Constant");
}

// One legacy attention, from its Softmax: Where(Unsqueeze(mask, [2]), Reshape(scale(MatMul(
// Reshape(q), Transpose(Squeeze(key))) [+ 0])), min) -> Softmax -> Reshape -> MatMul(.,
// Squeeze(value)) -> Reshape to [b, s, E]. Rewritten on heads: q viewed [b, heads, s, hd], the
// scores MatMul(q, Transpose(key [b, 1, t, hd])) broadcast over the heads, the same scaling,
// the mask made additive ([b, 1, s, t]) and added, Softmax, MatMul with value [b, 1, t, hd],
// the heads merged back to [b, s, E]. False when the ops around `softmax` are not that.
bool heads_first(GraphView& view, Builder& b, const nf::Node& softmax, int64_t heads, int64_t hd) {
  auto where = view.producer(softmax.input(0));
  if (!where || where->op_type() != "Where" || where->input_count() != 3) return false;
  auto cond = view.producer(where->input(0));
  auto view_heads = view.producer(where->input(1));
  if (!cond || cond->op_type() != "Unsqueeze" || view.constant_ints(cond->input(1)) != std::vector<int64_t>{2} ||
      !view_heads || view_heads->op_type() != "Reshape")
    return false;
  // Back from the scores' view to the MatMul: the scaling (by a constant) and baddbmm's + 0.
  std::vector<nf::Node> scaling;
  std::optional<nf::Node> op = view.producer(view_heads->input(0));
  while (op && op->op_type() != "MatMul") {
    const bool plus_zero = op->op_type() == "Add" && (made_of_zeros(view, op->input(0)) || made_of_zeros(view, op->input(1)));
    const bool scale = (op->op_type() == "Mul" || op->op_type() == "Div") && is_constant(view, op->input(1));
    if (!plus_zero && !scale) return false;
    if (scale) scaling.insert(scaling.begin(), *op);
    op = view.producer(plus_zero && made_of_zeros(view, op->input(0)) ? op->input(1) : op->input(0));
  }
  if (!op) return false;
  auto rows_q = view.producer(op->input(0)), key_t = view.producer(op->input(1));
  auto key3 = key_t ? view.producer(key_t->input(0)) : std::nullopt;
  const auto& after = view.consumers(softmax.output(0));
  if (!rows_q || rows_q->op_type() != "Reshape" || !key_t || key_t->op_type() != "Transpose" || !key3 ||
      key3->op_type() != "Squeeze" || after.size() != 1 || after[0].op_type() != "Reshape")
    return false;
  const auto& pv = view.consumers(after[0].output(0));
  if (pv.size() != 1 || pv[0].op_type() != "MatMul" || pv[0].input(0) != after[0].output(0)) return false;
  auto value3 = view.producer(pv[0].input(1));
  const auto& merge = view.consumers(pv[0].output(0));
  if (!value3 || value3->op_type() != "Squeeze" || merge.size() != 1 || merge[0].op_type() != "Reshape") return false;
  nf_dtype min_dtype = NF_DTYPE_UNDEFINED;  // the mask value's: its type, or the Constant torch writes
  if (auto t = get_value_type(b.g, where->input(2))) min_dtype = t->dtype;
  else if (auto c = view.producer(where->input(2)); c && c->op_type() == "Constant") min_dtype = c->attr_tensor("value").dtype();
  if (min_dtype == NF_DTYPE_UNDEFINED) return false;

  const std::vector<int64_t> swap{0, 2, 1, 3};
  const std::string q = rows_q->input(0), q4 = b.value(q + ".heads"), qh = b.value(q4 + ".first");
  b.add("Reshape", {q, b.ints({0, 0, heads, hd}, "fused_cache.heads_shape")}, {q4}, "q_heads");
  b.add("Transpose", {q4}, {qh}, "q_heads_first").set_attr("perm", swap);
  const std::string kt = b.value(key3->input(0) + ".t");
  b.add("Transpose", {key3->input(0)}, {kt}, "key_t").set_attr("perm", std::vector<int64_t>{0, 1, 3, 2});
  std::string scores = b.value(std::string(softmax.name()) + ".scores");
  b.add("MatMul", {qh, kt}, {scores}, "scores");
  for (const nf::Node& s : scaling) {
    const std::string scaled = b.value(scores + ".scaled");
    b.add(std::string(s.op_type()), {scores, s.input(1)}, {scaled}, "scale");
    scores = scaled;
  }
  const std::string additive = b.value(where->input(0) + ".additive"), mask = b.value(additive + ".heads_first");
  b.add("Where", {where->input(0), b.zero_like(min_dtype, "fused_cache.zero"), where->input(2)}, {additive}, "mask");
  b.add("Transpose", {additive}, {mask}, "mask_heads_first").set_attr("perm", swap);
  const std::string masked = b.value(scores + ".masked"), probs = b.value(scores + ".probs");
  b.add("Add", {scores, mask}, {masked}, "masked");
  b.add("Softmax", {masked}, {probs}, "softmax").set_attr("axis", int64_t{-1});
  const std::string out = b.value(probs + ".out"), rows = b.value(out + ".rows");
  b.add("MatMul", {probs, value3->input(0)}, {out}, "attend");
  b.add("Transpose", {out}, {rows}, "rows_first").set_attr("perm", swap);
  const nf::Node merged = merge[0];
  const std::string result = merged.output(0);
  b.g.remove_node(merged);
  b.add("Reshape", {rows, b.ints({0, 0, heads * hd}, "fused_cache.merge_shape")}, {result}, "merge_heads");
  return true;
}

}  // namespace

int64_t fused_cache_layer(const std::string& name) {
  static const std::regex fused(R"(^past_key_values\.(\d+)\.key_value$)");
  std::smatch m;
  return std::regex_match(name, m, fused) ? std::stoll(m[1]) : -1;
}

int64_t split_fused_caches(nf::Graph g, int64_t heads) {
  GraphView view(g);
  Builder b(g);
  std::map<std::string, std::vector<std::string>> renamed;  // fused IO -> its pair, in place
  int64_t hd = 0, query_width = 0;
  for (const std::string& in : g.inputs())
    if (int64_t layer = fused_cache_layer(in); layer >= 0) hd = split_layer(view, b, in, layer, renamed, query_width);
  if (renamed.empty()) return 0;
  if (query_width > 0 && query_width % hd == 0) heads = query_width / hd;  // the projection says it
  if (heads <= 0)
    throw nf::Error("cannot tell the query heads of the fused-cache attention: no num_attention_heads (n_head) in "
                    "config.json and no query columns cut from the projection");
  view.refresh();
  std::vector<nf::Node> softmaxes;
  for (const nf::Node& n : view.nodes())
    if (n.op_type() == "Softmax") softmaxes.push_back(n);
  const int64_t layers = static_cast<int64_t>(renamed.size() / 2);
  int64_t rewritten = 0;
  for (const nf::Node& softmax : softmaxes) rewritten += heads_first(view, b, softmax, heads, hd);
  if (rewritten != layers)
    throw nf::Error(std::to_string(layers) + " fused-cache layers but " + std::to_string(rewritten) +
                    " attentions of GPT-BigCode's legacy form (heads folded into the rows, the mask by Where)");
  auto in_place = [&](const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const std::string& n : names) {
      auto it = renamed.find(n);
      if (it == renamed.end()) out.push_back(n);
      else out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return out;
  };
  g.set_inputs(in_place(g.inputs()));
  g.set_outputs(in_place(g.outputs()));
  eliminate_dead_nodes(g);
  g.sort();
  return layers;
}

}  // namespace nf::graph
