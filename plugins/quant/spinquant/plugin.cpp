// spinquant: rotations that make weights and activations easier to quantize while the
// float model computes the same function (SpinQuant, Liu et al. 2024; AIMET applies R1).
//   1. RMSNorm gains are fused into the linear layers that read the norm (gains become 1).
//   2. R1: a random Hadamard rotation of the hidden size is fused into the embedding, every
//      layer reading the residual stream (q/k/v/gate/up/lm_head) and writing it (o/down).
//   3. R2 (option): a Hadamard of head_dim per head on the value and output projections.
//   R1/R2 are the learned ones of a rotations file when `rotations` names one.
//   4. R4 (option `online_down_proj`): an online Hadamard inserted before each down_proj (online.h).
// Weights are rewritten in place; run spinquant before the recipes that set encodings.
// The equations are in rotate.h, the Hadamard orders in hadamard.h.
#include <npuforge/graph/infer_shapes.h>
#include <npuforge/graph/dense_dispatch.h>
#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/kv_layers.h>
#include <npuforge/decoder_graph.hpp>
#include <npuforge/hf_config.hpp>
#include <npuforge/plugin.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <set>

#include "spinquant/graph_walk.h"
#include "spinquant/kv_prefix.h"
#include "spinquant/layer_norms.h"
#include "spinquant/online.h"
#include "spinquant/residual.h"
#include "spinquant/rotate.h"
#include "spinquant/rotation.h"
#include "spinquant/rotations_file.h"

namespace spinquant {
namespace {

const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "r1": {"type": "boolean", "default": true, "description": "rotate the residual stream (hidden size) with a Hadamard fused into weights"},
    "r2": {"type": "boolean", "default": false, "description": "also rotate each attention head's values (v_proj outputs, o_proj inputs); changes the stored V cache"},
    "seed": {"type": "integer", "minimum": 0, "default": 0, "description": "random signs of the Hadamard columns (0: all +1)"},
    "rotations": {"type": "string", "default": "", "format": "asset",
                  "description": "rotations.json of learned R1/R2 (tools/quant/train_spinquant.py; absolute or relative to the manifest's folder) used instead of random Hadamards; empty: none"},
    "online_down_proj": {"type": "boolean", "default": false,
                         "description": "R4: insert an online Hadamard before each down_proj, as two small MatMuls (P (x) Q, orders near sqrt of the intermediate size), its transpose folded into down_proj's weight; the A8 recipes keep its input at 16 bits"},
    "untie_embedding": {"type": "boolean", "default": false,
                        "description": "give a tied LM head its own copy of the embedding (required for tied models: the two get different rotations)"}
  }
})json";

struct Embedding {
  std::string weight, output;
};

Embedding find_embedding(const GraphView& gv) {
  const std::optional<nf::Node> n = nf::decoder::embedding_gather(gv.graph);
  if (n && gv.float_initializer(n->input(0)).dims().size() == 2) return {n->input(0), n->output(0)};
  throw nf::Error("spinquant: no token embedding (Gather of a 2-D float weight by input_ids) in the graph");
}

// `start` [.., D] read through an identity MatMul [D, D], which every former reader of
// `start` reads instead: the new stream start, with its weight as the "embedding".
Embedding stream_projection(nf::Graph& g, const std::string& start, int64_t D) {
  const Embedding e{start + ".stream_in.weight", start + ".stream_in"};
  nf::Tensor eye = nf::Tensor::create(NF_DTYPE_FLOAT32, std::vector<int64_t>{D, D});
  float* w = eye.mutable_as<float>();
  std::fill(w, w + D * D, 0.f);
  for (int64_t i = 0; i < D; ++i) w[i * D + i] = 1.f;
  g.set_initializer(e.weight, eye);
  for (nf::Node n : g.nodes())
    for (size_t i = 0; i < n.input_count(); ++i)
      if (n.input(i) == start) n.set_input(i, e.output);
  g.add_node("MatMul", {start, e.weight}, {e.output}, start + "/stream_in/MatMul");
  g.sort();
  return e;
}

