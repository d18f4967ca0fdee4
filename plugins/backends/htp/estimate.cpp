#include "estimate.h"

#include <npuforge/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace nf::htp {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kHmxTile = 32;  // rows/columns of one HMX tile pass

struct Cost {
  double seconds = 0, compute_s = 0, dram_s = 0, activation_dram_s = 0, overhead_s = 0;
  double dram_bytes = 0, macs = 0;
};

double vtcm_bytes(const HtpOptions& o) { return o.vtcm_size_in_mb * kMiB; }

// DRAM bytes/s the NPU draws: its own ceiling from the chip file (not the SoC's peak).
double npu_bandwidth(const HtpOptions& o) {
  if (!o.chip.npu_bytes_per_s)
    throw Error("htp: chip " + o.chipset + " has no NPU bandwidth in " + o.chip.file +
                " (dram.npu_gb_per_s is null): cannot estimate; add the figure with its source");
  return *o.chip.npu_bytes_per_s;
}

// An HMX op on fp16 activations over integer weights (AI Hub's "w4": 4-bit weights, fp16
// activations) first expands its weights to fp16 on the vector units; the expansion is paid
// on every pass, in series with the op, and scales with the weight count, not the rows.
double weight_expand_s(const HtpOptions& o, const nlohmann::json& op) {
  const auto& rate = o.chip.fp16_weight_expand_per_s;
  if (!rate)
    throw Error("htp: chip " + o.chipset + " has no fp16_weight_expand_per_s in " + o.chip.file +
                ": cannot estimate an fp16-activation op over integer weights; add the figure with its source");
  return op.value("k", 1.0) * op.value("n", 1.0) / *rate;
}

std::string precision_of(const nlohmann::json& op) {
  int a = op.value("a_bits", 16), w = op.value("w_bits", 16);
  bool a_int = op.value("a_int", false), w_int = op.value("w_int", false);
  if (!a_int || !w_int) return "fp16";
  if (a <= 8 && w <= 8) return "a8w8";
  if (op.value("w_lpbq", false) || w <= 4) return "a16w4";
  if (w <= 8) return "a16w8";
  return "a16w16";
}

Cost graph_cost(const HtpOptions& o, const nlohmann::json& meta, const nlohmann::json& g) {
  const Chip& c = o.chip;
  const double bw = npu_bandwidth(o);
  const double half_vtcm = vtcm_bytes(o) / 2;
  const double hvx_rate = c.hvx_bytes_per_s * o.hvx_threads / c.hvx_threads_max;
  const auto& weights = meta.at("weights");
  Cost cost;
  for (const auto& op : g.at("ops")) {
    const std::string kind = op.at("kind");
    double out = op.value("out_bytes", 0.0);
    // A result is made and consumed in slices: along its outer (head) dims, and in row tiles
    // of the HMX (32 rows) that the next ops (SiLU, Mul, the next matmul's K split) take one
    // at a time. A slice that does not fit half the VTCM spills to DRAM (written, read back);
    // graph outputs are counted as writes once, below.
    const double row_tiles = std::ceil(static_cast<double>(g.at("ar").get<int64_t>()) / kHmxTile);
    bool spills = !op.value("is_output", false) && out / std::max(1.0, op.value("outer", 1.0)) / row_tiles > half_vtcm;
    // Weights are constants: the compiled graph prefetches them into VTCM behind the previous
    // op's compute. Activations in DRAM (the KV cache and other graph inputs, spilled results)
    // are filled into VTCM before the op can use them and spilled after it, so their transfer
    // adds to the op's time rather than hiding under it.
    const double act_dram = op.value("dram_in_bytes", 0.0) + (spills ? 2 * out : 0.0);
    double weight_dram = 0, compute = 0, expand = 0;
    if (kind == "hmx") {
      double macs = op.at("macs").get<double>();
      const std::string precision = precision_of(op);
      compute = macs / c.macs_per_s(precision);
      cost.macs += macs;
      if (op.contains("weight") && op["weight"].is_string()) {
        double wb = weights.at(op["weight"].get<std::string>()).at("bytes").get<double>();
        // Activations stay in half the VTCM while the weight columns stream once. Activations
        // that do not fit are split along K instead (their spill is charged where they are
        // produced) while int32 partial sums of all rows stay in the other half; only when
        // those do not fit either are the rows split, streaming the weights once per block.
        double m = op.value("m", 1.0);
        double act = m * op.value("k", 1.0) * op.value("a_bits", 16) / 8.0;
        double acc = m * op.value("n", 1.0) * 4.0;
        weight_dram = act <= half_vtcm || acc <= half_vtcm ? wb : wb * std::ceil(act / half_vtcm);
        if (precision == "fp16" && op.value("w_int", false)) expand = weight_expand_s(o, op);
      }
    } else if (kind == "lookup") {
      weight_dram = out;  // the embedding rows a Gather reads from its table
    } else {
      compute = (op.value("in_bytes", 0.0) + out) / hvx_rate;
    }
    const double share = op.value("dispatch", 1.0);  // a head copy's share of the per-op cost (graph_summary)
    if (!(share > 0 && share <= 1))
      throw Error("htp: graph '" + g.value("name", std::string()) + "': an op's dispatch share " + std::to_string(share) +
                  " is not in (0, 1]: the package's graphs.json is damaged");
    const double overhead = c.per_op_s * share;
    cost.compute_s += compute + expand;
    cost.dram_s += (weight_dram + act_dram) / bw;
    cost.activation_dram_s += act_dram / bw;
    cost.dram_bytes += weight_dram + act_dram;
    cost.overhead_s += overhead;
    cost.seconds += std::max(compute, weight_dram / bw) + expand + act_dram / bw + overhead;
  }
  double writes = 0;
  for (const auto& [name, b] : g.at("outputs").items()) writes += b.get<double>();
  cost.dram_bytes += writes;
  cost.dram_s += writes / bw;
  cost.seconds += writes / bw + c.per_graph_s;
  cost.overhead_s += c.per_graph_s;
  return cost;
}

