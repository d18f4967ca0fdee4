#include "npuforge/engine/executor.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/kernels/conv.h>
#include <npuforge/kernels/elementwise.h>
#include <npuforge/kernels/movement.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include "profile.h"
#include "weights.h"

namespace nf::engine {

SessionOptions SessionOptions::parse(const nlohmann::json& j) {
  SessionOptions o;
  if (!j.is_object()) return o;
  if (j.contains("threads")) o.threads = j["threads"].get<int>();
  if (j.contains("weight_dtype")) o.weight_dtype = j["weight_dtype"].get<std::string>();
  if (j.contains("block_size")) o.block_size = j["block_size"].get<int64_t>();
  if (j.contains("use_encodings")) o.use_encodings = j["use_encodings"].get<bool>();
  if (j.contains("stream_weights")) o.stream_weights = j["stream_weights"].get<bool>();
  if (o.threads < 0) throw Error("cpu backend: option threads must be >= 0");
  if (o.weight_dtype != "float32" && o.weight_dtype != "int8" && o.weight_dtype != "int4")
    throw Error("cpu backend: option weight_dtype must be float32, int8 or int4, not '" + o.weight_dtype + "'");
  if (o.block_size <= 0) throw Error("cpu backend: option block_size must be positive");
  return o;
}

nlohmann::json SessionOptions::to_json() const {
  nlohmann::json j = {{"threads", threads}, {"weight_dtype", weight_dtype}, {"block_size", block_size}, {"use_encodings", use_encodings}};
  if (stream_weights) j["stream_weights"] = true;
  return j;
}

k::Tensor from_host(const Tensor& t) {
  nf_dtype dt = t.dtype();
  if (k::dtype_size(dt) == 0) throw Error(std::string("dtype ") + k::dtype_name(dt) + " is not supported");
  auto holder = std::make_shared<Tensor>(t);
  const void* data = holder->data();
  return k::Tensor::borrow(dt, t.dims(), data, std::shared_ptr<const void>(holder, data));
}

Tensor to_host(const k::Tensor& t) {
  Tensor h = Tensor::create(t.dtype(), t.dims());
  if (t.nbytes()) std::memcpy(h.mutable_data(), t.raw(), t.nbytes());
  return h;
}

namespace {

// An empty host tensor shaped like the Concat's result.
Tensor concat_to_host(const NodeDef& n, const std::vector<const k::Tensor*>& in) {
  for (const k::Tensor* t : in)
    if (!t) throw Error("Concat: missing input");
  return Tensor::create(in[0]->dtype(), k::concat_shape(in, n.attr_int("axis", 0)));
}

bool is_onnx_domain(std::string_view d) { return d.empty() || d == "ai.onnx"; }

std::string unsupported(std::string_view op, std::string_view domain, std::string_view node) {
  std::string full = domain.empty() || domain == "ai.onnx" ? std::string(op) : std::string(domain) + "::" + std::string(op);
  return "cpu backend: operator '" + full + "' (node " + std::string(node) + ") is not supported";
}

Attr copy_attr(const Node& node, const std::string& name) {
  Attr a;
  a.type = host().node_attr_type(node.get(), name.c_str());
  switch (a.type) {
    case NF_ATTR_INT: a.i = node.attr_int(name.c_str(), 0); break;
    case NF_ATTR_FLOAT: a.f = node.attr_float(name.c_str(), 0); break;
    case NF_ATTR_STRING: a.s = node.attr_string(name.c_str(), ""); break;
    case NF_ATTR_INTS: a.ints = node.attr_ints(name.c_str()); break;
    case NF_ATTR_FLOATS: a.floats = node.attr_floats(name.c_str()); break;
    case NF_ATTR_TENSOR: {
      Tensor t = node.attr_tensor(name.c_str());
      // Copied: attribute tensors are small and the node may change after prepare.
      if (t) a.t = from_host(t).clone();
      break;
    }
    default: break;  // graphs and strings lists: no claimed op uses them
  }
  return a;
}

}  // namespace

void check_supported(Graph g) {
  for (const Node& n : g.nodes())
    if (!is_onnx_domain(n.domain()) || !supports_op(n.op_type()))
      throw Error(unsupported(n.op_type(), n.domain(), n.name()));
}

int GraphPlan::slot(const std::string& value) {
  auto [it, added] = slots_.emplace(value, static_cast<int>(slot_names_.size()));
  if (added) {
    slot_names_.push_back(value);
    constants_.emplace_back();
    initializer_of_.emplace_back();
  }
  return it->second;
}

GraphPlan::GraphPlan(ModelSet ms, Graph g, const SessionOptions& opts, PackCache* cache)
    : graph_name_(g.name()), opts_(opts) {
  g.sort();
  for (const std::string& name : g.initializer_names()) {
    Tensor t = g.initializer(name);
    if (!t || t.dtype() == NF_DTYPE_STRING) continue;
    int s = slot(name);
    constants_[s] = from_host(t);
    initializer_of_[s] = name;
  }
  for (const std::string& name : g.inputs()) {
    if (slots_.count(name) && !constants_[slots_[name]].empty_handle()) continue;  // initializer with a default
    Input in{name, slot(name), {}};
    g.value_type(name, &in.type);
    inputs_.push_back(in);
  }
  outputs_ = g.outputs();
  const int64_t opset = g.opset("");
  for (const Node& node : g.nodes()) {
    NodeDef d;
    d.op = node.op_type();
    d.node_name = node.name();
    if (!is_onnx_domain(node.domain()) || !bind_operator(d)) throw Error(unsupported(d.op, node.domain(), d.node_name));
    d.onnx_opset = opset > 0 ? opset : 17;
    for (const std::string& v : node.inputs()) d.in.push_back(v.empty() ? -1 : slot(v));
    for (const std::string& v : node.outputs()) d.out.push_back(v.empty() ? -1 : slot(v));
    for (size_t i = 0; i < host().node_attr_count(node.get()); ++i) {
      std::string an = host().node_attr_name(node.get(), i);
      d.attrs[an] = copy_attr(node, an);
    }
    nodes_.push_back(std::move(d));
  }
  fold_constants();
  pack_weights(ms, g, cache);
  finish_deferred();
  move_scalar_scales(ms, g);
  fuse_transposed_matmuls();
  drop_unused_constants();
  plan_activation_quant(ms);
  plan_table_lookups(ms);
  plan_integer_mode();
  share_repeated_kv();
  plan_frees();
  profile_ = profile::attach();
}

// Runs every node whose inputs are all constant once, here, and keeps its outputs.
void GraphPlan::fold_constants() {
  std::vector<NodeDef> kept;
  RunCtx ctx{opts_.threads};
  for (NodeDef& n : nodes_) {
    bool all_const = std::all_of(n.in.begin(), n.in.end(), [&](int s) { return s < 0 || !constants_[s].empty_handle(); });
    if (!all_const) {
      kept.push_back(std::move(n));
      continue;
    }
    // A 2-D Transpose of a big constant or of an initializer (tied lm_head: MatMul(h,
    // Transpose(embed))) is not computed here: pack_weights packs from its source, with the
    // source's encoding; finish_deferred() computes it only if something else still reads it.
    if (n.op == "Transpose" && n.in.size() == 1 && n.in[0] >= 0 && n.out.size() == 1 && n.out[0] >= 0 &&
        constants_[n.in[0]].rank() == 2 &&
        (constants_[n.in[0]].numel() >= (1 << 16) || !initializer_of_[n.in[0]].empty()) &&
        n.attr_ints("perm", {1, 0}) == std::vector<int64_t>{1, 0}) {
      transposed_of_[n.out[0]] = n.in[0];
      kept.push_back(std::move(n));
      continue;
    }
    std::vector<const k::Tensor*> in;
    for (int s : n.in) in.push_back(s < 0 ? nullptr : &constants_[s]);
    std::vector<k::Tensor> out(n.out.size());
    try {
      n.run(in, out, ctx);
    } catch (const std::exception& e) {
      throw Error("cpu backend: node " + n.node_name + " (" + n.op + "): " + e.what());
    }
    for (size_t i = 0; i < n.out.size(); ++i)
      if (n.out[i] >= 0) constants_[n.out[i]] = out[i];
  }
  nodes_ = std::move(kept);
}

// MatMul / Gemm with a constant 2-D float weight: pack it once (fp32, int8, int4 or the
// weight's encoding) so each run streams the packed rows.
void GraphPlan::pack_weights(ModelSet ms, Graph g, PackCache* cache) {
  for (NodeDef& n : nodes_) {
    if ((n.op != "MatMul" && n.op != "Gemm") || n.in.size() < 2 || n.in[1] < 0) continue;
    int wslot = n.in[1];
    // The weight, or the source of a deferred Transpose of it (then read as [N, K] <-> [K, N]).
    auto tr = transposed_of_.find(wslot);
    const bool flip = tr != transposed_of_.end();
    if (flip) wslot = tr->second;
    const k::Tensor& src = constants_[wslot];
    if (src.empty_handle() || src.dtype() != NF_DTYPE_FLOAT32 || src.rank() != 2 || src.numel() == 0) continue;
    const int64_t d0 = flip ? src.dim(1) : src.dim(0), d1 = flip ? src.dim(0) : src.dim(1);  // the weight's dims
    bool nk = false;
    k::Tensor bias;
    if (n.op == "Gemm") {
      if (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.f) != 1.f) continue;
      nk = n.attr_int("transB", 0) != 0;
      int64_t N = nk ? d0 : d1;
      if (n.in.size() > 2 && n.in[2] >= 0) {
        const k::Tensor& c = constants_[n.in[2]];
        // Only a per-column bias folds into the product; anything else stays a plain Gemm.
        if (c.empty_handle() || n.attr_float("beta", 1.f) != 1.f || c.numel() != N || c.dtype() != NF_DTYPE_FLOAT32 ||
            (c.rank() == 2 && c.dim(0) != 1) || c.rank() > 2)
          continue;
        bias = c;
      }
    }
    if (flip) nk = !nk;
    const std::string& wname = initializer_of_[wslot];
    const nf_encoding* enc = wname.empty() ? nullptr : ms.encoding(wname);
    auto st = std::make_shared<LinearState>();
    // Graphs of a model set share weight buffers: one packed copy per (buffer, layout, encoding).
    auto key = std::make_tuple(src.raw(), nk, src.dim(0), src.dim(1), static_cast<const void*>(enc));
    if (cache) {
      auto it = cache->packed.find(key);
      if (it != cache->packed.end()) st->w = it->second;
    }
    if (!st->w) {
      k::PackedWeight packed = pack_weight(wname.empty() ? slot_names_[wslot] : wname, src, nk, enc, opts_);
      if (Tensor source = wname.empty() ? Tensor() : g.initializer(wname)) {
        if (!packed.f32_view)
          source.drop_pages(0, source.nbytes());  // runs read the packed copy: the mapped pages can go
        else if (opts_.stream_weights)
          packed.release_rows = [source](size_t offset, size_t n) { source.drop_pages(offset, n); };
      }
      st->w = std::make_shared<const k::PackedWeight>(std::move(packed));
      if (cache) cache->packed[key] = st->w;
    }
    st->bias = bias;
    n.linear = st;
    n.in.resize(1);  // the packed copy replaces the weight (and bias) inputs
  }
}

