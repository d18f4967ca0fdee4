#include "graph_summary.h"

#include <regex>
#include <set>

namespace nf::htp {
namespace {

// HMX: matrix multiply units.
const std::set<std::string> kHmx = {"MatMul", "Gemm", "Conv"};
// Layout and selection ops the HTP graph compiler folds into their consumers (views,
// strided DMA): they cost no compute of their own.
const std::set<std::string> kMove = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Concat", "Expand", "Slice",
                                     "Identity", "Flatten", "Split", "Cast", "Constant", "Tile"};
// HVX: vector units (elementwise, reductions, softmax, normalization, top-k selection).
const std::set<std::string> kHvx = {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp",
                                    "Log", "Sin", "Cos", "Erf", "Gelu", "Sigmoid", "Softplus", "Tanh", "Relu", "Clip", "Max", "Min",
                                    "ReduceMean", "ReduceSum", "ReduceMax", "Softmax", "LogSoftmax", "LayerNormalization", "Where",
                                    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Not",
                                    "GatherElements", "CumSum", "QuantizeLinear", "DequantizeLinear", "TopK"};

std::string kind_of(const Node& n) {
  std::string op(n.op_type());
  if (kHmx.count(op)) return "hmx";
  if (op == "Gather") return "gather";
  if (kMove.count(op)) return "move";
  if (kHvx.count(op)) return "hvx";
  return "";
}

// mha2sha names each head's copy of a node "/mha2sha/<source>.h<k>[/<op>]": the copies of one
// source node share the key without ".h<k>".
std::string head_copy_group(const std::string& name) {
  static const std::regex tag(R"(\.h[0-9]+(?=/|$))");
  if (name.rfind("/mha2sha/", 0) != 0) return "";
  return std::regex_replace(name, tag, "");
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

}  // namespace

void check_ops(Graph g) {
  for (const Node& n : g.nodes()) {
    bool onnx = n.domain().empty() || n.domain() == "ai.onnx";
    if (!onnx || kind_of(n).empty())
      throw Error("htp: graph '" + g.name() + "': op '" + std::string(n.op_type()) + "'" +
                  (onnx ? "" : " (domain " + std::string(n.domain()) + ")") + " of node '" + std::string(n.name()) +
                  "' is not supported by the HTP backend" +
                  (n.op_type() == "Shape" || n.op_type() == "Range" || n.op_type() == "ConstantOfShape"
                       ? " (shape computations must be folded: run the arcl transform before compiling for htp)"
                   : n.op_type() == "OneHot" || n.op_type() == "ScatterElements"
                       ? " (a mixture-of-experts router: run the moe transform before compiling for htp)"
                       : ""));
  }
}

void check_static(Graph g) {
  auto check = [&](const std::string& v, const char* what) {
    ValueType t;
    if (!g.value_type(v, &t)) throw Error("htp: graph '" + g.name() + "': " + what + " '" + v + "' has no known type (shapes must be static)");
    for (size_t i = 0; i < t.dims.size(); ++i)
      if (t.dims[i] < 0)
        throw Error("htp: graph '" + g.name() + "': " + what + " '" + v + "' has a dynamic dimension " +
                    (t.dim_params[i].empty() ? std::to_string(i) : "'" + t.dim_params[i] + "'") +
                    "; HTP graphs are static (run the arcl transform first)");
  };
  for (const auto& v : g.inputs()) check(v, "input");
  for (const auto& v : g.outputs()) check(v, "output");
  for (const Node& n : g.nodes())
    for (const auto& v : n.outputs())
      if (!v.empty()) check(v, "value");
}

namespace {
bool is_kv_name(const std::string& v) { return v.rfind("past_key_values.", 0) == 0 || v.rfind("present.", 0) == 0; }
int assumed_bits(const std::string& value, nf_dtype dtype, const CostPolicy& p) {
  if (dtype != NF_DTYPE_FLOAT32 && dtype != NF_DTYPE_FLOAT16) return 0;
  return is_kv_name(value) && p.assume_kv_bw ? p.assume_kv_bw : p.assume_activation_bw;
}
}  // namespace

int activation_bits(ModelSet ms, const std::string& value, nf_dtype dtype, const CostPolicy& p) {
  const nf_encoding* e = ms.encoding(value);
  if (e && !e->is_float && e->num_scales == 1) return e->bw <= 4 ? 4 : e->bw <= 8 ? 8 : e->bw <= 16 ? 16 : 32;
  if (int a = assumed_bits(value, dtype, p)) return a;
  if (dtype == NF_DTYPE_FLOAT32 || dtype == NF_DTYPE_FLOAT16) return p.fp16_relaxed ? 16 : 32;
  if (dtype == NF_DTYPE_INT64) return 32;  // HTP indexes with int32
  return static_cast<int>(dtype_size(dtype) * 8);
}

bool int_encoded(ModelSet ms, const std::string& value, nf_dtype dtype, const CostPolicy& p) {
  const nf_encoding* e = ms.encoding(value);
  return (e && !e->is_float && e->num_scales == 1) || assumed_bits(value, dtype, p) > 0;
}

nlohmann::json summarize(ModelSet ms, Graph g, const std::map<std::string, WeightInfo>& weights, const CostPolicy& policy) {
  std::set<std::string> inits;
  for (const auto& s : g.initializer_names()) inits.insert(s);
  std::set<std::string> inputs_set;
  nlohmann::json inputs = nlohmann::json::object(), outputs = nlohmann::json::object();
  std::map<std::string, uint64_t> bytes_of;
  auto type_of = [&](const std::string& v) {
    ValueType t;
    if (!g.value_type(v, &t)) throw Error("htp: graph '" + g.name() + "': value '" + v + "' has no type");
    return t;
  };
  auto value_bytes = [&](const std::string& v) -> uint64_t {
    auto it = bytes_of.find(v);
    if (it != bytes_of.end()) return it->second;
    ValueType t = type_of(v);
    uint64_t b = static_cast<uint64_t>(numel(t.dims)) * activation_bits(ms, v, t.dtype, policy) / 8;
    bytes_of[v] = b;
    return b;
  };
  for (const auto& v : g.inputs()) {
    inputs_set.insert(v);
    inputs[v] = value_bytes(v);
  }
  for (const auto& v : g.outputs()) outputs[v] = value_bytes(v);

  // Origins through folded movement ops: the graph inputs and packed weights a value is a view of.
  std::map<std::string, std::set<std::string>> in_origin, w_origin;
  for (const auto& v : inputs_set) in_origin[v] = {v};
  for (const auto& [name, info] : weights)
    if (inits.count(name)) w_origin[name] = {name};
  std::set<std::string> paid;  // graph inputs already read from DRAM by an earlier op

  // The per-op cost is paid once per source op: mha2sha's per-head copies of one node share it
  // (a fraction each, set after the loop). The published figures are of head-split graphs (the
  // vendor flow runs MHA2SHA by default), and the per-op cost fitted on them through multi-head
  // graphs then holds for both forms.
  std::map<std::string, int> copies;
  std::vector<std::string> group_of_op;  // per entry of `ops`: its head-copy group, or ""

  nlohmann::json ops = nlohmann::json::array();
  uint64_t n_compute = 0;
  for (const Node& n : g.nodes()) {
    std::string kind = kind_of(n);
    std::vector<std::string> ins = n.inputs(), outs = n.outputs();
    if (kind == "move") {
      for (const auto& o : outs) {
        if (o.empty()) continue;
        for (const auto& i : ins) {
          if (i.empty()) continue;
          in_origin[o].insert(in_origin[i].begin(), in_origin[i].end());
          w_origin[o].insert(w_origin[i].begin(), w_origin[i].end());
        }
      }
      continue;
    }
    ++n_compute;
    nlohmann::json op = {{"op", std::string(n.op_type())}, {"kind", kind}};
    group_of_op.push_back(head_copy_group(std::string(n.name())));
    if (!group_of_op.back().empty()) ++copies[group_of_op.back()];
    uint64_t dram_in = 0;
    std::string weight;
    for (size_t k = 0; k < ins.size(); ++k) {
      const auto& i = ins[k];
      if (i.empty()) continue;
      for (const auto& src : in_origin[i])
        if (paid.insert(src).second) dram_in += inputs[src].get<uint64_t>();
      if (!w_origin[i].empty()) weight = *w_origin[i].begin();
    }
    const std::string& out = outs.at(0);
    ValueType ot = type_of(out);
    uint64_t out_bytes = 0;
    for (const auto& o : outs)
      if (!o.empty()) out_bytes += value_bytes(o);
    op["out_bytes"] = out_bytes;
    // Outer (batch/head) dims: the compiler tiles along them, so a slice is what must fit VTCM.
    int64_t outer = 1;
    for (size_t d = 0; d + 2 < ot.dims.size(); ++d) outer *= ot.dims[d];
    op["outer"] = outer;
    bool graph_out = false;
    for (const auto& o : outs) graph_out |= outputs.contains(o);
    op["is_output"] = graph_out;
    op["dram_in_bytes"] = dram_in;
    if (kind == "hmx") {
      // The activation operand: the one that is not a packed weight (A for MatMul/Gemm, X for Conv).
      size_t a_idx = 0, b_idx = 1;
      if (n.op_type() == "MatMul" && !w_origin[ins[0]].empty() && w_origin[ins[1]].empty()) std::swap(a_idx, b_idx);
      ValueType at = type_of(ins[a_idx]), bt = type_of(ins[b_idx]);
      int64_t K;
      if (n.op_type() == "Conv") {
        K = numel(bt.dims) / bt.dims.at(0);  // Cin/group * kernel
      } else if (n.op_type() == "Gemm") {
        K = n.attr_int("transA", 0) ? at.dims.at(0) : at.dims.at(1);
      } else {
        K = a_idx == 0 ? at.dims.back() : at.dims.at(at.dims.size() - 2);
      }
      int64_t N = ot.dims.back();
      op["macs"] = numel(ot.dims) * K;
      op["m"] = numel(ot.dims) / std::max<int64_t>(N, 1);
      op["k"] = K;
      op["n"] = N;
      op["a_bits"] = activation_bits(ms, ins[a_idx], at.dtype, policy);
      op["a_bytes"] = value_bytes(ins[a_idx]);
      op["a_int"] = int_encoded(ms, ins[a_idx], at.dtype, policy);
      if (!weight.empty() && weights.count(weight)) {
        const WeightInfo& w = weights.at(weight);
        op["weight"] = weight;
        op["w_bits"] = w.bits;
        op["w_lpbq"] = w.lpbq;
        op["w_int"] = !w.is_float;
      } else {
        // Activation x activation (attention scores, weighted values).
        op["weight"] = nullptr;
        op["w_bits"] = activation_bits(ms, ins[b_idx], bt.dtype, policy);
        op["w_lpbq"] = false;
        op["w_int"] = int_encoded(ms, ins[b_idx], bt.dtype, policy);
      }
    } else if (kind == "gather" && !weight.empty()) {
      op["kind"] = "lookup";  // embedding rows straight from DRAM
      op["weight"] = weight;
    } else {
      uint64_t in_bytes = 0;
      for (const auto& i : ins)
        if (!i.empty() && !inits.count(i)) in_bytes += value_bytes(i);
      op["kind"] = "hvx";
      op["in_bytes"] = in_bytes;
    }
    ops.push_back(std::move(op));
  }
  for (size_t i = 0; i < ops.size(); ++i)
    if (!group_of_op[i].empty()) ops[i]["dispatch"] = 1.0 / copies[group_of_op[i]];  // of one op's per-op cost
  return {{"name", g.name()}, {"inputs", inputs}, {"outputs", outputs}, {"compute_ops", n_compute}, {"ops", ops}};
}

}  // namespace nf::htp
