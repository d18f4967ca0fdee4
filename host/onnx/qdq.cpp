#include "onnx/qdq.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

namespace nf::onnx_io {
namespace {

ir::Attribute int_attr(int64_t v) {
  ir::Attribute a;
  a.type = NF_ATTR_INT;
  a.i = v;
  return a;
}

void add_node(ir::Graph& g, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              std::map<std::string, ir::Attribute> attrs = {}, const std::string& domain = "") {
  auto n = std::make_unique<ir::Node>();
  n->op_type = op;
  n->domain = domain;
  n->name = out[0] + "/" + op;
  n->inputs = std::move(in);
  n->outputs = std::move(out);
  n->attrs = std::move(attrs);
  g.nodes.push_back(std::move(n));
}

template <class T>
std::string add_constant(ir::Graph& g, const std::string& name, nf_dtype dt, std::vector<int64_t> dims,
                         const std::vector<T>& v) {
  g.initializers[name] = ir::make_tensor_ref(ir::Tensor::from<T>(dt, std::move(dims), v));
  return name;
}

// Per (channel, block) scale and signed zero of a weight encoding, as the cpu backend reads it:
// w = (q + zero) * scale, q signed in `bits` bits.
struct WeightGrid {
  int bits = 8;
  int64_t K = 0, N = 0, block = 0, blocks = 1;
  int channel_axis = 1;
  std::vector<float> scale, zero;  // [N * blocks]
  std::vector<int32_t> ints;       // LPBQ i_blk, [N * blocks]
};

WeightGrid grid_of(const std::string& name, const ir::Tensor& w, const nf_encoding& e) {
  if (w.dims.size() != 2) throw std::runtime_error("export-qdq: weight '" + name + "' with an encoding is not 2-D");
  WeightGrid gr;
  gr.bits = e.enc_type == NF_ENC_LPBQ ? e.compressed_bw : e.bw;
  gr.channel_axis = e.enc_type == NF_ENC_PER_TENSOR ? 1 : e.axis;
  if (gr.channel_axis != 0 && gr.channel_axis != 1)
    throw std::runtime_error("export-qdq: weight '" + name + "': channel axis " + std::to_string(e.axis));
  gr.N = w.dims[static_cast<size_t>(gr.channel_axis)];
  gr.K = w.dims[static_cast<size_t>(1 - gr.channel_axis)];
  gr.block = (e.enc_type == NF_ENC_PER_BLOCK || e.enc_type == NF_ENC_LPBQ) ? e.block_size : gr.K;
  if (gr.block <= 0 || gr.K % gr.block != 0)
    throw std::runtime_error("export-qdq: weight '" + name + "': block size " + std::to_string(gr.block) +
                             " does not divide " + std::to_string(gr.K));
  gr.blocks = gr.K / gr.block;
  size_t need = e.enc_type == NF_ENC_PER_TENSOR ? 1
                : e.enc_type == NF_ENC_PER_BLOCK ? static_cast<size_t>(gr.N * gr.blocks)
                                                 : static_cast<size_t>(gr.N);
  if (e.num_scales != need)
    throw std::runtime_error("export-qdq: weight '" + name + "': " + std::to_string(e.num_scales) +
                             " scales, expected " + std::to_string(need));
  for (int64_t n = 0; n < gr.N; ++n)
    for (int64_t b = 0; b < gr.blocks; ++b) {
      size_t i = static_cast<size_t>(n * gr.blocks + b);
      size_t src = e.enc_type == NF_ENC_PER_TENSOR ? 0 : e.enc_type == NF_ENC_PER_BLOCK ? i : static_cast<size_t>(n);
      float s = e.scale[src];
      int32_t k = 1;
      if (e.enc_type == NF_ENC_LPBQ) k = e.per_block_int_scale[i];
      gr.ints.push_back(k);
      gr.scale.push_back(s * static_cast<float>(k));
      gr.zero.push_back(e.is_sym ? 0.f : static_cast<float>(e.offset[src] + (1 << (gr.bits - 1))));
    }
  return gr;
}

// Signed q of element (k, n) on the grid.
float grid_q(const WeightGrid& gr, float v, size_t i) {
  const float qmin = -std::ldexp(1.f, gr.bits - 1), qmax = std::ldexp(1.f, gr.bits - 1) - 1;
  return std::clamp(std::nearbyint(v / gr.scale[i]) - gr.zero[i], qmin, qmax);
}

void export_weight(ir::Graph& g, const std::string& name, const nf_encoding& e, QdqStats* st) {
  const ir::Tensor& w = g.initializers.at(name)->tensor;
  if (w.dtype != NF_DTYPE_FLOAT32) throw std::runtime_error("export-qdq: weight '" + name + "' is not float32");
  WeightGrid gr = grid_of(name, w, e);
  const float* src = w.as<float>();
  auto index = [&](int64_t k, int64_t n) { return gr.channel_axis == 1 ? k * gr.N + n : n * gr.K + k; };
  const bool per_channel_exact = e.enc_type != NF_ENC_PER_BLOCK && gr.bits <= 8 && e.is_sym;
  if (!per_channel_exact) {
    // Float weights already on their grid (blockwise DequantizeLinear needs opset 21).
    std::vector<float> fq(static_cast<size_t>(w.numel()));
    for (int64_t n = 0; n < gr.N; ++n)
      for (int64_t k = 0; k < gr.K; ++k) {
        size_t i = static_cast<size_t>(n * gr.blocks + k / gr.block);
        fq[static_cast<size_t>(index(k, n))] = (grid_q(gr, src[index(k, n)], i) + gr.zero[i]) * gr.scale[i];
      }
    g.initializers[name] = ir::make_tensor_ref(ir::Tensor::from<float>(NF_DTYPE_FLOAT32, w.dims, fq));
    ++st->weights_on_grid;
    return;
  }
  // int8 container: q * i_blk on the per-channel grid of the channel scale (LPBQ), or q.
  std::vector<int8_t> q(static_cast<size_t>(w.numel()));
  for (int64_t n = 0; n < gr.N; ++n)
    for (int64_t k = 0; k < gr.K; ++k) {
      size_t i = static_cast<size_t>(n * gr.blocks + k / gr.block);
      float v = grid_q(gr, src[index(k, n)], i) * static_cast<float>(gr.ints[i]);
      if (v < -128 || v > 127) throw std::runtime_error("export-qdq: weight '" + name + "' leaves the int8 grid");
      q[static_cast<size_t>(index(k, n))] = static_cast<int8_t>(v);
    }
  std::vector<float> scales;
  if (e.enc_type == NF_ENC_PER_TENSOR) scales = {e.scale[0]};
  else scales.assign(e.scale, e.scale + gr.N);  // LPBQ: s_ch; PER_CHANNEL: the channel scales
  std::vector<int64_t> sdims;
  if (scales.size() > 1) sdims = {static_cast<int64_t>(scales.size())};
  std::string qn = add_constant<int8_t>(g, name + "_quantized", NF_DTYPE_INT8, w.dims, q);
  std::string sn = add_constant<float>(g, name + "_scale", NF_DTYPE_FLOAT32, sdims, scales);
  std::string zn = add_constant<int8_t>(g, name + "_zero_point", NF_DTYPE_INT8, sdims,
                                        std::vector<int8_t>(scales.size(), 0));
  g.initializers.erase(name);
  std::map<std::string, ir::Attribute> attrs;
  if (scales.size() > 1) attrs["axis"] = int_attr(gr.channel_axis);
  add_node(g, "DequantizeLinear", {qn, sn, zn}, {name}, attrs);
  ++st->weights_dq;
}

// x -> (its grid) under a PER_TENSOR activation encoding.
void add_activation_qdq(ir::Graph& g, const std::string& in, const std::string& out, const nf_encoding& e,
                        QdqStats* st) {
  const float scale = e.scale[0];
  const float offset = static_cast<float>(e.offset[0]);
  const float qmax = std::ldexp(1.f, e.bw) - 1;
  if (e.bw == 8 && offset <= 0 && offset >= -255) {
    std::string s = add_constant<float>(g, out + "_qdq_scale", NF_DTYPE_FLOAT32, {}, {scale});
    std::string z = add_constant<uint8_t>(g, out + "_qdq_zero_point", NF_DTYPE_UINT8, {},
                                          {static_cast<uint8_t>(-e.offset[0])});
    add_node(g, "QuantizeLinear", {in, s, z}, {out + "_q"});
    add_node(g, "DequantizeLinear", {out + "_q", s, z}, {out});
    ++st->activations_qdq;
    return;
  }
  if (e.bw == 16 && offset <= 0 && offset >= -65535) {
    // uint16 Q/DQ is standard from opset 21; below it, ONNX Runtime's com.microsoft
    // QuantizeLinear/DequantizeLinear take uint16 (what its own quantizer writes for A16).
    g.opsets.emplace("com.microsoft", 1);
    std::string s = add_constant<float>(g, out + "_qdq_scale", NF_DTYPE_FLOAT32, {}, {scale});
    std::string z = add_constant<uint16_t>(g, out + "_qdq_zero_point", NF_DTYPE_UINT16, {},
                                           {static_cast<uint16_t>(-e.offset[0])});
    add_node(g, "QuantizeLinear", {in, s, z}, {out + "_q"}, {}, "com.microsoft");
    add_node(g, "DequantizeLinear", {out + "_q", s, z}, {out}, {}, "com.microsoft");
    ++st->activations_qdq;
    return;
  }
  // Emulated: q = clip(round(x * (1/scale)) - offset, 0, qmax); y = (q + offset) * scale.
  const std::string p = out + "_fq";
  std::string inv = add_constant<float>(g, p + "_inv_scale", NF_DTYPE_FLOAT32, {}, {1.f / scale});
  std::string neg = add_constant<float>(g, p + "_neg_offset", NF_DTYPE_FLOAT32, {}, {-offset});
  std::string lo = add_constant<float>(g, p + "_qmin", NF_DTYPE_FLOAT32, {}, {0.f});
  std::string hi = add_constant<float>(g, p + "_qmax", NF_DTYPE_FLOAT32, {}, {qmax});
  std::string off = add_constant<float>(g, p + "_offset", NF_DTYPE_FLOAT32, {}, {offset});
  std::string sc = add_constant<float>(g, p + "_scale", NF_DTYPE_FLOAT32, {}, {scale});
  add_node(g, "Mul", {in, inv}, {p + "_x"});
  add_node(g, "Round", {p + "_x"}, {p + "_r"});
  add_node(g, "Add", {p + "_r", neg}, {p + "_u"});
  add_node(g, "Clip", {p + "_u", lo, hi}, {p + "_q"});
  add_node(g, "Add", {p + "_q", off}, {p + "_s"});
  add_node(g, "Mul", {p + "_s", sc}, {out});
  ++st->activations_emulated;
}

}  // namespace

std::unique_ptr<ir::Graph> qdq_graph(const ir::ModelSet& ms, const ir::Graph& graph, QdqStats* stats) {
  QdqStats local;
  QdqStats* st = stats ? stats : &local;
  auto g = graph.clone();
  auto it = g->opsets.find("");
  if (it == g->opsets.end() || it->second < 13)
    throw std::runtime_error("export-qdq: graph '" + g->name + "' needs opset >= 13 for per-axis DequantizeLinear");
  std::set<std::string> inputs(g->inputs.begin(), g->inputs.end());
  for (const auto& [name, enc] : ms.encodings) {
    const nf_encoding& e = enc.view;
    if (e.is_float) continue;  // float encodings: nothing to round
    if (g->initializers.count(name)) {
      export_weight(*g, name, e, st);
      continue;
    }
    if (e.enc_type != NF_ENC_PER_TENSOR || e.num_scales != 1) continue;
    if (inputs.count(name)) {
      // A graph input (the KV cache): its consumers read the rounded value.
      const std::string q = name + "_qdq";
      for (auto& n : g->nodes)
        for (auto& in : n->inputs)
          if (in == name) in = q;
      add_activation_qdq(*g, name, q, e, st);
    } else if (ir::Node* p = g->producer(name)) {
      const std::string raw = name + "_float";
      for (auto& o : p->outputs)
        if (o == name) o = raw;
      add_activation_qdq(*g, raw, name, e, st);
    }
  }
  g->sort();
  return g;
}

}  // namespace nf::onnx_io