// Deferred constant Transposes: dropped when packing consumed every use, else computed now.
void GraphPlan::finish_deferred() {
  if (transposed_of_.empty()) return;
  std::set<int> used;
  for (const NodeDef& n : nodes_)
    if (n.op != "Transpose" || !transposed_of_.count(n.out[0]))
      for (int s : n.in)
        if (s >= 0) used.insert(s);
  for (const std::string& o : outputs_) used.insert(slot(o));
  std::vector<NodeDef> kept;
  RunCtx ctx{opts_.threads};
  for (NodeDef& n : nodes_) {
    if (n.op != "Transpose" || n.out.empty() || n.out[0] < 0 || !transposed_of_.count(n.out[0])) {
      kept.push_back(std::move(n));
      continue;
    }
    if (!used.count(n.out[0])) continue;
    std::vector<const k::Tensor*> in{&constants_[n.in[0]]};
    std::vector<k::Tensor> out(1);
    n.run(in, out, ctx);
    constants_[n.out[0]] = out[0];
  }
  nodes_ = std::move(kept);
  transposed_of_.clear();
}

int SlotLinks::uses(int slot) const {
  auto r = readers.find(slot);
  auto o = output_reads.find(slot);
  return (r == readers.end() ? 0 : static_cast<int>(r->second.size())) + (o == output_reads.end() ? 0 : o->second);
}

