#include "model_info.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/linear_roles.h>
#include <npuforge/hf_config.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace nf::aries {

nlohmann::json ModelShape::to_json() const {
  return {{"layers", layers},     {"hidden", hidden},   {"heads", heads},
          {"kv_heads", kv_heads}, {"head_dim", head_dim}, {"intermediate", intermediate},
          {"vocab", vocab},       {"static_graph", static_graph}, {"kv_capacity", kv_capacity},
          {"max_rows", max_rows},     {"rows_per_call", rows_per_call}};
}

ModelShape ModelShape::from_json(const nlohmann::json& j) {
  ModelShape s;
  s.layers = j.at("layers");
  s.hidden = j.at("hidden");
  s.heads = j.at("heads");
  s.kv_heads = j.at("kv_heads");
  s.head_dim = j.at("head_dim");
  s.intermediate = j.at("intermediate");
  s.vocab = j.at("vocab");
  s.static_graph = j.at("static_graph");
  s.kv_capacity = j.at("kv_capacity");
  s.max_rows = j.at("max_rows");
  // Packages before rows_per_call was recorded know only the largest.
  if (j.contains("rows_per_call")) {
    s.rows_per_call = j["rows_per_call"].get<std::vector<int64_t>>();
    if (!std::is_sorted(s.rows_per_call.begin(), s.rows_per_call.end()) ||
        std::any_of(s.rows_per_call.begin(), s.rows_per_call.end(), [](int64_t r) { return r < 1; }))
      throw Error("aries backend: model.rows_per_call must be ascending positive row counts");
  } else if (s.max_rows > 0) {
    s.rows_per_call = {s.max_rows};
  }
  return s;
}

int64_t ModelShape::graph_rows_for(int64_t rows) const {
  for (int64_t r : rows_per_call)
    if (r >= rows) return r;
  return rows_per_call.empty() ? rows : rows_per_call.back();
}

namespace {

// Kind and block from what the linear does in the graph (npuforge::graph::linear_roles),
// whatever the exporter named it: a fused QKV projection is costed and quantized as the query.
void classify(Linear& l, const graph::LinearUse& u) {
  using graph::LinearRole;
  switch (u.role) {
    case LinearRole::query:
    case LinearRole::fused_qkv: l.kind = Kind::query; break;
    case LinearRole::key: l.kind = Kind::key; break;
    case LinearRole::value: l.kind = Kind::value; break;
    case LinearRole::attention_output: l.kind = Kind::output; break;
    case LinearRole::ffn_input:
    case LinearRole::ffn_down: l.kind = Kind::ffn; break;
    case LinearRole::lm_head: l.kind = Kind::head; break;
    default: l.kind = Kind::other;
  }
  l.ffn_down = u.role == LinearRole::ffn_down;
  l.block = u.block;
}

int64_t cfg_int(const nlohmann::json& cfg, const char* key, int64_t fallback) {
  return hf_config::get_int(cfg, key).value_or(fallback);
}

}  // namespace

std::vector<Graph> graphs_of(ModelSet ms, const std::string& role) {
  const nlohmann::json roles = ms.metadata(roles::kMetadataKey);
  std::vector<Graph> out;
  for (const Graph& g : ms.graphs())
    if (roles::role_of(roles, g.name()) == role) out.push_back(g);
  return out;
}

