// `npuforge inspect`: what a decoder graph is, from names and shapes real exporters write.
//
// parameters / parameter_bytes: numeric initializers (a tied head's transposed copy counted
// once in parameters, its bytes in parameter_bytes; a MatMulNBits weight as its K x N, a
// GatherBlockQuantized table as its rows x values). layers: distinct N in
// past_key_values.N / present.N, else in name prefixes like /model/layers.N/. kv_heads and
// head_dim from KV input shapes [batch, kv_heads, past, head_dim]; heads from an attention
// op's num_heads, else from the query projection found by structure (query_projection),
// its output size / head_dim; by the projection's name only when the structure is not found.
#include "onnx/internal.h"

#include <cctype>
#include <cstdio>
#include <set>
#include <sstream>
#include <tuple>

using nlohmann::json;

namespace nf::onnx_io {

namespace {

bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

bool is_kv_input(const std::string& n) {
  return starts_with(n, "past_key_values") || starts_with(n, "past_key") || starts_with(n, "past_value") ||
         starts_with(n, "past.");
}
bool is_kv_output(const std::string& n) { return starts_with(n, "present"); }

// Numbers that follow any of `keys` and a '.', '_' or '/' in s (e.g. "layers.12/" -> 12).
void collect_indices(const std::string& s, std::initializer_list<std::string_view> keys, std::set<int64_t>& out) {
  for (auto key : keys) {
    for (size_t pos = s.find(key); pos != std::string::npos; pos = s.find(key, pos + 1)) {
      // The key must start a name component.
      if (pos > 0 && std::isalnum(static_cast<unsigned char>(s[pos - 1]))) continue;
      size_t i = pos + key.size();
      if (i >= s.size() || (s[i] != '.' && s[i] != '_' && s[i] != '/')) continue;
      size_t j = ++i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])) && j - i < 9) ++j;
      if (j == i || (j < s.size() && std::isalnum(static_cast<unsigned char>(s[j])))) continue;
      out.insert(std::stoll(s.substr(i, j - i)));
    }
  }
}

json shape_json(const ir::ValueType* vt) {
  if (!vt || !vt->shape) return nullptr;
  json s = json::array();
  for (const auto& d : *vt->shape) {
    if (d.value >= 0) s.push_back(d.value);
    else s.push_back(d.param.empty() ? "?" : d.param);
  }
  return s;
}

json value_json(const ir::Graph& g, const std::string& name) {
  auto it = g.types.find(name);
  const ir::ValueType* vt = it == g.types.end() ? nullptr : &it->second;
  return {{"name", name}, {"dtype", ir::dtype_name(vt ? vt->dtype : NF_DTYPE_UNDEFINED)}, {"shape", shape_json(vt)}};
}

// Output features of a linear layer's weight, given how the node uses it.
int64_t linear_out_features(const ir::Node& n, const ir::Tensor& w) {
  if (w.dims.size() < 2) return -1;
  if (n.op_type == "MatMul") return w.dims.back();
  if (n.op_type == "Gemm") {
    auto it = n.attrs.find("transB");
    return (it != n.attrs.end() && it->second.i) ? w.dims[0] : w.dims[1];
  }
  return w.dims[0];  // Conv and torch layout [out, in]
}

// A linear layer's constant weight: an initializer, or one behind Transpose / Cast (torch's
// dynamo exporter keeps [out, in] weights behind a Transpose).
const ir::Tensor* linear_weight(const ir::Graph& g, const std::map<std::string, const ir::Node*>& producer,
                                const ir::Node& n, bool* transposed) {
  *transposed = false;
  if (n.inputs.size() < 2) return nullptr;
  std::string v = n.inputs[1];
  for (int hops = 0; hops < 3; ++hops) {
    if (const ir::Tensor* w = g.initializer(v)) return w;
    auto it = producer.find(v);
    if (it == producer.end() || (it->second->op_type != "Transpose" && it->second->op_type != "Cast") ||
        it->second->inputs.empty())
      return nullptr;
    *transposed ^= it->second->op_type == "Transpose";
    v = it->second->inputs[0];
  }
  return nullptr;
}

// The nodes that produce `from` and its inputs, nearest first, at most `limit`, not entering
// graph inputs that `stop` accepts.
template <class Stop>
std::vector<const ir::Node*> upstream(const std::map<std::string, const ir::Node*>& producer, const std::string& from,
                                      size_t limit, Stop stop, bool* reached_stop = nullptr) {
  std::vector<const ir::Node*> order;
  std::set<const ir::Node*> seen;
  std::vector<std::string> frontier = {from};
  for (size_t head = 0; head < frontier.size() && order.size() < limit; ++head) {
    if (stop(frontier[head])) {
      if (reached_stop) *reached_stop = true;
      continue;
    }
    auto it = producer.find(frontier[head]);
    if (it == producer.end() || !seen.insert(it->second).second) continue;
    order.push_back(it->second);
    if (it->second->op_type == "Shape" || it->second->op_type == "Size") continue;  // no data flows through
    for (const auto& in : it->second->inputs) frontier.push_back(in);
  }
  return order;
}