SlotLinks GraphPlan::slot_links() {
  SlotLinks l;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (int s : nodes_[i].in)
      if (s >= 0) l.readers[s].push_back(i);
    for (int s : nodes_[i].out)
      if (s >= 0) l.producer[s] = i;
  }
  for (const std::string& o : outputs_) ++l.output_reads[slot(o)];
  return l;
}

// MatMul(A, Transpose(B, swap last two)) reads B transposed in the GEMM instead of copying
// it: this is attention's Q * K^T, and B is the whole key cache.
void GraphPlan::fuse_transposed_matmuls() {
  const SlotLinks links = slot_links();
  const auto& producer = links.producer;
  std::set<size_t> dropped;
  for (NodeDef& n : nodes_) {
    if (n.op != "MatMul" || n.linear || n.in.size() < 2 || n.in[1] < 0 || links.uses(n.in[1]) != 1) continue;
    auto p = producer.find(n.in[1]);
    if (p == producer.end()) continue;
    const NodeDef& t = nodes_[p->second];
    std::vector<int64_t> perm = t.attr_ints("perm");
    size_t r = perm.size();
    if (t.op != "Transpose" || r < 2) continue;
    bool swap_last = perm[r - 1] == static_cast<int64_t>(r - 2) && perm[r - 2] == static_cast<int64_t>(r - 1);
    for (size_t i = 0; i + 2 < r; ++i) swap_last &= perm[i] == static_cast<int64_t>(i);
    if (!swap_last) continue;
    n.in[1] = t.in[0];
    n.trans_b = true;
    dropped.insert(p->second);
  }
  std::vector<NodeDef> kept;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!dropped.count(i)) kept.push_back(std::move(nodes_[i]));
  nodes_ = std::move(kept);
}

