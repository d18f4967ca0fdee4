#include "spinquant/graph_walk.h"

#include <npuforge/graph/infer_shapes.h>
#include <npuforge/graph/value_types.h>

#include <algorithm>
#include <set>

namespace spinquant {

GraphView::GraphView(nf::Graph g) : graph(g) {
  nodes_ = g.nodes();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (const auto& o : nodes_[i].outputs()) producer_[o] = i;
    for (size_t j = 0; j < nodes_[i].input_count(); ++j) {
      std::string in = nodes_[i].input(j);
      if (!in.empty()) consumers_[in].push_back({nodes_[i], j});
    }
  }
  for (const auto& n : g.initializer_names()) inits_[n] = true;
  outputs_ = g.outputs();
}

const nf::Node* GraphView::producer(const std::string& v) const {
  auto it = producer_.find(v);
  return it == producer_.end() ? nullptr : &nodes_[it->second];
}

const std::vector<Use>& GraphView::consumers(const std::string& v) const {
  auto it = consumers_.find(v);
  return it == consumers_.end() ? none_ : it->second;
}

bool GraphView::is_output(const std::string& v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

nf::Tensor GraphView::float_initializer(const std::string& name) const {
  if (!is_initializer(name)) return {};
  nf::Tensor t = graph.initializer(name);
  if (!t || t.dtype() != NF_DTYPE_FLOAT32) return {};
  return t;
}

int64_t GraphView::last_dim(const std::string& v) const {
  if (!shapes_inferred_) {
    shapes_inferred_ = true;
    try {
      nf::graph::infer_shapes(graph);
    } catch (const std::exception&) {
      // An op shape inference cannot type leaves its values unknown: they match nothing here.
    }
  }
  const auto t = nf::graph::get_value_type(graph, v);
  return t && t->dims && !t->dims->empty() ? t->dims->back() : -1;
}

bool passthrough(std::string_view op) { return op == "Cast" || op == "Identity"; }

std::string through_casts(const GraphView& gv, std::string value) {
  for (const nf::Node* p = gv.producer(value); p && passthrough(p->op_type()); p = gv.producer(value)) value = p->input(0);
  return value;
}

std::string scaled_operand(const GraphView& gv, const nf::Node& n) {
  auto scalar = [&](const std::string& v) {
    if (gv.is_initializer(v)) return gv.float_initializer(v).numel() == 1;
    const nf::Node* p = gv.producer(v);
    if (!p || p->op_type() != "Constant") return false;
    const nf::Tensor t = p->attr_tensor("value");
    return t && t.numel() == 1;
  };
  if (n.input_count() != 2) return "";
  if (n.op_type() == "Mul" && scalar(n.input(0))) return n.input(1);
  if ((n.op_type() == "Mul" || n.op_type() == "Div") && scalar(n.input(1))) return n.input(0);
  return "";
}

namespace {

// The 1-D constant added to `value` by its single Add consumer, if that is all it does.
std::string bias_after(const GraphView& gv, const std::string& value, std::string* sum) {
  const auto& uses = gv.consumers(value);
  if (uses.size() != 1 || uses[0].node.op_type() != "Add") return "";
  const nf::Node& add = uses[0].node;
  std::string other = add.input(1 - uses[0].input);
  nf::Tensor t = gv.float_initializer(other);
  if (!t || t.dims().size() != 1) return "";
  *sum = add.output(0);
  return other;
}

}  // namespace

bool as_linear(const GraphView& gv, const nf::Node& n, Linear* out) {
  if (n.op_type() != "MatMul" && n.op_type() != "Gemm") return false;
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  nf::Tensor w = gv.float_initializer(n.input(1));
  if (!w || w.dims().size() != 2) return false;
  Linear l;
  l.input = n.input(0);
  l.node_output = n.output(0);
  l.weight = n.input(1);
  if (n.op_type() == "Gemm") {
    if (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.f) != 1.f) return false;
    l.nk = n.attr_int("transB", 0) != 0;
    if (!n.input(2).empty()) {
      if (n.attr_float("beta", 1.f) != 1.f || !gv.float_initializer(n.input(2))) return false;
      l.bias = n.input(2);
    }
  } else {
    std::string sum;
    l.bias = bias_after(gv, l.node_output, &sum);
  }
  auto d = w.dims();
  l.K = l.nk ? d[1] : d[0];
  l.N = l.nk ? d[0] : d[1];
  *out = l;
  return true;
}