// ONNX's Attention and ONNX Runtime's fused attention ops.
bool is_fused_attention(const ir::Node& n) {
  return n.op_type == "Attention" || n.op_type == "MultiHeadAttention" || n.op_type == "GroupQueryAttention";
}

// (output features, fused qkv?) of the query projection, found by what the graph computes:
// the query of a fused attention op, or the scores MatMul before a Softmax (through the mask
// add, scaling, soft cap) and its operand that does not come from the KV cache; then the
// nearest linear layer above it whose output is whole heads. Fused when the key rows come
// from the same layer. {-1, false} if not found.
std::pair<int64_t, bool> query_projection(const ir::Graph& g, int64_t head_dim) {
  std::map<std::string, const ir::Node*> producer;
  for (const auto& n : g.nodes)
    for (const auto& o : n->outputs) producer[o] = n.get();
  auto is_cache = [](const std::string& v) { return is_kv_input(v); };
  auto never = [](const std::string&) { return false; };
  auto projection_above = [&](const std::string& v) -> std::pair<const ir::Node*, int64_t> {
    for (const ir::Node* n : upstream(producer, v, 256, is_cache)) {
      int64_t out = -1;
      if (n->op_type == "MatMulNBits") {  // ONNX Runtime's int4 linear: N output features
        if (auto a = n->attrs.find("N"); a != n->attrs.end()) out = a->second.i;
      } else if (n->op_type == "MatMul" || n->op_type == "Gemm") {
        bool transposed = false;
        const ir::Tensor* w = linear_weight(g, producer, *n, &transposed);
        if (!w || w->dims.size() != 2) continue;
        out = transposed && n->op_type == "MatMul" ? w->dims[0] : linear_out_features(*n, *w);
      }
      if (out >= head_dim && out % head_dim == 0) return {n, out};
    }
    return {nullptr, -1};
  };
  // A fused attention op (ONNX's Attention, ONNX Runtime's) takes the query as its input 0
  // and the key as input 1 (none: packed with the query).
  for (const auto& a : g.nodes) {
    if (!is_fused_attention(*a) || a->inputs.empty()) continue;
    auto [q, q_out] = projection_above(a->inputs[0]);
    if (!q) break;
    return {q_out, a->inputs.size() < 2 || a->inputs[1].empty() || projection_above(a->inputs[1]).first == q};
  }
  for (const auto& sm : g.nodes) {
    if (sm->op_type != "Softmax" || sm->inputs.empty()) continue;
    // The scores: the nearest MatMul of two activations, one of them from the cache (the
    // rotary tables' MatMul above the query reads no cache).
    for (const ir::Node* scores : upstream(producer, sm->inputs[0], 256, never)) {
      if (scores->op_type != "MatMul" || scores->inputs.size() != 2 || g.initializer(scores->inputs[1])) continue;
      bool from_cache[2] = {false, false};
      for (int i = 0; i < 2; ++i) upstream(producer, scores->inputs[i], 256, is_cache, &from_cache[i]);
      if (from_cache[0] == from_cache[1]) continue;
      const std::string& query = scores->inputs[from_cache[0] ? 1 : 0];
      const std::string& key = scores->inputs[from_cache[0] ? 0 : 1];
      auto [q, q_out] = projection_above(query);
      if (!q) break;
      return {q_out, projection_above(key).first == q};
    }
  }
  return {-1, false};
}

// num_heads of a fused attention op (onnxruntime's contrib ops, ONNX's opset-23 Attention), or -1.
int64_t attention_op_heads(const ir::Graph& g) {
  for (const auto& n : g.nodes) {
    if (!is_fused_attention(*n)) continue;
    for (const char* key : {"num_heads", "q_num_heads"}) {
      auto it = n->attrs.find(key);
      if (it != n->attrs.end() && it->second.i > 0) return it->second.i;
    }
  }
  return -1;
}

