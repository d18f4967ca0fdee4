#include "simulator.h"

#include <npuforge/hf_config.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace nf::aries {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Cores that work on one sequence, and the barrier cost after each GEMM group.
struct ModeShape {
  int cores = 1;
  double sync_cycles = 0;
};

ModeShape mode_shape(const std::string& mode, const Device& d) {
  if (mode == "global4") return {std::min(4, d.local_cores_per_cluster), d.sync_cycles_cluster};
  if (mode == "global8") return {std::min(8, d.local_cores()), d.sync_cycles_chip};
  return {1, 0};  // single, multi: one core per sequence
}

double act_bytes(bool wide) { return wide ? 2.0 : 1.0; }

// Tiles along one side of a weight: heads stay whole on the array (a head never straddles
// two tiles; heads narrower than a tile share one), so a head_dim that does not divide the
// tile or is not a multiple of it leaves part of each tile empty (EXAONE-3.5's 80-wide heads
// take two 64-wide tiles). head_dim 0: a plain width, tiles filled in order.
int64_t tiles(int64_t width, int64_t side, int64_t head_dim) {
  if (head_dim <= 0 || width % head_dim != 0) return ceil_div(width, side);
  const int64_t heads = width / head_dim;
  return head_dim <= side ? ceil_div(heads, side / head_dim) : heads * ceil_div(head_dim, side);
}

// One GEMM of rows x K x N on a core's weight-stationary array, N split over `cores` (whole
// heads each when N is made of heads: head_dim_n > 0; head_dim_k > 0 when K is).
// Tile utilization: tiles(K) x tiles(N_core) folds, a partly filled tile costs a full one.
// Each fold first brings its weight tile from DRAM (at the core's
// share of the bandwidth; the array holds one tile, so fetch and streaming do not overlap),
// then streams the rows through. The rows' inputs (K wide) and outputs (N_core wide) must
// sit in the on-chip buffer beside the tile; when they do not, the rows run in blocks that
// fit and every block fetches every weight tile again, and the activations go through DRAM.
struct Gemm {
  double fetch_cycles = 0, stream_cycles = 0, weight_bytes = 0, spill_bytes = 0;
  int64_t blocks = 1;
};

struct GemmShape {
  int64_t rows = 0, K = 0, N = 0;
  int64_t head_dim_k = 0, head_dim_n = 0;
};

Gemm gemm(const Device& d, const GemmShape& s, int cores, double passes, double a_in, double a_out, int w_bits,
          double dram_bytes_per_cycle) {
  Gemm g;
  const int64_t rows = s.rows, K = s.K, N = s.N;
  const int64_t n_core = s.head_dim_n > 0 && N % s.head_dim_n == 0
                             ? ceil_div(N / s.head_dim_n, cores) * s.head_dim_n
                             : ceil_div(N, cores);
  const double folds = static_cast<double>(tiles(K, d.mac_rows, s.head_dim_k)) *
                       static_cast<double>(tiles(n_core, d.mac_cols, s.head_dim_n));
  const double tile_bytes = static_cast<double>(d.mac_rows) * d.mac_cols * w_bits / 8.0;
  const double fetch = std::max(d.weight_tile_load_cycles, tile_bytes / dram_bytes_per_cycle);
  const double per_row = static_cast<double>(K) * a_in + static_cast<double>(n_core) * a_out;
  const double room = std::max(0.0, d.onchip_buffer_bytes - tile_bytes);
  const int64_t fit_rows = std::clamp<int64_t>(static_cast<int64_t>(room / per_row), 1, std::max<int64_t>(rows, 1));
  g.blocks = ceil_div(rows, fit_rows);
  g.fetch_cycles = folds * static_cast<double>(g.blocks) * fetch;
  g.stream_cycles = folds * static_cast<double>(rows) * passes / d.mac_efficiency;
  g.weight_bytes = static_cast<double>(g.blocks) * static_cast<double>(K) * static_cast<double>(N) * w_bits / 8.0;
  if (g.blocks > 1) g.spill_bytes = 2.0 * static_cast<double>(rows) * per_row * cores;  // written, read back
  return g;
}