// The node producing logits, walking back through passthrough/Reshape ops and what scales
// or offsets the logits after the head (Granite's logits_scaling, Gemma-2's tanh soft-capping,
// Phi-2's bias): the rotation is on the head's input, so nothing after it changes.
nf::Node lm_head_node(const GraphView& gv) {
  std::string v = "logits";
  for (int hops = 0; hops < 8; ++hops) {
    const nf::Node* p = gv.producer(v);
    if (!p) break;
    if (p->op_type() == "MatMul" || p->op_type() == "Gemm") return *p;
    const std::string scaled = scaled_operand(gv, *p);
    if (!scaled.empty()) {
      v = scaled;
      continue;
    }
    if (p->op_type() == "Add" && p->input_count() == 2) {  // the head's bias (Phi-2)
      const bool bias_first = static_cast<bool>(gv.float_initializer(p->input(0)));
      if (bias_first || gv.float_initializer(p->input(1))) {
        v = p->input(bias_first ? 1 : 0);
        continue;
      }
    }
    if (p->op_type() != "Reshape" && p->op_type() != "Tanh" && !passthrough(p->op_type())) break;
    v = p->input(0);
  }
  throw nf::Error("spinquant: no MatMul/Gemm produces the graph output 'logits'");
}

// Gives the LM head its own weight when it reads the embedding (Transpose(E) or Gemm with
// B = E); returns true when it did.
bool untie_structurally(GraphView& gv, const Embedding& emb, nf::Node head, bool allowed) {
  std::string b = head.input(1);
  const nf::Node* tr = gv.producer(b);
  const bool via_transpose = tr && tr->op_type() == "Transpose" && tr->input(0) == emb.weight;
  if (b != emb.weight && !via_transpose) return false;
  if (!allowed)
    throw nf::Error("spinquant: the LM head shares the embedding '" + emb.weight +
                    "' (tied); set untie_embedding = true to give it its own copy");
  // The head's own copy, written straight from the (mapped) table: one new table in memory,
  // which leaves for the scratch file once set (2.1 GB at 8B; three copies and the table
  // before).
  nf::Tensor e = gv.float_initializer(emb.weight);
  const std::vector<int64_t> d = e.dims();
  const int64_t V = d[0], H = d[1];
  const std::vector<int64_t> head_dims = via_transpose ? std::vector<int64_t>{H, V} : d;
  nf::Tensor copy = nf::Tensor::create(NF_DTYPE_FLOAT32, head_dims);
  const float* src = e.data_as<float>();
  float* dst = copy.mutable_as<float>();
  constexpr int64_t kTile = 64;  // rows of the table at a time; a tile of both layouts stays in cache
  for (int64_t v0 = 0; v0 < V; v0 += kTile) {
    const int64_t v1 = std::min(V, v0 + kTile);
    if (!via_transpose)
      std::memcpy(dst + v0 * H, src + v0 * H, static_cast<size_t>((v1 - v0) * H) * sizeof(float));
    else
      for (int64_t k0 = 0; k0 < H; k0 += kTile)
        for (int64_t v = v0; v < v1; ++v)
          for (int64_t k = k0; k < std::min(H, k0 + kTile); ++k) dst[k * V + v] = src[v * H + k];
    // Rows read leave the resident set: the table and its copy are not both in memory.
    e.drop_pages(static_cast<size_t>(v0 * H) * sizeof(float), static_cast<size_t>((v1 - v0) * H) * sizeof(float));
  }
  e = nf::Tensor();
  const std::string name = emb.weight + ".lm_head";
  gv.graph.set_initializer(name, copy);
  head.set_input(1, name);
  if (via_transpose && gv.consumers(tr->output(0)).size() == 1) gv.graph.remove_node(*tr);
  return true;
}

// R1 when it must also run online (after post-norms): P (x) Q, two small MatMuls there.
Rotation online_hadamard(int64_t D, uint64_t seed) {
  const int64_t p = outer_order(D);
  if (p == 1) return Rotation::random_hadamard(D, seed);
  return Rotation::kronecker(Rotation::random_hadamard(p, seed), Rotation::random_hadamard(D / p, seed == 0 ? 0 : seed + 2));
}