bool is_kv(const std::string& name) { return name.rfind("past_key_values.", 0) == 0; }

// KV cache and activation bytes of the graphs at context length `cl`.
void memory_at(const nlohmann::json& summaries, int64_t cl, double* kv, double* act) {
  std::map<std::string, double> kv_by_split;
  *act = 0;
  for (const auto& [name, g] : summaries.items()) {
    if (g.at("cl").get<int64_t>() != cl) continue;
    double k = 0, a = 0, biggest = 0;
    for (const auto& [in, b] : g.at("inputs").items()) (is_kv(in) ? k : a) += b.get<double>();
    for (const auto& [out, b] : g.at("outputs").items()) a += b.get<double>();
    for (const auto& op : g.at("ops")) biggest = std::max(biggest, op.value("out_bytes", 0.0));
    // The cache is one buffer per split for all its AR variants: the largest (smallest AR)
    // counts; a draft's cache is a buffer of its own.
    double& s = kv_by_split[g.value("role", "") + "/" + g.at("split").get<std::string>()];
    s = std::max(s, k);
    *act = std::max(*act, a + biggest);
  }
  *kv = 0;
  for (const auto& [s, b] : kv_by_split) *kv += b;
}

std::vector<int64_t> cls_of(const nlohmann::json& meta) {
  std::set<int64_t> s;
  for (const auto& v : meta.at("variants")) s.insert(v.at("cl").get<int64_t>());
  return {s.begin(), s.end()};
}

double limit_bytes(const HtpOptions& o) {
  if (o.memory_limit_mb > 0) return static_cast<double>(o.memory_limit_mb) * kMiB;
  return o.chip.memory_budget_bytes.value_or(0);
}

// Sum of the graph costs of every split for variant (ar, cl).
Cost pass_cost(const HtpOptions& o, const nlohmann::json& meta, const nlohmann::json& summaries, int64_t ar, int64_t cl,
               nlohmann::json* breakdown) {
  Cost total;
  for (const auto& v : meta.at("variants")) {
    if (v.at("ar").get<int64_t>() != ar || v.at("cl").get<int64_t>() != cl) continue;
    std::string name = v.at("graph");
    Cost c = graph_cost(o, meta, summaries.at(name));
    total.seconds += c.seconds;
    total.compute_s += c.compute_s;
    total.dram_s += c.dram_s;
    total.activation_dram_s += c.activation_dram_s;
    total.overhead_s += c.overhead_s;
    total.dram_bytes += c.dram_bytes;
    total.macs += c.macs;
    if (breakdown)
      breakdown->push_back({{"graph", name}, {"ms", c.seconds * 1e3}, {"compute_ms", c.compute_s * 1e3},
                            {"dram_ms", c.dram_s * 1e3}, {"activation_dram_ms", c.activation_dram_s * 1e3},
                            {"overhead_ms", c.overhead_s * 1e3},
                            {"dram_bytes", c.dram_bytes}, {"macs", c.macs}});
  }
  return total;
}

}  // namespace