std::vector<RmsNorm> find_rms_norms(const GraphView& gv) {
  std::vector<RmsNorm> result;
  for (const nf::Node& mul : gv.graph.nodes()) {
    if (mul.op_type() != "Mul" || mul.input_count() != 2) continue;
    for (size_t gi = 0; gi < 2; ++gi) {
      const std::string gain_name = through_casts(gv, mul.input(gi));
      nf::Tensor gain = gv.float_initializer(gain_name);
      if (!gain || gain.dims().size() != 1) continue;
      // The normalized operand: x * (1 / sqrt(mean(x^2) + eps)) or x / sqrt(...), Casts allowed.
      const nf::Node* p = gv.producer(through_casts(gv, mul.input(1 - gi)));
      if (!p || (p->op_type() != "Mul" && p->op_type() != "Div")) continue;
      bool has_mean = false;
      std::string x;
      for (size_t side = 0; side < 2 && !has_mean; ++side) {
        const nf::Node* q = gv.producer(p->input(side));
        for (int hops = 0; q && hops < 6 && !has_mean; ++hops) {
          if (q->op_type() == "ReduceMean") {
            const nf::Node* sq = gv.producer(q->input(0));
            if (sq && (sq->op_type() == "Pow" || sq->op_type() == "Mul")) {
              has_mean = true;
              x = sq->input(0);
            }
            break;
          }
          std::string_view op = q->op_type();
          if (op != "Add" && op != "Sqrt" && op != "Div" && op != "Reciprocal" && !passthrough(op)) break;
          // follow the non-constant input
          std::string next;
          for (const auto& in : q->inputs())
            if (gv.producer(in) && gv.producer(in)->op_type() != "Constant") next = in;
          q = next.empty() ? nullptr : gv.producer(next);
        }
      }
      if (!has_mean) continue;
      // x of the norm is the residual value before its Cast.
      result.push_back({through_casts(gv, x), mul.output(0), gain_name, mul.input(gi)});
      break;
    }
  }
  return result;
}

std::vector<RmsNorm> find_rms_norms(const GraphView& gv, int64_t size) {
  std::vector<RmsNorm> result;
  for (RmsNorm& n : find_rms_norms(gv))
    if (gv.float_initializer(n.gain).numel() == size) result.push_back(std::move(n));
  return result;
}

std::vector<Linear> linear_readers(const GraphView& gv, const std::string& value, const std::string& what) {
  std::vector<Linear> result;
  std::vector<std::string> frontier{value};
  while (!frontier.empty()) {
    std::string v = frontier.back();
    frontier.pop_back();
    if (gv.is_output(v)) throw nf::Error("spinquant: " + what + " '" + v + "' is a graph output; it cannot be rotated");
    for (const Use& u : gv.consumers(v)) {
      std::string_view op = u.node.op_type();
      Linear l;
      // A Reshape (GPT-2's Conv1D flattens [b, s, d] to [b*s, d]) keeps each row of d values
      // whole exactly when the reader's K is d, which every caller checks against the norm.
      // A scalar Mul or Div commutes with a per-channel gain and with a rotation (MiniCPM
      // divides the final norm's output by hidden_size / dim_model_base before the head).
      if (passthrough(op) || (op == "Reshape" && u.input == 0) || scaled_operand(gv, u.node) == v) {
        frontier.push_back(u.node.output(0));
      } else if (op == "Shape") {
        continue;
      } else if (u.input == 0 && as_linear(gv, u.node, &l)) {
        result.push_back(l);
      } else {
        throw nf::Error("spinquant: " + what + " '" + value + "' feeds a " + std::string(op) + " node ('" +
                        std::string(u.node.name()) + "'), not only linear layers: cannot fuse it");
      }
    }
  }
  return result;
}