bool wide_input(const AriesOptions& o, const LinearCost& l) {
  if (l.ffn_down && o.act16("ffn_down")) return true;
  return l.kind != Kind::other && o.act16(kind_name(l.kind));
}

}  // namespace

MemoryPlan memory_plan(const SimModel& m, const AriesOptions& o, int64_t cache_len) {
  MemoryPlan p;
  for (const auto& l : m.linears)
    p.weight_bytes += static_cast<double>(l.K * l.N) * l.bits / 8.0 + static_cast<double>(l.N) * 4.0;
  const ModelShape& s = m.shape;
  double kv_b = act_bytes(o.act16("kv_cache"));
  p.kv_cache_bytes = static_cast<double>(o.llm.batch_size) * cache_len * s.layers * 2.0 * s.kv_heads * s.head_dim * kv_b;
  // Scratch: a chunk's widest activation in and out (16-bit worst case) plus one head's scores.
  double rows = static_cast<double>(std::max<int64_t>(o.prefill_chunk, 1));
  double widest = static_cast<double>(std::max({s.hidden, s.intermediate, s.vocab}));
  p.activation_bytes = static_cast<double>(o.llm.batch_size) * (rows * widest * 2.0 * 2.0 + rows * cache_len * 2.0);
  return p;
}

PassTime pass_time(const SimModel& m, const AriesOptions& o, const Device& d, int64_t rows, int64_t keys,
                   int64_t head_rows, int64_t sequences) {
  const ModelShape& s = m.shape;
  ModeShape ms = mode_shape(o.core_mode, d);
  // Sequences run on cores of their own (single mode); past the core count they take turns.
  int64_t rounds = ceil_div(sequences, std::max(1, d.local_cores() / ms.cores));
  int64_t concurrent = std::min<int64_t>(sequences, std::max(1, d.local_cores() / ms.cores));
  double passes16 = d.int16_activation_passes;
  double kv_b = act_bytes(o.act16("kv_cache"));

  PassTime t;
  // The cores working at once share the DRAM bandwidth.
  const double dram_per_cycle =
      d.dram_bandwidth_bytes_per_s / d.clock_hz / static_cast<double>(ms.cores * concurrent);
  double fetch = 0, stream = 0, weight_bytes = 0, other_bytes = 0;
  for (const auto& l : m.linears) {
    int64_t r = l.block < 0 ? head_rows : rows;
    if (r == 0) continue;
    bool wide = wide_input(o, l);
    // A 16-bit input runs as two 8-bit passes; a 16-bit output (the down projection's input
    // is produced by gate/up) takes twice the buffer.
    bool wide_out = l.kind == Kind::ffn && !l.ffn_down && o.act16("ffn_down");
    // The attention's projections hold whole heads: q / k / v on their outputs, o on its input.
    GemmShape shape{r, l.K, l.N};
    if (l.kind == Kind::query || l.kind == Kind::key || l.kind == Kind::value) shape.head_dim_n = s.head_dim;
    if (l.kind == Kind::output) shape.head_dim_k = s.head_dim;
    Gemm g = gemm(d, shape, ms.cores, wide ? passes16 : 1.0, act_bytes(wide), act_bytes(wide_out), l.bits,
                  dram_per_cycle);
    fetch += g.fetch_cycles;
    stream += g.stream_cycles;
    weight_bytes += g.weight_bytes + static_cast<double>(l.N) * 4.0;  // + fp32 scale per channel
    other_bytes += g.spill_bytes;
  }
  // Attention and vector work of every block (heads split across the cores): QK^T and PV
  // stream the chunk's rows against the cached keys/values, softmax etc. on the vector unit.
  int64_t heads_core = ceil_div(s.heads, ms.cores);
  double att_cyc = static_cast<double>(heads_core) *
                   (static_cast<double>(ceil_div(s.head_dim, d.mac_rows) * ceil_div(keys, d.mac_cols)) +
                    static_cast<double>(ceil_div(keys, d.mac_rows) * ceil_div(s.head_dim, d.mac_cols))) *
                   static_cast<double>(rows) * passes16 / d.mac_efficiency;
  double vec_elems = static_cast<double>(rows) *
                     (4.0 * heads_core * keys                                              // softmax
                      + (8.0 * s.hidden + 3.0 * (s.heads + s.kv_heads) * s.head_dim) / ms.cores  // norms, residuals, RoPE
                      + 4.0 * static_cast<double>(s.intermediate) / ms.cores);                 // SiLU gate
  double blocks = static_cast<double>(s.layers);
  stream += blocks * (att_cyc + vec_elems / d.vector_elems_per_cycle);
  // The KV cache is read (keys, values) and the new rows written, overlapped with compute.
  other_bytes += blocks * 2.0 * s.kv_heads * s.head_dim * kv_b * static_cast<double>(keys + rows);
  const double seqs = static_cast<double>(sequences), r = static_cast<double>(rounds);
  t.dram_bytes = (weight_bytes + other_bytes) * seqs;
  // Weight tiles arrive before their rows stream (serial); KV and spill traffic overlaps the
  // streaming. Concurrent sequences (single mode, batch) run on cores of their own.
  const double fetch_s = fetch / d.clock_hz * r;
  t.compute_s = stream / d.clock_hz * r;
  t.dram_s = fetch_s + other_bytes * static_cast<double>(concurrent) / d.dram_bandwidth_bytes_per_s * r;
  t.sync_s = ms.cores > 1 ? blocks * 4.0 * ms.sync_cycles / d.clock_hz * r : 0.0;
  t.overhead_s = static_cast<double>(m.parts) * d.invoke_overhead_s * r;
  t.seconds = fetch_s + std::max(t.compute_s, t.dram_s - fetch_s) + t.sync_s + t.overhead_s;
  t.bound = t.overhead_s + t.sync_s > t.seconds / 2 ? "overhead" : t.dram_s >= t.compute_s ? "dram" : "compute";
  return t;
}