void check_fits(const HtpOptions& o, const nlohmann::json& meta, const nlohmann::json& summaries) {
  const double vtcm = vtcm_bytes(o);
  for (const auto& [name, g] : summaries.items())
    for (const auto& op : g.at("ops")) {
      if (op.at("kind") != "hmx") continue;
      double k = op.value("k", 1.0);
      double tile = std::min<double>(op.value("m", 1.0), kHmxTile) * k * op.value("a_bits", 16) / 8.0 +
                    k * std::min<double>(op.value("n", 1.0), kHmxTile) * op.value("w_bits", 16) / 8.0;
      if (tile > vtcm)
        throw Error("htp: graph '" + name + "': a " + op.at("op").get<std::string>() + " with K = " +
                    std::to_string(static_cast<int64_t>(k)) + " needs " + std::to_string(tile / kMiB) +
                    " MiB of VTCM for one 32x32 tile pass; vtcm_size_in_mb is " + std::to_string(o.vtcm_size_in_mb));
    }
  double limit = limit_bytes(o);
  if (limit <= 0) return;
  auto cls = cls_of(meta);
  double kv = 0, act = 0;
  memory_at(summaries, cls.back(), &kv, &act);
  double total = meta.at("weight_bytes").get<double>() + kv + act;
  if (total > limit)
    throw Error("htp: the package needs " + std::to_string(static_cast<int64_t>(std::ceil(total / kMiB))) +
                " MiB of device memory (weights " + std::to_string(static_cast<int64_t>(meta.at("weight_bytes").get<double>() / kMiB)) +
                " MiB, KV cache " + std::to_string(static_cast<int64_t>(kv / kMiB)) + " MiB at context " +
                std::to_string(cls.back()) + ", activations " + std::to_string(static_cast<int64_t>(act / kMiB)) +
                " MiB); the limit is " + std::to_string(static_cast<int64_t>(limit / kMiB)) + " MiB" +
                (o.memory_limit_mb > 0 ? " (memory_limit_mb)" : " (chip file memory.device_budget_bytes)"));
}

// One pass of a graph the package does not hold (a speculative decoder's draft), given as
// its linears {"linears": [[K, N], ...], "rows": R}: the roofline of streaming the weights
// once (float16: the draft runs at fp16, as its asset stores it) against their MACs at fp16,
// without the per-graph launch cost, which is returned beside it.
nlohmann::json graph_pass(const HtpOptions& o, const nlohmann::json& g) {
  const Chip& c = o.chip;
  const GraphPass pass = GraphPass::from_json(g, "htp");
  double weights = 0;
  for (const auto& [K, N] : pass.linears) weights += static_cast<double>(K) * static_cast<double>(N);
  const double compute = weights * pass.rows / c.macs_per_s("fp16");
  const double dram = 2 * weights / npu_bandwidth(o);
  return {{"backend", "htp"},
          {"device", o.chipset},
          {"simulated", true},
          {"graph_pass_ms", std::max(compute, dram) * 1e3},
          {"per_graph_ms", c.per_graph_s * 1e3},
          {"weights_stored_as", "float16"}};
}