bool linear_writer(const GraphView& gv, const std::string& value, Linear* out) {
  std::string v = value;
  for (int hops = 0; hops < 8; ++hops) {
    const nf::Node* p = gv.producer(v);
    if (!p) return false;
    if (as_linear(gv, *p, out)) return true;
    std::string_view op = p->op_type();
    if (op == "Reshape" || passthrough(op)) {
      v = p->input(0);
    } else if (const std::string scaled = scaled_operand(gv, *p); !scaled.empty()) {
      v = scaled;
    } else if (op == "Add") {  // a bias Add: follow the non-constant side
      if (gv.float_initializer(p->input(1))) v = p->input(0);
      else if (gv.float_initializer(p->input(0))) v = p->input(1);
      else return false;
    } else {
      return false;
    }
  }
  return false;
}

std::vector<Attention> find_attention(const GraphView& gv) {
  std::vector<Attention> result;
  for (const nf::Node& sm : gv.graph.nodes()) {
    if (sm.op_type() != "Softmax") continue;
    // Softmax (through Cast/Dropout-free passthroughs) is input 0 of the P @ V MatMul.
    std::vector<std::string> probs{sm.output(0)};
    const nf::Node* pv = nullptr;
    for (size_t i = 0; i < probs.size() && !pv; ++i)
      for (const Use& u : gv.consumers(probs[i])) {
        if (passthrough(u.node.op_type())) probs.push_back(u.node.output(0));
        if (u.node.op_type() == "MatMul" && u.input == 0) pv = &u.node;
      }
    if (!pv) continue;
    // Back from V through layout ops (and the past-KV Concat) to the value projection.
    Attention a;
    bool found_v = false;
    std::string stopped;  // the first node on V's path that is neither layout nor a projection
    std::vector<std::string> back{pv->input(1)};
    std::set<std::string> seen;
    while (!back.empty() && !found_v) {
      std::string v = back.back();
      back.pop_back();
      if (!seen.insert(v).second) continue;
      const nf::Node* p = gv.producer(v);
      if (!p) continue;
      if (as_linear(gv, *p, &a.v_proj)) {
        found_v = true;
        break;
      }
      std::string_view op = p->op_type();
      if (op == "Reshape" || op == "Transpose" || op == "Expand" || op == "Unsqueeze") {
        back.push_back(p->input(0));  // the data, not the shape
      } else if (op == "Concat" || op == "Add" || passthrough(op)) {
        for (const auto& in : p->inputs())
          if (!in.empty() && !gv.is_initializer(in)) back.push_back(in);
      } else if (stopped.empty()) {
        stopped = std::string(op) + " '" + std::string(p->name()) + "'";
      }
    }
    // Forward from P @ V through layout ops to the output projection.
    bool found_o = false;
    std::vector<std::string> fwd{pv->output(0)};
    for (size_t i = 0; i < fwd.size() && i < 16 && !found_o; ++i)
      for (const Use& u : gv.consumers(fwd[i])) {
        std::string_view op = u.node.op_type();
        if (u.input == 0 && as_linear(gv, u.node, &a.o_proj)) {
          found_o = true;
          break;
        }
        if (op == "Reshape" || op == "Transpose" || passthrough(op)) fwd.push_back(u.node.output(0));
      }
    if (!found_v || !found_o)
      throw nf::Error(std::string("spinquant: r2: no ") + (found_v ? "output" : "value") +
                      " projection found for the attention of Softmax '" + std::string(sm.name()) + "'" +
                      (!found_v && !stopped.empty()
                           ? " (the values come through " + stopped + ", which does not commute with a rotation)"
                           : ""));
    result.push_back(a);
  }
  return result;
}

std::vector<float> read_floats(const nf::Tensor& t) {
  const float* p = t.data_as<float>();
  return std::vector<float>(p, p + t.numel());
}

void write_initializer(nf::Graph& g, const std::string& name, const std::vector<int64_t>& dims,
                       const std::vector<float>& values) {
  nf::Tensor t = nf::Tensor::create(NF_DTYPE_FLOAT32, dims);
  std::copy(values.begin(), values.end(), t.mutable_as<float>());
  g.set_initializer(name, t);
}

}  // namespace spinquant