nlohmann::json graph_pass(const GraphPass& pass, const AriesOptions& o, const Device& d) {
  SimModel m;  // no blocks: no attention or vector work, only the linears
  for (const auto& [K, N] : pass.linears) {
    LinearCost l;
    l.block = 0;
    l.K = K;
    l.N = N;
    m.linears.push_back(l);
  }
  PassTime t = pass_time(m, o, d, static_cast<int64_t>(std::ceil(pass.rows)), 0, 0, 1);
  return {{"backend", "aries"},
          {"device", o.device},
          {"simulated", true},
          {"graph_pass_ms", (t.seconds - t.overhead_s) * 1e3},
          {"per_graph_ms", d.invoke_overhead_s * 1e3},
          {"weights_stored_as", "int8"}};
}

// Families whose MLP is up -> activation -> down, without Llama's gate: GPT-2, GPT-NeoX, GPT-J,
// GPT-Neo, OPT, Bloom, Falcon, MPT, Phi-2, StarCoder2, GPT-BigCode, Nemotron (squared ReLU).
bool plain_mlp(const nlohmann::json& config) {
  static const std::set<std::string> kPlain = {"gpt2", "gpt_neox", "gptj", "gpt_neo", "opt", "bloom", "falcon",
                                               "mpt", "phi", "starcoder2", "gpt_bigcode", "nemotron"};
  const nlohmann::json& c = hf_config::decoder_of(config);
  return c.contains("model_type") && c["model_type"].is_string() && kPlain.count(c["model_type"].get<std::string>());
}