nlohmann::json estimate(const HtpOptions& o, const nlohmann::json& package_meta, const nlohmann::json& summaries,
                        const nlohmann::json& workload) {
  if (workload.contains("graph_pass")) return graph_pass(o, workload["graph_pass"]);
  // The graphs of one role: the target's unless the workload names another (a draft).
  if (workload.contains("role") && !workload["role"].is_string()) throw Error("htp: estimate: role must be a string");
  const std::string role = workload.value("role", "");
  nlohmann::json meta = package_meta;
  meta["variants"] = nlohmann::json::array();
  for (const auto& v : package_meta.at("variants"))
    if (v.value("role", "") == role) meta["variants"].push_back(v);
  if (meta["variants"].empty()) throw Error("htp: estimate: the package has no graphs of role '" + role + "'", NF_STATUS_NOT_FOUND);
  auto cls = cls_of(meta);
  std::set<int64_t> ars;
  for (const auto& v : meta.at("variants")) ars.insert(v.at("ar").get<int64_t>());
  auto get = [&](const char* k, int64_t dflt) {
    if (!workload.contains(k)) return dflt;
    if (!workload[k].is_number_integer() || workload[k].get<int64_t>() < 1)
      throw Error(std::string("htp: estimate: ") + k + " must be a positive integer");
    return workload[k].get<int64_t>();
  };
  const int64_t prompt = get("prompt_len", *ars.rbegin());
  const int64_t context = get("context_len", cls.back());
  auto cl_for = [&](int64_t n, const char* what) {
    for (int64_t cl : cls)
      if (cl >= n) return cl;
    throw Error(std::string("htp: estimate: ") + what + " " + std::to_string(n) +
                " is beyond the package's largest context length " + std::to_string(cls.back()));
  };
  const int64_t cl_prefill = cl_for(prompt, "prompt_len");
  const int64_t cl_decode = cl_for(context, "context_len");
  auto ars_at = [&](int64_t cl) {
    std::set<int64_t> r;
    for (const auto& v : meta.at("variants"))
      if (v.at("cl").get<int64_t>() == cl) r.insert(v.at("ar").get<int64_t>());
    return r;
  };
  const int64_t ar_prefill = *ars_at(cl_prefill).rbegin();
  const std::set<int64_t> ars_decode = ars_at(cl_decode);
  const int64_t ar_decode = *ars_decode.begin();

  nlohmann::json prefill_bd = nlohmann::json::array(), decode_bd = nlohmann::json::array();
  Cost chunk = pass_cost(o, meta, summaries, ar_prefill, cl_prefill, &prefill_bd);
  Cost step = pass_cost(o, meta, summaries, ar_decode, cl_decode, &decode_bd);
  const int64_t chunks = (prompt + ar_prefill - 1) / ar_prefill;
  const double ttft = chunks * chunk.seconds;
  const double compute = step.compute_s, dram = step.dram_s, over = step.overhead_s;
  std::string bound = dram >= compute && dram >= over ? "dram" : compute >= over ? "compute" : "overhead";

  double kv = 0, act = 0;
  memory_at(summaries, cl_decode, &kv, &act);
  const double weight_bytes = meta.at("weight_bytes").get<double>();
  nlohmann::json notes = nlohmann::json::array();
  notes.push_back("simulated by the htp hardware model (roofline per op; NPU bandwidth, HMX rate and overheads from " +
                  std::string(meta.at("chip").value("file", "")) + ", each with its source: published, derived or fitted), "
                  "not measured on a device");
  if (o.assume_activation_bw || o.assume_kv_bw)
    notes.push_back("values without an encoding are costed as integers by assumption (assume_activation_bw " +
                    std::to_string(o.assume_activation_bw) + ", assume_kv_bw " + std::to_string(o.assume_kv_bw) +
                    "), not from calibrated encodings");
  if (o.assume_weight_bw)
    notes.push_back("weights without an encoding are costed by assumption (assume_weight_bw " +
                    std::to_string(o.assume_weight_bw) +
                    (o.assume_int8_share ? ", assume_int8_share " + nlohmann::json(o.assume_int8_share).dump() + " of those at int8" : "") +
                    ", LM head 8-bit), not quantized: an estimate-only package");
  if (o.perf_profile != "burst") notes.push_back("perf_profile " + o.perf_profile + " is modelled at burst clocks");
  if (prompt > ar_prefill)
    notes.push_back("prefill in " + std::to_string(chunks) + " chunks of AR " + std::to_string(ar_prefill));
  nlohmann::json result = {{"backend", "htp"},
                           {"device", o.chipset},
                           {"device_name", o.chip.marketing_name},
                           {"simulated", true},
                           {"prompt_len", prompt},
                           {"context_len", context},
                           {"prefill_graph_cl", cl_prefill},
                           {"decode_graph_cl", cl_decode},
                           {"prefill_ar", ar_prefill},
                           {"decode_ar", ar_decode},
                           {"ttft_ms", ttft * 1e3},
                           {"prefill_tokens_per_s", prompt / ttft},
                           {"decode_ms_per_token", step.seconds * 1e3},
                           {"decode_tokens_per_s", 1.0 / step.seconds},
                           {"decode_bound", bound},
                           {"memory_bytes", weight_bytes + kv + act},
                           {"weight_bytes", weight_bytes},
                           {"kv_cache_bytes", kv},
                           {"activation_bytes", act},
                           {"dram_bytes_per_token", step.dram_bytes},
                           {"notes", notes},
                           {"breakdown", {{"prefill_chunk", prefill_bd}, {"decode_step", decode_bd},
                                          {"decode_compute_ms", compute * 1e3}, {"decode_dram_ms", dram * 1e3},
                                          {"decode_overhead_ms", over * 1e3}, {"prefill_macs_per_chunk", chunk.macs}}}};
  if (workload.contains("pass_rows")) {
    // A tree pass (speculative decoding): the variant of the fewest rows that holds them at the
    // decode context length (the largest, called again, when none does); every row through
    // the head, as the graph computes them.
    const int64_t rows = get("pass_rows", 1);
    int64_t ar = *ars_decode.rbegin();
    for (int64_t a : ars_decode)
      if (a >= rows) {
        ar = a;
        break;
      }
    const int64_t calls = (rows + ar - 1) / ar;
    const Cost pass = pass_cost(o, meta, summaries, ar, cl_decode, nullptr);
    result["pass"] = {{"rows", rows}, {"graph_rows", ar}, {"calls", calls}, {"context_len", context},
                      {"ms", static_cast<double>(calls) * pass.seconds * 1e3}};
  }
  return result;
}

}  // namespace nf::htp