// Constants no remaining node reads (weights now packed, folded intermediates) are released.
void GraphPlan::drop_unused_constants() {
  std::vector<bool> used(constants_.size(), false);
  for (const NodeDef& n : nodes_)
    for (int s : n.in)
      if (s >= 0) used[s] = true;
  for (const std::string& o : outputs_) used[slot(o)] = true;
  for (size_t s = 0; s < constants_.size(); ++s)
    if (!used[s] && !constants_[s].empty_handle() && constants_[s].numel() > 64) constants_[s] = k::Tensor();
}

void TableGrid::apply(float* rows, const std::vector<int64_t>& indices, int64_t cols) const {
  for (size_t i = 0; i < indices.size(); ++i) {
    float* row = rows + static_cast<int64_t>(i) * cols;
    const size_t base = static_cast<size_t>(indices[i] * blocks);
    for (int64_t c = 0; c < cols; ++c) {
      const size_t g = base + static_cast<size_t>(c / block);
      const float q = std::clamp(std::nearbyint(row[c] / scale[g]) - zero[g], qmin, qmax);
      row[c] = (q + zero[g]) * scale[g];
    }
  }
}

// A Gather of a constant 2-D table with an integer encoding (the tied embedding, encoded as
// the LM head's weight [N, K]: per row, per row block, or per tensor) rounds what it reads
// onto that grid, as the device stores the one table.
void GraphPlan::plan_table_lookups(ModelSet ms) {
  if (!opts_.use_encodings) return;
  for (NodeDef& n : nodes_) {
    if (n.op != "Gather" || n.in.size() < 2 || n.in[0] < 0 || n.attr_int("axis", 0) != 0) continue;
    const k::Tensor& t = constants_[n.in[0]];
    const std::string& name = initializer_of_[n.in[0]];
    if (t.empty_handle() || name.empty() || t.dtype() != NF_DTYPE_FLOAT32 || t.rank() != 2) continue;
    const nf_encoding* e = ms.encoding(name);
    if (!e || e->is_float) continue;
    WeightGrid w = weight_grid(name, t.dim(1), t.dim(0), /*nk=*/true, *e);  // rows are the channels
    if (w.bits < 2 || w.bits > 16)
      throw Error("cpu backend: encoding of table '" + name + "': " + std::to_string(w.bits) + "-bit values");
    for (float sc : w.scale)
      if (!(sc > 0)) throw Error("cpu backend: encoding of table '" + name + "': scale " + std::to_string(sc) + " is not positive");
    auto g = std::make_shared<TableGrid>();
    g->block = w.block;
    g->blocks = w.blocks;
    g->qmin = -std::ldexp(1.f, w.bits - 1);
    g->qmax = std::ldexp(1.f, w.bits - 1) - 1;
    g->scale = std::move(w.scale);
    g->zero = std::move(w.zero);
    n.table_grid = std::move(g);
  }
}