ModelInfo inspect(ModelSet ms, const std::string& role) {
  ModelInfo info;
  std::set<std::string> seen;
  const std::vector<Graph> graphs = graphs_of(ms, role);
  if (graphs.empty()) throw Error("aries backend: the model set has no graphs of role '" + role + "'");
  for (const Graph& g : graphs) {
    const std::map<std::string, graph::LinearUse> roles = graph::linear_roles(g);
    std::set<std::string> inits;
    for (auto& n : g.initializer_names()) inits.insert(n);
    std::map<std::string, Node> producer;
    for (const Node& n : g.nodes())
      for (auto& o : n.outputs()) producer.emplace(o, n);
    for (const Node& node : g.nodes()) {
      if (node.op_type() != "MatMul" && node.op_type() != "Gemm") continue;
      Linear l;
      l.node = std::string(node.name());
      l.input = node.input(0);
      l.output = node.output(0);
      std::string b = node.input(1);
      bool gemm = node.op_type() == "Gemm";
      if (gemm && node.attr_int("transA", 0) != 0) continue;
      l.nk = gemm && node.attr_int("transB", 0) != 0;
      if (!inits.count(b)) {
        // A tied head reads the embedding through Transpose(perm [1, 0]).
        auto p = producer.find(b);
        if (p == producer.end() || p->second.op_type() != "Transpose" || !inits.count(p->second.input(0))) continue;
        b = p->second.input(0);
        l.nk = !l.nk;
        l.via_transpose = true;
      }
      l.weight = b;
      Tensor t = g.initializer(b);
      auto d = t.dims();
      if (d.size() != 2) continue;
      if (t.dtype() != NF_DTYPE_FLOAT32 && t.dtype() != NF_DTYPE_FLOAT16)
        continue;
      l.K = l.nk ? d[1] : d[0];
      l.N = l.nk ? d[0] : d[1];
      if (seen.count(b + (l.via_transpose ? "^T" : ""))) continue;
      seen.insert(b + (l.via_transpose ? "^T" : ""));
      if (auto r = roles.find(l.output); r != roles.end()) classify(l, r->second);
      info.linears.push_back(l);
    }
  }
  if (info.linears.empty()) throw Error("aries backend: no MatMul/Gemm with a constant 2-D weight: not a decoder model");

  // Dimensions: the HF config when the set carries it (the target's), else what the weights say.
  nlohmann::json cfg = role.empty() ? ms.metadata("config") : nlohmann::json();
  ModelShape& s = info.shape;
  // Blocks counted, not the highest index: a draft's one block is numbered after the target's
  // layers (the cache it reads).
  std::set<int64_t> blocks;
  for (auto& l : info.linears)
    if (l.block >= 0) blocks.insert(l.block);
  s.layers = cfg_int(cfg, "num_hidden_layers", static_cast<int64_t>(blocks.size()));
  for (auto& l : info.linears) {
    if (l.kind == Kind::query && s.hidden == 0) s.hidden = l.K;
    if (l.kind == Kind::ffn && !l.ffn_down && s.intermediate == 0) s.intermediate = l.N;
    if (l.kind == Kind::head) s.vocab = l.N;
  }
  s.hidden = cfg_int(cfg, "hidden_size", s.hidden);
  s.intermediate = cfg_int(cfg, "intermediate_size", s.intermediate);
  s.vocab = cfg_int(cfg, "vocab_size", s.vocab);
  s.heads = cfg_int(cfg, "num_attention_heads", 0);
  s.kv_heads = cfg_int(cfg, "num_key_value_heads", s.heads);
  s.head_dim = cfg_int(cfg, "head_dim", s.heads > 0 ? s.hidden / s.heads : 0);
  // KV shape from the graph when the config is absent: past_key_values.0.value [.., n_kv, L, hd]
  // in the HF layout, [n_kv, 1, L, hd] after arcl.
  // (A draft numbers its cache after the target's layers: the first cache value input counts.)
  const Graph& g0 = graphs[0];
  std::string kv_value = "past_key_values.0.value";
  for (const auto& in : g0.inputs())
    if (auto kv = nf::decoder::parse_kv(in); kv && !kv->present && kv->part == nf::decoder::KvPart::Value) {
      kv_value = in;
      break;
    }
  ValueType vt;
  if (s.heads == 0 && g0.value_type(kv_value, &vt) && vt.dims.size() == 4) {
    s.kv_heads = vt.dims[0] == 1 || vt.dims[0] < 0 ? vt.dims[1] : vt.dims[0];
    s.head_dim = vt.dims[3];
    for (auto& l : info.linears)
      if (l.kind == Kind::query && s.head_dim > 0) s.heads = l.N / s.head_dim;
  }
  if (s.layers <= 0 || s.hidden <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0)
    throw Error("aries backend: cannot tell the decoder's layers/heads/head_dim (no HF config in the model set and no "
                "q_proj / past_key_values.0.value to read them from)");

  // Static context (arcl: attention_mask [1, 1, AR, CL]) and rows per call.
  s.static_graph = true;
  for (const Graph& g : graphs) {
    ValueType ids, mask;
    bool has_ids = g.value_type("input_ids", &ids), has_mask = g.value_type("attention_mask", &mask);
    for (const auto& in : g.inputs()) {
      ValueType t;
      if (!g.value_type(in, &t)) continue;
      for (int64_t d : t.dims)
        if (d <= 0) s.static_graph = false;
    }
    if (has_ids && !ids.dims.empty() && ids.dims.back() > 0) {
      s.max_rows = std::max(s.max_rows, ids.dims.back());
      s.rows_per_call.push_back(ids.dims.back());
    }
    if (has_mask && !mask.dims.empty() && mask.dims.back() > 0) s.kv_capacity = std::max(s.kv_capacity, mask.dims.back());
  }
  std::sort(s.rows_per_call.begin(), s.rows_per_call.end());
  s.rows_per_call.erase(std::unique(s.rows_per_call.begin(), s.rows_per_call.end()), s.rows_per_call.end());
  if (!s.static_graph) {
    s.kv_capacity = 0;
    s.rows_per_call.clear();
  }
  return info;
}