SimModel decoder_from_config(const nlohmann::json& c, const BitConfig& b) {
  SimModel m;
  ModelShape& s = m.shape;
  // A config's FFN sizes are one expert's: costing them as one dense MLP would be wrong in
  // both directions (a decode step reads the routed experts, a prefill chunk most of them).
  const nlohmann::json& d = hf_config::decoder_of(c);
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"}) {
    if (d.contains(key) && d[key].is_number_integer() && d[key].get<int64_t>() > 1)
      throw Error(std::string("config: a mixture of experts (") + key + " " + std::to_string(d[key].get<int64_t>()) +
                  "): only dense decoders are predicted from a config; compile a package of the model instead");
  }
  auto need = [&](const char* key) {
    if (auto v = hf_config::get_int(c, key)) return *v;
    std::string names = key;
    for (const auto& a : hf_config::aliases(key)) names += ", " + a;
    throw Error(std::string("config: no positive integer ") + names);
  };
  s.layers = need("num_hidden_layers");
  s.hidden = need("hidden_size");
  s.heads = need("num_attention_heads");
  s.kv_heads = hf_config::get_int(c, "num_key_value_heads").value_or(s.heads);
  s.head_dim = hf_config::get_int(c, "head_dim").value_or(s.hidden / s.heads);
  s.intermediate = need("intermediate_size");
  s.vocab = need("vocab_size");
  s.static_graph = false;
  const bool plain = plain_mlp(c);
  for (int64_t l = 0; l < s.layers; ++l) {
    m.linears.push_back({Kind::query, false, l, s.hidden, s.heads * s.head_dim, b.query});
    m.linears.push_back({Kind::key, false, l, s.hidden, s.kv_heads * s.head_dim, b.key});
    m.linears.push_back({Kind::value, false, l, s.hidden, s.kv_heads * s.head_dim, b.value});
    m.linears.push_back({Kind::output, false, l, s.heads * s.head_dim, s.hidden, b.output});
    m.linears.push_back({Kind::ffn, false, l, s.hidden, s.intermediate, b.ffn});
    if (!plain) m.linears.push_back({Kind::ffn, false, l, s.hidden, s.intermediate, b.ffn});  // the gate
    m.linears.push_back({Kind::ffn, true, l, s.intermediate, s.hidden, b.ffn});
  }
  m.linears.push_back({Kind::head, false, -1, s.hidden, s.vocab, b.head});
  return m;
}