void ActivationGrid::apply(const float* x, float* y, int64_t n) const {
  const float inv = 1.f / scale;
  for (int64_t i = 0; i < n; ++i) {
    float q = std::nearbyint(x[i] * inv) - offset;
    q = std::min(std::max(q, 0.f), qmax);
    y[i] = (q + offset) * scale;
  }
}

// Values computed at run time (and graph inputs such as the KV cache) whose name carries a
// PER_TENSOR integer encoding are rounded onto its grid. Weights are not here: packing puts
// them on their grid once.
void GraphPlan::plan_activation_quant(ModelSet ms) {
  if (!opts_.use_encodings) return;
  for (size_t s = 0; s < slot_names_.size(); ++s) {
    if (!constants_[s].empty_handle() || !initializer_of_[s].empty()) continue;
    const nf_encoding* e = ms.encoding(slot_names_[s]);
    if (!e || e->is_float || e->num_scales != 1) continue;
    if (e->bw < 2 || e->bw > 24 || !(e->scale[0] > 0))
      throw Error("cpu backend: encoding of activation '" + slot_names_[s] + "' has bw " + std::to_string(e->bw) +
                  " and scale " + std::to_string(e->scale[0]) + "; expected 2..24 bits and a positive scale");
    act_grid_[static_cast<int>(s)] = {e->scale[0], static_cast<float>(e->offset[0]), std::ldexp(1.f, e->bw) - 1};
  }
}

// t rounded onto the slot's activation grid, in a new buffer (t may alias an input, a
// constant or a caller's tensor); t itself when the slot has no encoding or is not float.
k::Tensor GraphPlan::quantized(int slot, const k::Tensor& t) const {
  auto g = act_grid_.find(slot);
  if (g == act_grid_.end() || t.empty_handle() || t.dtype() != NF_DTYPE_FLOAT32) return t;
  k::Tensor q = k::Tensor::zeros(NF_DTYPE_FLOAT32, t.dims());
  g->second.apply(t.data<float>(), q.mut<float>(), t.numel());
  return q;
}