void apply_spinquant(const char* options_json, nf_model_set* handle, nf_context* ctx_handle) {
  nf::ModelSet ms(handle);
  nf::Context ctx(ctx_handle);
  nf::Options opts(options_json);
  const bool r1 = opts.get<bool>("r1", true), r2 = opts.get<bool>("r2", false);
  const uint64_t seed = static_cast<uint64_t>(opts.get<int64_t>("seed", 0));
  const bool untie = opts.get<bool>("untie_embedding", false);
  const bool online_down = opts.get<bool>("online_down_proj", false);
  const std::string rotations = opts.get<std::string>("rotations", "");
  std::optional<LearnedRotations> learned;
  if (!rotations.empty()) learned = load_rotations(rotations);
  // Beside the decoder only a KV prefix (graph state; its values turn with R2) may be there.
  const std::optional<nf::Graph> prefix = kv_prefix_graph(ms);
  if (ms.graph_count() != 1 + (prefix ? 1 : 0))
    throw nf::Error(ms.target_graphs().size() == 1
                        ? "spinquant: the model set holds a draft graph, which reads the target's hidden states and shares "
                          "its embedding and LM head; rotating them would leave the draft out of step"
                        : "spinquant: runs on the source decoder graph, before the transforms (" +
                              std::to_string(ms.graph_count()) + " graphs in the model set)");
  if (nf::host().model_set_encoding_count(ms.get()) != 0)
    throw nf::Error("spinquant: the model set already has encodings; list spinquant before the other [[quant]] recipes");
  nf::Graph g = ms.target_graphs().at(0);
  nlohmann::json config = ms.metadata("config");
  // HF's per-expert MoE loop (NonZero, gathered rows) made dense: its expert outputs then sum
  // into the stream times a one-column weight, which the rotation commutes with.
  if (nf::graph::densify_dispatch(g)) nf::graph::infer_shapes(g);

  auto gv = std::make_unique<GraphView>(g);
  Embedding emb = find_embedding(*gv);
  const int64_t D = gv->float_initializer(emb.weight).dims()[1];
  bool untied = untie_structurally(*gv, emb, lm_head_node(*gv), untie);
  if (untied) gv = std::make_unique<GraphView>(g);
  if (!untied && config.is_object() && config.value("tie_word_embeddings", false)) {
    // The export already holds two copies, but they are one parameter to HF: rotating
    // them differently unties them for good.
    if (!untie)
      throw nf::Error("spinquant: config.json ties the embedding and the LM head (tie_word_embeddings = true); set "
                      "untie_embedding = true to rotate them as separate weights");
    untied = true;
  }
  if (untied && config.is_object()) {
    config["tie_word_embeddings"] = false;
    ms.set_metadata("config", config);
  }

  // Bloom normalizes its embeddings before the stream (word_embeddings_layernorm): the stream
  // starts at that norm's output, which no weight writes. An identity projection after the
  // norm becomes the stream's first table: its columns take the centring and R1 as the
  // embedding's would. It costs one D x D MatMul per token.
  std::set<std::string> before_stream;
  {
    const nf::graph::GraphView plain(g);
    if (auto start = nf::graph::normalized_embedding(plain, emb.output, nf::graph::kv_layer_of_values(plain))) {
      before_stream = plain.upstream(*start, false);
      emb = stream_projection(g, *start, D);
      gv = std::make_unique<GraphView>(g);
    }
  }
  // LayerNorm models: the norms become RMSNorms over a centred stream (layer_norms.h).
  size_t folded_biases = 0;
  const std::vector<std::string> centred = rewrite_layer_norms(g, emb.output, D, before_stream, &folded_biases);
  if (!centred.empty()) gv = std::make_unique<GraphView>(g);
  // The stream, and the norms that read it: their gains go into their readers. Norms of the
  // hidden size elsewhere (OLMo-2's q/k norms) keep theirs; norms after a writer (post_norms)
  // keep theirs and get R1 online after them.
  const std::vector<RmsNorm> hidden_norms = find_rms_norms(*gv, D);
  const ResidualStream stream = find_residual_stream(*gv, emb.output, hidden_norms);
  std::vector<RmsNorm> norms;
  for (const RmsNorm& n : hidden_norms)
    if (stream.values.count(n.input)) norms.push_back(n);
  if (norms.empty()) throw nf::Error("spinquant: no RMSNorm or LayerNorm of the hidden size " + std::to_string(D) + " reads the residual stream");
  if (!centred.empty() && !stream.post_norms.empty())
    throw nf::Error("spinquant: LayerNorms with norms after attention or MLP ('" + stream.post_norms[0].norm.output +
                    "'): the stream cannot be centred");
  WeightEdits edits;
  auto fused = fuse_norm_gains(*gv, norms, edits);
  size_t n_readers = 0, n_writers = 0;

  std::set<std::string> tables(stream.tables.begin(), stream.tables.end());
  if (tables.count(emb.weight))
    throw nf::Error("spinquant: the token embedding '" + emb.weight + "' is also added to the residual stream as a table");
  if (!centred.empty()) {
    edits.centre_columns(emb.weight);
    for (const auto& t : tables) edits.centre_columns(t);
    for (const auto& w : stream.writers) edits.centre_output(w);
  }
  if (learned && learned->hidden != D)
    throw nf::Error("spinquant: rotations '" + learned->path + "' hold R1 of size " + std::to_string(learned->hidden) +
                    " but the model's hidden size is " + std::to_string(D));
  std::optional<Rotation> r1_rotation;
  std::vector<OnlineRotation> online;
  if (r1) {
    if (learned && !stream.post_norms.empty())
      throw nf::Error("spinquant: rotations '" + learned->path + "': norms after attention or MLP ('" +
                      stream.post_norms[0].norm.output + "') need R1 online, which a learned R1 would make a dense " +
                      std::to_string(D) + "x" + std::to_string(D) + " MatMul per norm; use the Hadamard R1");
    r1_rotation = learned ? Rotation::dense(learned->r1, D)
                  : stream.post_norms.empty() ? Rotation::random_hadamard(D, seed)
                                              : online_hadamard(D, seed);
    const Rotation& R = *r1_rotation;
    edits.rotate_columns(emb.weight, R);
    for (const auto& t : tables) edits.rotate_columns(t, R);
    for (const auto& w : stream.writers) edits.rotate_output(w, R);
    for (const auto& l : stream.readers) edits.rotate_input(l, R);
    for (const auto& f : fused)
      for (const auto& l : f.readers) edits.rotate_input(l, R);
    for (const auto& f : fused) n_readers += f.readers.size();
    n_readers += stream.readers.size();
    n_writers = stream.writers.size();
    // A post-norm's output, in the writer's (unrotated) basis, is turned by R before its Add.
    for (const PostNorm& p : stream.post_norms) {
      const std::string y = p.added + ".online_r1";
      for (auto& r : write_online_rotation(g, p.added, y, R, p.norm.gain + ".online_r1")) online.push_back(std::move(r));
      for (nf::Node n : g.nodes())
        if (n.output_count() > 0 && n.output(0) == p.add_output)
          for (size_t i = 0; i < n.input_count(); ++i)
            if (n.input(i) == p.added) n.set_input(i, y);
    }
    g.sort();
    gv = std::make_unique<GraphView>(g);
  }

  size_t n_heads = 0;
  std::deque<Rotation> r2_rotations;  // stable addresses for the edits
  if (r2) {
    namespace hf = nf::hf_config;
    const int64_t head_dim = hf::get_int(config, "head_dim")
                                 .value_or(hf::get_int(config, "hidden_size").value_or(0) /
                                           hf::get_int(config, "num_attention_heads").value_or(1));
    if (head_dim <= 0) throw nf::Error("spinquant: r2 needs head_dim (or hidden_size and num_attention_heads) in config.json");
    r2_rotations.push_back(Rotation::random_hadamard(head_dim, seed == 0 ? 0 : seed + 1));
    auto attention = find_attention(*gv);
    if (attention.empty()) throw nf::Error("spinquant: r2: no attention (Softmax @ V) in the graph");
    if (learned && (learned->head_dim != head_dim || learned->r2.size() != attention.size()))
      throw nf::Error("spinquant: rotations '" + learned->path + "' hold " + std::to_string(learned->r2.size()) +
                      " R2 of size " + std::to_string(learned->head_dim) + " but the model has " +
                      std::to_string(attention.size()) + " attention layers of head_dim " + std::to_string(head_dim));
    if (learned) {
      r2_rotations.clear();
      for (const auto& R : learned->r2) r2_rotations.push_back(Rotation::dense(R, head_dim));
    }
    for (size_t i = 0; i < attention.size(); ++i) {  // graph order = layer order
      const Rotation& R = r2_rotations[learned ? i : 0];
      edits.rotate_output(attention[i].v_proj, R);
      edits.rotate_input(attention[i].o_proj, R);
    }
    n_heads = attention.size();
  }
  if (learned && !r2) ctx.warn("spinquant: r2 = false: the R2 matrices of '" + learned->path + "' are not applied");
  std::map<int64_t, Rotation> online_hadamards;
  size_t online_downs = 0;
  if (online_down) {
    auto downs = down_projections(*gv, stream);
    if (downs.empty())
      throw nf::Error("spinquant: online_down_proj: no down projection (a residual writer reading an elementwise Mul, "
                      "the SwiGLU product) in the graph");
    for (auto& r : insert_online_hadamards(*gv, downs, edits, online_hadamards)) online.push_back(std::move(r));
    online_downs = downs.size();
  }
  if (!online.empty()) {
    // The A8 recipes read this to keep each rotation's input at 16 bits (npuforge/quant/helpers.h).
    nlohmann::json record = nlohmann::json::array();
    for (const auto& r : online)
      record.push_back({{"weight", r.weight}, {"input", r.input}, {"output", r.output}, {"inner", r.inner}});
    ms.set_metadata("online_rotations", record);
  }
  edits.apply(g, ctx);
  if (r2 && prefix) rotate_prefix_values(*prefix, r2_rotations, n_heads);
  ctx.info((centred.empty() ? std::string()
                            : std::to_string(centred.size()) + " LayerNorms made RMSNorms over the centred stream (" +
                                  std::to_string(folded_biases) + " biases folded into their readers); ") +
           std::to_string(fused.size()) + " RMSNorm gains fused" +
           (learned ? "; learned rotations from " + learned->path : std::string()) +
           (online_downs ? "; R4 online Hadamard before " + std::to_string(online_downs) + " down projections" : std::string()) +
           (r1 ? "; R1 (" + std::string(learned ? "learned " : "Hadamard ") + std::to_string(D) + ") on the embedding, " + std::to_string(n_readers) +
                     " readers and " + std::to_string(n_writers) + " writers of the residual stream" +
                     (stream.post_norms.empty() ? std::string()
                                                : ", online after " + std::to_string(stream.post_norms.size()) + " norms of writers")
               : std::string()) +
           (r2 ? "; R2 on " + std::to_string(n_heads) + " attention blocks" + (prefix ? " and the KV prefix's values" : "")
               : std::string()) +
           (untied ? "; LM head untied from the embedding" : ""));
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_calibration*, nf_context* ctx) {
  return NF_TRY(apply_spinquant(options_json, handle, ctx));
}

const nf_quant_api kApi = {NF_ABI_VERSION, sizeof(nf_quant_api), apply, nullptr, nullptr, nullptr};

const nf_plugin_descriptor kDescriptor = {
    NF_ABI_VERSION,
    sizeof(nf_plugin_descriptor),
    NF_KIND_QUANT,
    "spinquant",
    "0.4.0",
    "LayerNorms made RMSNorms over a centred stream, RMSNorm gains fused, then random-Hadamard or learned rotations (R1 hidden, R2 per head) fused into weights; optional online Hadamard (R4) before down_proj",
    kSchema,
    &kApi,
};

}  // namespace
}  // namespace spinquant

NF_PLUGIN_LIBRARY(&spinquant::kDescriptor)