// (output features, fused qkv?) of the first q projection found by name, or -1.
std::pair<int64_t, bool> q_projection_by_name(const ir::Graph& g) {
  // The fused projections' names: Phi-3 qkv_proj, GPT-NeoX / Falcon query_key_value, GPT-2
  // c_attn, Baichuan W_pack, MPT / DBRX Wqkv.
  const std::pair<const char*, bool> kinds[] = {{"q_proj", false}, {"qkv_proj", true}, {"query_key_value", true},
                                                {"c_attn", true}, {"W_pack", true}, {"Wqkv", true}};
  for (const auto& [key, fused] : kinds) {
    for (const auto& n : g.nodes) {
      if (n->name.find(key) == std::string::npos) continue;
      if (n->op_type != "MatMul" && n->op_type != "Gemm" && n->op_type != "Conv") continue;
      for (const auto& in : n->inputs)
        if (const ir::Tensor* w = g.initializer(in)) return {linear_out_features(*n, *w), fused};
    }
    for (const auto& [name, ref] : g.initializers)
      if (name.find(std::string(key) + ".weight") != std::string::npos && ref->tensor.dims.size() == 2)
        return {ref->tensor.dims[0], fused};
  }
  return {-1, false};
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > (v < 0 ? 1 : 0); i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string shape_text(const json& s) {
  if (s.is_null()) return "?";
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += s[i].is_string() ? s[i].get<std::string>() : std::to_string(s[i].get<int64_t>());
  }
  return r + "]";
}

}  // namespace

json inspect(const ir::Graph& g) {
  json r;
  uint64_t params = 0, bytes = 0;  // unsigned: sums of hostile sizes wrap instead of overflowing
  // MatMulNBits (ONNX Runtime's int4 weights): K x N parameters each, whatever their codes,
  // scales and zero points hold.
  // GatherBlockQuantized (a quantized table): rows x its codes' values; a table read through a
  // view of the head's codes (GenAI's shared embeddings) is counted with the head.
  std::set<std::string> packed;
  for (const auto& n : g.nodes) {
    auto attr = [&](const char* name, int64_t dflt) {
      auto a = n->attrs.find(name);
      return a == n->attrs.end() ? dflt : a->second.i;
    };
    if (n->op_type == "MatMulNBits") {
      if (attr("K", -1) <= 0 || attr("N", -1) <= 0) continue;
      params += static_cast<uint64_t>(attr("K", 0)) * static_cast<uint64_t>(attr("N", 0));
      for (size_t i = 1; i < std::min<size_t>(n->inputs.size(), 4); ++i) packed.insert(n->inputs[i]);
    } else if (n->op_type == "GatherBlockQuantized" && !n->inputs.empty()) {
      const ir::Tensor* codes = g.initializer(n->inputs[0]);
      const int64_t bits = attr("bits", 4);
      if (!codes || codes->dims.size() != 2 || (bits != 2 && bits != 4 && bits != 8)) continue;
      params += static_cast<uint64_t>(codes->numel()) * static_cast<uint64_t>(8 / bits);
      for (size_t i = 0; i < std::min<size_t>(n->inputs.size(), 4); ++i)
        if (i != 1) packed.insert(n->inputs[i]);
    }
  }
  for (const auto& [name, ref] : g.initializers) {
    const ir::Tensor& t = ref->tensor;
    if (t.dtype == NF_DTYPE_STRING || t.dtype == NF_DTYPE_BOOL || t.dtype == NF_DTYPE_UNDEFINED) continue;
    if (!packed.count(name)) params += static_cast<uint64_t>(t.numel());
    bytes += t.nbytes();
  }
  // A tied LM head that constant folding stored as a transposed copy of the embedding table
  // is one parameter to HF: counted once (the copy's size is reported beside).
  uint64_t copy = 0;
  for (const auto& n : g.nodes) {
    if (n->op_type != "Gather" || n->inputs.empty() || !g.initializers.count(n->inputs[0])) continue;
    const ir::Tensor& table = g.initializers.at(n->inputs[0])->tensor;
    if (table.dims.size() != 2) continue;
    for (const auto& [name, ref] : g.initializers)
      if (name != n->inputs[0] && ir::is_transpose_of(ref->tensor, table)) {
        copy = static_cast<uint64_t>(ref->tensor.numel());
        break;
      }
    if (copy) break;
  }
  r["parameters"] = params - copy;
  r["parameter_bytes"] = bytes;
  if (copy) r["tied_head_copy_parameters"] = copy;

  json kv_in = json::array(), kv_out = json::array(), inputs = json::array(), outputs = json::array();
  std::set<int64_t> kv_layers;
  for (const auto& name : g.inputs) {
    if (g.initializers.count(name)) continue;  // old exports list weights as inputs
    inputs.push_back(value_json(g, name));
    if (is_kv_input(name)) {
      kv_in.push_back(name);
      collect_indices(name, {"past_key_values", "past"}, kv_layers);
    }
  }
  for (const auto& name : g.outputs) {
    outputs.push_back(value_json(g, name));
    if (is_kv_output(name)) {
      kv_out.push_back(name);
      collect_indices(name, {"present"}, kv_layers);
    }
  }
  if (kv_layers.empty()) {
    for (const auto& n : g.nodes) collect_indices(n->name, {"layers", "layer", "h", "blocks"}, kv_layers);
    for (const auto& [name, _] : g.initializers) collect_indices(name, {"layers", "layer", "h", "blocks"}, kv_layers);
  }
  r["layers"] = kv_layers.size();

  // KV input [batch, kv_heads, past, head_dim] (HF layout), or GPT-BigCode's fused
  // multi-query cache [batch, past, 2 x head_dim] (transformers < 4.54).
  int64_t kv_heads = -1, head_dim = -1;
  for (const auto& name : kv_in) {
    auto it = g.types.find(name.get<std::string>());
    if (it == g.types.end() || !it->second.shape) continue;
    const auto& s = *it->second.shape;
    if (s.size() == 3 && s[2].value > 0 && s[2].value % 2 == 0 && s[2].value < (1 << 24)) {
      kv_heads = 1;
      head_dim = s[2].value / 2;
      break;
    }
    if (s.size() != 4) continue;
    // Plausible sizes only (this also keeps the arithmetic below far from overflow).
    if (s[1].value > 0 && s[3].value > 0 && s[1].value < (1 << 24) && s[3].value < (1 << 24)) {
      kv_heads = s[1].value;
      head_dim = s[3].value;
      break;
    }
  }
  if (kv_heads > 0) {
    r["kv_heads"] = kv_heads;
    r["head_dim"] = head_dim;
    auto [q_out, fused] = query_projection(g, head_dim);
    if (q_out < 0) std::tie(q_out, fused) = q_projection_by_name(g);
    if (int64_t heads = attention_op_heads(g); heads > 0) {
      r["heads"] = heads;
    } else if (q_out > 0 && q_out % head_dim == 0) {
      int64_t heads = q_out / head_dim - (fused ? 2 * kv_heads : 0);
      if (heads > 0) r["heads"] = heads;
    }
  }
  r["kv_inputs"] = kv_in;
  r["kv_outputs"] = kv_out;
  r["inputs"] = inputs;
  r["outputs"] = outputs;
  json opset = json::object();
  for (const auto& [domain, v] : g.opsets) opset[domain.empty() ? "ai.onnx" : domain] = v;
  r["opset"] = opset;
  std::map<std::string, int64_t> ops;
  for (const auto& n : g.nodes) ++ops[n->domain.empty() ? n->op_type : n->domain + "::" + n->op_type];
  r["ops"] = ops;
  r["nodes"] = g.nodes.size();
  return r;
}