nlohmann::json simulate(const SimModel& m, const AriesOptions& o, const Device& d, Workload w) {
  int64_t cache = o.llm.max_cache_length > 0 ? o.llm.max_cache_length : 4096;
  int64_t prompt = w.prompt_len > 0 ? w.prompt_len : std::min<int64_t>(240, cache);
  int64_t context = w.context_len > 0 ? w.context_len : cache;
  if (prompt > cache)
    throw Error("aries backend: prompt_len " + std::to_string(prompt) + " exceeds the package's llm.max_cache_length " +
                std::to_string(cache));
  if (context > cache)
    throw Error("aries backend: context_len " + std::to_string(context) + " exceeds the package's llm.max_cache_length " +
                std::to_string(cache));
  if (w.pass_rows > cache)
    throw Error("aries backend: pass_rows " + std::to_string(w.pass_rows) + " exceeds the package's llm.max_cache_length " +
                std::to_string(cache));
  const int64_t chunk = std::min(o.prefill_chunk, cache);
  const int64_t batch = o.llm.batch_size;

  // Prefill: static chunks (the last one padded); chunk i attends over (i + 1) * chunk slots;
  // the head runs on the last row only.
  double ttft = 0, prefill_dram = 0;
  int64_t chunks = (prompt + chunk - 1) / chunk;
  nlohmann::json chunk_ms = nlohmann::json::array();
  for (int64_t i = 0; i < chunks; ++i) {
    PassTime p = pass_time(m, o, d, chunk, std::min(cache, (i + 1) * chunk), i + 1 == chunks ? 1 : 0, 1);
    ttft += p.seconds;
    prefill_dram += p.dram_bytes;
    chunk_ms.push_back(p.seconds * 1e3);
  }
  PassTime dec = pass_time(m, o, d, 1, context, 1, batch);
  MemoryPlan mem = memory_plan(m, o, cache);

  nlohmann::json notes = nlohmann::json::array();
  notes.push_back("simulated with the " + d.id + " data file (fitted: DRAM bandwidth on Llama-3.2-1B decode, MAC efficiency on its TTFT, on-chip buffer on Llama-3.1-8B's TTFT; see the plugin README)");
  if (!m.activations_calibrated && !m.estimate_only)
    notes.push_back("no calibration encodings in the model set: timing assumes int8 activations, execution ran them in float");
  if (m.estimate_only) notes.push_back("estimate_only package: shapes and bit config only, no weights");
  if (o.llm.batch_size > 1)
    notes.push_back("batch " + std::to_string(batch) + " in single core mode: decode_tokens_per_s is the sum over the batch");

  nlohmann::json j;
  j["backend"] = "aries";
  j["device"] = d.id;
  j["simulated"] = true;
  j["core_mode"] = o.core_mode;
  j["prompt_len"] = prompt;
  j["context_len"] = context;
  j["prefill_chunk"] = chunk;
  j["ttft_ms"] = ttft * 1e3;
  j["prefill_tokens_per_s"] = static_cast<double>(prompt) / ttft;
  j["decode_ms_per_token"] = dec.seconds * 1e3;
  j["decode_tokens_per_s"] = static_cast<double>(batch) / dec.seconds;
  j["decode_bound"] = dec.bound;
  j["memory_bytes"] = static_cast<int64_t>(mem.total());
  j["weight_bytes"] = static_cast<int64_t>(mem.weight_bytes);
  j["kv_cache_bytes"] = static_cast<int64_t>(static_cast<double>(batch) * context * m.shape.layers * 2.0 *
                                             m.shape.kv_heads * m.shape.head_dim * act_bytes(o.act16("kv_cache")));
  j["kv_cache_reserved_bytes"] = static_cast<int64_t>(mem.kv_cache_bytes);
  j["activation_bytes"] = static_cast<int64_t>(mem.activation_bytes);
  j["dram_bytes_per_token"] = static_cast<int64_t>(dec.dram_bytes);
  j["batch_size"] = batch;
  if (w.pass_rows > 0) {
    // A tree pass (speculative decoding): the compiled graph of the fewest rows that holds
    // them (the largest, called again, when none does), every row through the head, after
    // context_len cached tokens.
    const int64_t graph_rows = m.shape.graph_rows_for(w.pass_rows);
    const int64_t calls = ceil_div(w.pass_rows, graph_rows);
    PassTime p = pass_time(m, o, d, graph_rows, context, graph_rows, 1);
    double seconds = p.seconds;
    if (m.tree_depth > 1) {
      // The draft tree: each later pass attends over the catch-up rows and the passes before
      // it, in the same invocation. The expansion's top-k (k = branches over the head's
      // columns, lowered to k rounds of max-and-mask) and log-softmax run on the vector unit.
      const int64_t B = m.tree_branches;
      for (int64_t depth = 1; depth < m.tree_depth; ++depth) {
        PassTime q = pass_time(m, o, d, B, context + graph_rows + depth * B, B, 1);
        seconds += q.seconds - q.overhead_s;
      }
      const double rows = 1.0 + static_cast<double>((m.tree_depth - 1) * B);
      seconds += rows * static_cast<double>(m.shape.vocab) * (4.0 + 3.0 * static_cast<double>(B)) / d.vector_elems_per_cycle /
                 d.clock_hz;
    }
    j["pass"] = {{"rows", w.pass_rows}, {"graph_rows", graph_rows}, {"calls", calls}, {"context_len", context},
                 {"ms", static_cast<double>(calls) * seconds * 1e3}, {"bound", p.bound}};
  }
  j["notes"] = notes;
  j["breakdown"] = {
      {"prefill_chunks", chunks},
      {"prefill_chunk_ms", chunk_ms},
      {"prefill_dram_bytes", prefill_dram},
      {"decode", {{"compute_ms", dec.compute_s * 1e3}, {"dram_ms", dec.dram_s * 1e3}, {"sync_ms", dec.sync_s * 1e3},
                  {"overhead_ms", dec.overhead_s * 1e3}}},
      {"parts", m.parts},
      {"device_memory_bytes", d.dram_bytes - d.dram_reserved_bytes}};
  return j;
}

}  // namespace nf::aries
