#include "simulator.h"

#include <algorithm>
#include <cmath>

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

// A GEMM of rows x K x N on one core's array, N split over `cores`: fold-based cycles; the
// next weight tile loads while the current one streams its rows.
double gemm_cycles(const Device& d, int64_t rows, int64_t K, int64_t N, int cores, double passes) {
  int64_t n_core = ceil_div(N, cores);
  double folds = static_cast<double>(ceil_div(K, d.mac_rows)) * static_cast<double>(ceil_div(n_core, d.mac_cols));
  return folds * std::max(d.weight_tile_load_cycles, static_cast<double>(rows) * passes / d.mac_efficiency);
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
  double layer_compute = 0, layer_dram = 0;
  double head_compute = 0, head_dram = 0;
  for (const auto& l : m.linears) {
    bool head = l.block < 0;
    int64_t r = head ? head_rows : rows;
    if (r == 0) continue;
    bool wide = wide_input(o, l);
    double cyc = gemm_cycles(d, r, l.K, l.N, ms.cores, wide ? passes16 : 1.0);
    double bytes = static_cast<double>(l.K * l.N) * l.bits / 8.0 + static_cast<double>(l.N) * 4.0;
    // Activations that do not fit the core's buffer go to DRAM and back.
    double tile = static_cast<double>(r) * (l.K + ceil_div(l.N, ms.cores)) * act_bytes(wide);
    if (tile > d.onchip_buffer_bytes) bytes += 2.0 * tile * ms.cores;
    (head ? head_compute : layer_compute) += cyc;
    (head ? head_dram : layer_dram) += bytes;
  }
  // Attention and vector work of every block (heads split across the cores).
  int64_t heads_core = ceil_div(s.heads, ms.cores);
  double att_cyc = static_cast<double>(heads_core) *
                   (gemm_cycles(d, rows, s.head_dim, keys, 1, passes16) + gemm_cycles(d, rows, keys, s.head_dim, 1, passes16));
  double vec_elems = static_cast<double>(rows) *
                     (4.0 * heads_core * keys                                              // softmax
                      + (8.0 * s.hidden + 3.0 * (s.heads + s.kv_heads) * s.head_dim) / ms.cores  // norms, residuals, RoPE
                      + 4.0 * static_cast<double>(s.intermediate) / ms.cores);                 // SiLU gate
  double blocks = static_cast<double>(s.layers);
  double per_block_compute = att_cyc + vec_elems / d.vector_elems_per_cycle;
  double kv_bytes_block = 2.0 * s.kv_heads * s.head_dim * kv_b * static_cast<double>(keys + rows);
  double compute_cycles = layer_compute + blocks * per_block_compute + head_compute;
  double dram = layer_dram + head_dram + blocks * kv_bytes_block;
  // Concurrent sequences each stream their own weights over the shared DRAM.
  t.dram_bytes = dram * static_cast<double>(sequences);
  t.compute_s = compute_cycles / d.clock_hz * static_cast<double>(rounds);
  t.dram_s = dram * static_cast<double>(concurrent) / d.dram_bandwidth_bytes_per_s * static_cast<double>(rounds);
  // Per block (and per part) the compute and the DRAM streams overlap; take the larger.
  t.sync_s = ms.cores > 1 ? blocks * 4.0 * ms.sync_cycles / d.clock_hz * static_cast<double>(rounds) : 0.0;
  t.overhead_s = static_cast<double>(m.parts) * d.invoke_overhead_s * static_cast<double>(rounds);
  t.seconds = std::max(t.compute_s, t.dram_s) + t.sync_s + t.overhead_s;
  t.bound = t.overhead_s + t.sync_s > std::max(t.compute_s, t.dram_s) ? "overhead"
            : t.dram_s >= t.compute_s                                  ? "dram"
                                                                       : "compute";
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

SimModel llama_from_config(const nlohmann::json& c, const BitConfig& b) {
  SimModel m;
  ModelShape& s = m.shape;
  s.layers = c.at("num_hidden_layers");
  s.hidden = c.at("hidden_size");
  s.heads = c.at("num_attention_heads");
  s.kv_heads = c.value("num_key_value_heads", s.heads);
  s.head_dim = c.value("head_dim", s.hidden / s.heads);
  s.intermediate = c.at("intermediate_size");
  s.vocab = c.at("vocab_size");
  s.static_graph = false;
  for (int64_t l = 0; l < s.layers; ++l) {
    m.linears.push_back({Kind::query, false, l, s.hidden, s.heads * s.head_dim, b.query});
    m.linears.push_back({Kind::key, false, l, s.hidden, s.kv_heads * s.head_dim, b.key});
    m.linears.push_back({Kind::value, false, l, s.hidden, s.kv_heads * s.head_dim, b.value});
    m.linears.push_back({Kind::output, false, l, s.heads * s.head_dim, s.hidden, b.output});
    m.linears.push_back({Kind::ffn, false, l, s.hidden, s.intermediate, b.ffn});
    m.linears.push_back({Kind::ffn, false, l, s.hidden, s.intermediate, b.ffn});
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
  notes.push_back("simulated with the " + d.id + " data file (fitted: DRAM bandwidth on Llama-3.2-1B decode, MAC efficiency on its TTFT; see the plugin README)");
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