std::string format_inspect(const json& info) {
  std::ostringstream o;
  auto row = [&](const std::string& k, const std::string& v) {
    o << "  " << k << std::string(k.size() < 16 ? 16 - k.size() : 1, ' ') << v << "\n";
  };
  auto num = [&](const char* k) { return info.contains(k) ? with_commas(info[k].get<int64_t>()) : std::string("?"); };
  o << "Model\n";
  row("parameters", num("parameters") + " (" + human_bytes(info.value("parameter_bytes", 0.0)) + ")" +
                        (info.contains("tied_head_copy_parameters")
                             ? "; the tied LM head is also stored transposed: " + num("tied_head_copy_parameters") + " more"
                             : ""));
  row("layers", num("layers"));
  if (info.contains("heads") || info.contains("kv_heads")) {
    row("heads", num("heads"));
    row("kv_heads", num("kv_heads"));
    row("head_dim", num("head_dim"));
  }
  row("nodes", num("nodes"));
  std::string opsets;
  if (info.contains("opset"))
    for (const auto& [d, v] : info["opset"].items()) opsets += (opsets.empty() ? "" : ", ") + d + " " + v.dump();
  row("opset", opsets.empty() ? "?" : opsets);

  auto values = [&](const char* title, const char* key) {
    if (!info.contains(key) || info[key].empty()) return;
    size_t w = 4, dw = 5;
    for (const auto& v : info[key]) {
      w = std::max(w, v.value("name", "").size());
      dw = std::max(dw, v.value("dtype", "").size());
    }
    o << title << "\n";
    for (const auto& v : info[key]) {
      std::string name = v.value("name", ""), dtype = v.value("dtype", "");
      o << "  " << name << std::string(w - name.size() + 2, ' ') << dtype << std::string(dw - dtype.size() + 2, ' ')
        << shape_text(v.contains("shape") ? v["shape"] : json()) << "\n";
    }
  };
  values("Inputs", "inputs");
  values("Outputs", "outputs");
  if (info.contains("ops") && !info["ops"].empty()) {
    // Most frequent first.
    std::vector<std::pair<int64_t, std::string>> ops;
    size_t w = 2;
    for (const auto& [op, n] : info["ops"].items()) {
      ops.emplace_back(-n.get<int64_t>(), op);
      w = std::max(w, op.size());
    }
    std::sort(ops.begin(), ops.end());
    o << "Ops\n";
    for (const auto& [n, op] : ops) o << "  " << op << std::string(w - op.size() + 2, ' ') << -n << "\n";
  }
  return o.str();
}

}  // namespace nf::onnx_io