void GraphPlan::plan_frees() {
  std::vector<int> last(slot_names_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (int s : nodes_[i].in)
      if (s >= 0) last[s] = static_cast<int>(i);
  for (const std::string& o : outputs_) last[slot(o)] = static_cast<int>(nodes_.size());  // never freed
  frees_after_.assign(nodes_.size(), {});
  for (size_t s = 0; s < last.size(); ++s)
    if (last[s] >= 0 && last[s] < static_cast<int>(nodes_.size()) && constants_[s].empty_handle())
      frees_after_[last[s]].push_back(static_cast<int>(s));
}

std::vector<char> GraphPlan::needed_nodes(std::vector<int> wanted) const {
  std::sort(wanted.begin(), wanted.end());
  std::lock_guard<std::mutex> lock(needed_mu_);
  auto it = needed_.find(wanted);
  if (it != needed_.end()) return it->second;
  std::vector<int> producer(slot_names_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (int s : nodes_[i].out)
      if (s >= 0) producer[s] = static_cast<int>(i);
  std::vector<char> need(nodes_.size(), 0);
  std::vector<int> todo = wanted;
  while (!todo.empty()) {
    const int s = todo.back();
    todo.pop_back();
    const int p = producer[s];
    if (p < 0 || need[p]) continue;
    need[p] = 1;
    for (int in : nodes_[p].in)
      if (in >= 0) todo.push_back(in);
  }
  if (needed_.size() < 64) needed_.emplace(std::move(wanted), need);  // callers ask for a few sets
  return need;
}

void GraphPlan::run(const char* const* input_names, const nf_tensor* const* inputs, size_t n_inputs,
                    const char* const* output_names, nf_tensor** outputs, size_t n_outputs) const {
  std::vector<k::Tensor> slots = constants_;
  std::vector<bool> bound(inputs_.size(), false);
  for (size_t i = 0; i < n_inputs; ++i) {
    std::string name = input_names[i];
    auto it = std::find_if(inputs_.begin(), inputs_.end(), [&](const Input& in) { return in.name == name; });
    if (it == inputs_.end()) throw Error("cpu backend: graph '" + graph_name_ + "' has no input '" + name + "'");
    Tensor t = Tensor::borrow(const_cast<nf_tensor*>(inputs[i]));
    const ValueType& vt = it->type;
    if (vt.dtype != NF_DTYPE_UNDEFINED && t.dtype() != vt.dtype)
      throw Error("cpu backend: input '" + name + "' is " + k::dtype_name(t.dtype()) + ", expected " + k::dtype_name(vt.dtype));
    std::vector<int64_t> dims = t.dims();
    bool shape_ok = vt.dims.empty() && vt.dtype == NF_DTYPE_UNDEFINED ? true : dims.size() == vt.dims.size();
    for (size_t d = 0; shape_ok && d < vt.dims.size(); ++d) shape_ok = vt.dims[d] < 0 || vt.dims[d] == dims[d];
    if (!shape_ok)
      throw Error("cpu backend: input '" + name + "' has shape " + k::dims_str(dims) + ", expected " + k::dims_str(vt.dims));
    slots[it->slot] = quantized(it->slot, from_host(t));
    bound[it - inputs_.begin()] = true;
  }
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (!bound[i]) throw Error("cpu backend: graph '" + graph_name_ + "': input '" + inputs_[i].name + "' is missing");

  // Requested values outlive their last use (callers may ask for intermediate activations).
  std::vector<bool> keep(slots.size(), false);
  std::vector<int> wanted;
  for (size_t i = 0; i < n_outputs; ++i) {
    auto it = slots_.find(output_names[i]);
    if (it == slots_.end())
      throw Error("cpu backend: graph '" + graph_name_ + "' has no value '" + std::string(output_names[i]) + "'");
    keep[it->second] = true;
    wanted.push_back(it->second);
  }
  const std::vector<char> needed = needed_nodes(std::move(wanted));

  RunCtx ctx{opts_.threads};
  std::vector<const k::Tensor*> in;
  std::vector<k::Tensor> out;
  std::map<int, std::shared_ptr<Tensor>> direct;  // slot -> host tensor its bytes live in
  std::vector<int64_t> node_ns(profile_ ? nodes_.size() : 0, -1);  // -1: not run
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!needed[i]) continue;
    const NodeDef& n = nodes_[i];
    const auto started = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    in.clear();
    for (int s : n.in) in.push_back(s < 0 ? nullptr : &slots[s]);
    out.assign(n.out.size(), k::Tensor());
    try {
      if (n.op == "Concat" && n.out[0] >= 0 && keep[n.out[0]]) {
        // A requested Concat (present.N.key|value = Concat(past, new)) is written straight
        // into the host tensor returned, so the KV cache is copied once per step, not twice.
        auto h = std::make_shared<Tensor>(concat_to_host(n, in));
        out[0] = k::Tensor::wrap(h->dtype(), h->dims(), h->mutable_data(), std::shared_ptr<const void>(h, h->data()));
        k::concat_into(in, n.attr_int("axis", 0), out[0]);
        direct[n.out[0]] = h;
      } else {
        n.run(in, out, ctx);
      }
    } catch (const std::exception& e) {
      throw Error("cpu backend: node " + n.node_name + " (" + n.op + "): " + e.what());
    }
    for (size_t o = 0; o < n.out.size(); ++o)
      if (n.out[o] >= 0) slots[n.out[o]] = quantized(n.out[o], out[o]);
    for (int s : frees_after_[i])
      if (!keep[s]) slots[s] = k::Tensor();
    if (profile_)
      node_ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
  }
  if (profile_) {
    int64_t rows = 0;
    for (size_t i = 0; i < n_inputs; ++i)
      if (std::string_view(input_names[i]) == decoder::kInputIds) {
        const std::vector<int64_t> dims = Tensor::borrow(const_cast<nf_tensor*>(inputs[i])).dims();
        rows = dims.empty() ? 0 : dims.back();
      }
    profile::add(graph_name_, rows, nodes_, node_ns);
  }

  std::vector<Tensor> result;
  for (size_t i = 0; i < n_outputs; ++i) {
    int s = slots_.at(output_names[i]);
    const k::Tensor& t = slots[s];
    if (t.empty_handle())
      throw Error("cpu backend: graph '" + graph_name_ + "': value '" + std::string(output_names[i]) + "' was not computed");
    auto d = direct.find(s);
    result.push_back(d != direct.end() && d->second->data() == t.raw() ? *d->second : to_host(t));
  }
  for (size_t i = 0; i < n_outputs; ++i) outputs[i] = result[i].release();
}

}  // namespace nf::engine