void check_compilable(ModelSet ms) {
  // What the ARIES compiler model lowers: linear algebra, element-wise math, normalisation,
  // softmax and data movement with static shapes. No data-dependent shapes (Scatter*,
  // NonZero, loops); TopK with a constant k (a draft tree's expansion) lowers to k rounds of
  // max-and-mask on the vector unit (priced so: simulator.cpp).
  static const std::set<std::string> kOps = {
      "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log", "Erf", "Gelu", "Tanh",
      "Sigmoid", "Softplus", "Relu", "Max", "Min", "Clip", "Cos", "Sin", "MatMul", "Gemm", "Softmax", "LogSoftmax", "ReduceMean",
      "ReduceSum", "ReduceMax", "LayerNormalization", "Reshape", "Transpose", "Concat", "Slice", "Split",
      "Squeeze", "Unsqueeze", "Gather", "Expand", "Tile", "Where", "Cast", "Constant", "ConstantOfShape",
      "Shape", "Identity", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Not",
      "Range", "Flatten", "Trilu", "TopK"};
  for (const Graph& g : ms.graphs()) {
    for (const auto& in : g.inputs()) {
      ValueType t;
      if (!g.value_type(in, &t)) throw Error("aries backend: graph '" + g.name() + "' input '" + in + "' has no type");
      for (size_t a = 0; a < t.dims.size(); ++a)
        if (t.dims[a] <= 0)
          throw Error("aries backend: graph '" + g.name() + "' input '" + in + "' has a symbolic dimension " +
                      std::to_string(a) + (t.dim_params[a].empty() ? "" : " ('" + t.dim_params[a] + "')") +
                      ": ARIES runs static shapes only; apply the arcl transform first (or compile with estimate_only)");
    }
    size_t i = 0;
    for (const Node& n : g.nodes()) {
      std::string op(n.op_type());
      if ((!n.domain().empty() && n.domain() != "ai.onnx") || !kOps.count(op))
        throw Error("aries backend: operator '" + op + "' (node " + std::to_string(i) + " '" + std::string(n.name()) +
                    "' of graph '" + g.name() + "') is not supported by ARIES" +
                    (op == "OneHot" || op == "ScatterElements"
                         ? " (a mixture-of-experts router: run the moe transform before compiling for aries)"
                         : ""));
      ++i;
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> part_ranges(const AriesOptions& o, int64_t layers) {
  std::vector<std::pair<int64_t, int64_t>> r;
  if (o.split_parts > 0) {
    if (o.split_parts > layers)
      throw Error("aries backend: split_parts " + std::to_string(o.split_parts) + " exceeds the model's " +
                  std::to_string(layers) + " transformer blocks");
    for (int64_t p = 0; p < o.split_parts; ++p) r.emplace_back(p * layers / o.split_parts, (p + 1) * layers / o.split_parts);
  } else if (!o.split_blocks.empty()) {
    int64_t start = 0;
    for (int64_t b : o.split_blocks) {
      if (b <= 0 || b >= layers)
        throw Error("aries backend: split_blocks entry " + std::to_string(b) + " is outside 1.." +
                    std::to_string(layers - 1) + " (the model has " + std::to_string(layers) + " blocks)");
      r.emplace_back(start, b);
      start = b;
    }
    r.emplace_back(start, layers);
  } else {
    r.emplace_back(0, layers);
  }
  return r;
}

}  // namespace nf::aries
