#include "compile.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/parts.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <map>
#include <set>

#include "model_info.h"
#include "mxq.h"

namespace fs = std::filesystem;

namespace nf::aries {
namespace {

constexpr const char* kVersion = "0.1.0";

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

void check_mode_on_device(const AriesOptions& o, const Device& d) {
  if (!d.supports(o.core_mode))
    throw Error("aries backend: core_mode '" + o.core_mode + "' is not supported by " + d.id + " (it runs: " +
                nlohmann::json(d.core_modes).dump() + ")");
  if (o.core_mode == "global4" && (d.local_cores_per_cluster < 4 || d.global_cores_per_cluster < 1))
    throw Error("aries backend: core_mode 'global4' needs a cluster of 4 local cores and a global core on " + d.id);
  if (o.core_mode == "global8" && (d.local_cores() < 8 || d.global_cores_per_cluster < 1))
    throw Error("aries backend: core_mode 'global8' needs 8 local cores and global cores on " + d.id);
}

// Lengths from the graph when the options leave them open; the static graph's KV capacity bounds them.
void resolve_lengths(AriesOptions& o, const ModelShape& s) {
  if (o.llm.max_sequence_length == 0) {
    if (!s.static_graph || s.kv_capacity == 0)
      throw Error("aries backend: llm.max_sequence_length is required for a graph with dynamic shapes (or use preset 'llm')");
    o.llm.max_sequence_length = s.kv_capacity;
  }
  if (o.llm.max_cache_length == 0) o.llm.max_cache_length = o.llm.max_sequence_length;
  if (o.llm.max_cache_length > o.llm.max_sequence_length)
    throw Error("aries backend: llm.max_cache_length " + std::to_string(o.llm.max_cache_length) +
                " exceeds llm.max_sequence_length " + std::to_string(o.llm.max_sequence_length));
  if (s.static_graph && s.kv_capacity > 0 && o.llm.max_cache_length > s.kv_capacity)
    throw Error("aries backend: llm.max_cache_length " + std::to_string(o.llm.max_cache_length) +
                " exceeds the graph's static context length " + std::to_string(s.kv_capacity) +
                " (set llm.max_cache_length / max_sequence_length, or rebuild arcl with a longer context_length)");
  if (o.prefill_chunk > o.llm.max_sequence_length)
    throw Error("aries backend: prefill_chunk " + std::to_string(o.prefill_chunk) + " exceeds llm.max_sequence_length " +
                std::to_string(o.llm.max_sequence_length));
}

bool has_kv_inputs(ModelSet ms) {
  for (const Graph& g : ms.graphs())
    for (const auto& in : g.inputs())
      if (nf::decoder::is_past_kv(in)) return true;
  return false;
}

// Activation encodings at the device's widths: int8, 16-bit for the chosen kinds; the
// range is the calibration encoding's (a quant recipe such as minmax writes them).
nlohmann::json activation_table(ModelSet ms, const AriesOptions& o, const std::vector<Linear>& linears, size_t* missing) {
  std::map<std::string, bool> wide;  // tensor -> needs 16 bits
  auto mark = [&](const std::string& t, bool w) { wide[t] = wide[t] || w; };
  std::map<std::string, bool> by_weight;
  for (const auto& l : linears) {
    bool w = (l.ffn_down && o.act16("ffn_down")) || (l.kind != Kind::other && o.act16(kind_name(l.kind)));
    mark(l.input, w);
    mark(l.output, w);
    by_weight[l.weight] = w;
  }
  for (const Graph& g : ms.graphs()) {
    // Another node multiplying by a linear's weight (a draft tree's copy of a pass) runs on
    // that linear's grids: its own values, encoded by the copy, are in the table too.
    for (const Node& n : g.nodes())
      if (n.op_type() == "MatMul" || n.op_type() == "Gemm")
        if (auto it = by_weight.find(n.input(1)); it != by_weight.end() && !wide.count(n.input(0))) {
          mark(n.input(0), it->second);
          mark(n.output(0), it->second);
        }
    for (const auto& n : g.outputs())
      if (nf::decoder::is_present_kv(n)) mark(n, o.act16("kv_cache"));
    for (const auto& n : g.inputs())
      if (nf::decoder::is_past_kv(n)) mark(n, o.act16("kv_cache"));
  }
  nlohmann::json table = nlohmann::json::object();
  *missing = 0;
  for (const auto& [name, w] : wide) {
    const nf_encoding* e = ms.encoding(name);
    if (!e || e->is_float || e->enc_type != NF_ENC_PER_TENSOR || e->num_scales != 1) {
      ++*missing;
      continue;
    }
    double lo = static_cast<double>(e->offset[0]) * e->scale[0];
    double hi = (static_cast<double>(e->offset[0]) + std::ldexp(1.0, e->bw) - 1.0) * e->scale[0];
    int bw = w ? 16 : 8;
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
    double scale = hi > lo ? (hi - lo) / (std::ldexp(1.0, bw) - 1.0) : 1.0;
    table[name] = {{"bw", bw}, {"scale", static_cast<float>(scale)},
                   {"offset", static_cast<int32_t>(std::nearbyint(lo / scale))}};
  }
  return table;
}

nlohmann::json linears_json(const std::vector<Linear>& ls, const AriesOptions& o,
                            const std::vector<std::pair<int64_t, int64_t>>& parts) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : ls) {
    int64_t part = static_cast<int64_t>(parts.size()) - 1;
    for (size_t p = 0; p < parts.size(); ++p)
      if (l.block >= parts[p].first && l.block < parts[p].second) part = static_cast<int64_t>(p);
    a.push_back({{"weight", l.weight}, {"kind", kind_name(l.kind)}, {"ffn_down", l.ffn_down}, {"block", l.block},
                 {"K", l.K}, {"N", l.N}, {"bits", o.bits.of(l.kind)}, {"nk", l.nk}, {"part", part}});
  }
  return a;
}

std::string part_file(size_t i, size_t n) {
  return "part_" + std::to_string(i) + "_of_" + std::to_string(n) + ".mxq";
}

// The graph structure without the quantized weights (placeholders of one element): the
// containers carry those. A copy of the set (weights shared) takes the placeholders, since the
// input set is const; nothing of the weights is written twice.
void save_graph(const nf_model_set* ms_in, const std::vector<Linear>& ls, const std::string& dir) {
  nf_model_set* raw = nullptr;
  check(host().model_set_clone(ms_in, &raw));
  struct Release {
    nf_model_set* m;
    ~Release() { host().model_set_release(m); }
  } release{raw};
  ModelSet copy(raw);
  std::set<std::string> quantized;
  for (const auto& l : ls) quantized.insert(l.weight);
  int64_t one = 1;
  Tensor placeholder = Tensor::create(NF_DTYPE_FLOAT32, std::span<const int64_t>(&one, 1));
  *placeholder.mutable_as<float>() = 0.f;
  for (const Graph& g : copy.graphs()) {
    Graph gg = g;
    for (const auto& name : g.initializer_names())
      if (quantized.count(name)) gg.set_initializer(name, placeholder);
  }
  while (host().model_set_encoding_count(raw) > 0)
    check(host().model_set_remove_encoding(raw, host().model_set_encoding_name(raw, 0)));
  fs::create_directory(dir + "/graph");
  check(host().model_set_save(raw, (dir + "/graph").c_str()));
}

// The weights compile quantizes, in the order it writes them: the target's linears, then
// those of a draft the target does not hold (not its shared embedding or head).
std::vector<Linear> quantized_linears(const ModelInfo& info, const std::optional<ModelInfo>& draft) {
  std::vector<Linear> ls = info.linears;
  std::set<std::string> target_weights;
  for (const auto& l : info.linears) target_weights.insert(l.weight);
  if (draft)
    for (const auto& l : draft->linears)
      if (!target_weights.count(l.weight)) ls.push_back(l);
  return ls;
}

// The checkpoint a compile part saves a quantized weight under: named by what decides its
// values (the weight, its shape and layout, bits, scale search), so a compile only ever
// takes the values of the same weight quantized the same way.
std::string quantized_checkpoint_name(const QuantWeight& q, bool search) {
  CheckpointName name("quantized-");
  name.add(q.name);
  for (int64_t v : {q.K, q.N, int64_t{q.bits}, int64_t{q.nk}, int64_t{search}}) name.add(v);
  return name.str();
}

// Linear `l` at its compiled bits: from a compile part's checkpoint when `ctx` has one of the
// right size, else quantized here from the model set's floats.
QuantWeight quantize_linear(const ModelSet& ms, const Linear& l, const AriesOptions& o, Context ctx, bool from_parts) {
  QuantWeight q;
  q.name = l.weight;
  q.kind = kind_name(l.kind);
  q.block = l.block;
  q.K = l.K;
  q.N = l.N;
  q.nk = l.nk;
  q.bits = o.bits.of(l.kind);
  const bool search = o.search_weight_scale.on(l.kind);
  const size_t values = static_cast<size_t>(q.K * q.N), need = values + static_cast<size_t>(q.N) * sizeof(float);
  std::vector<uint8_t> saved;
  if (from_parts && ctx.checkpoint_load(quantized_checkpoint_name(q, search), &saved)) {
    std::string wrong;
    if (saved.size() == need) {
      q.q.resize(values);
      q.scale.resize(static_cast<size_t>(q.N));
      std::memcpy(q.q.data(), saved.data(), values);
      std::memcpy(q.scale.data(), saved.data() + values, saved.size() - values);
      const int qmax = (1 << (q.bits - 1)) - 1;
      const bool on_grid = std::all_of(q.q.begin(), q.q.end(), [&](int8_t v) { return v >= -qmax - 1 && v <= qmax; });
      const bool scales_ok = std::all_of(q.scale.begin(), q.scale.end(), [](float v) { return std::isfinite(v) && v > 0; });
      if (on_grid && scales_ok) return q;
      wrong = on_grid ? "a scale that is not a positive number" : "values off its " + std::to_string(q.bits) + "-bit grid";
    } else {
      wrong = std::to_string(saved.size()) + " bytes, not " + std::to_string(need);
    }
    ctx.warn("aries backend: the quantized '" + l.weight + "' a compile part left has " + wrong + "; quantizing it again");
  }
  Tensor t;
  for (const Graph& g : ms.graphs())
    if (!t) t = g.initializer(l.weight);
  if (t.dtype() != NF_DTYPE_FLOAT32)
    throw Error("aries backend: weight '" + l.weight + "' is " + dtype_name(t.dtype()) +
                "; compile takes float32 weights (or use estimate_only)");
  quantize_weight(t.data_as<float>(), l.nk, q.bits, search, q, [&](size_t offset, size_t bytes) { t.drop_pages(offset, bytes); });
  t.drop_pages(0, t.nbytes());  // done with it: a mapped weight's pages go
  return q;
}

std::optional<ModelInfo> draft_of(const ModelSet& ms, const char* role = roles::kDraft) {
  if (!ms.metadata(roles::kMetadataKey).contains(role)) return std::nullopt;
  return inspect(ms, role);
}

}  // namespace

size_t compile_part_count(const char* options_json, size_t wanted) {
  // Quantizing the linear weights is the work that splits; an estimate-only package has none.
  return AriesOptions::resolve(Options(options_json).json()).estimate_only ? 1 : std::max<size_t>(wanted, 1);
}

void compile_part(const char* options_json, const nf_model_set* ms_in, Context ctx, size_t index, size_t count) {
  const AriesOptions o = AriesOptions::resolve(Options(options_json).json());
  if (count == 0 || index >= count)
    throw Error("aries backend: compile part " + std::to_string(index) + " of " + std::to_string(count));
  if (o.estimate_only) return;
  const ModelSet ms = ModelSet::view(ms_in);
  const std::vector<Linear> ls = quantized_linears(inspect(ms), draft_of(ms));
  // A share of the linears by weight count.
  std::vector<uint64_t> sizes;
  for (const auto& l : ls) sizes.push_back(static_cast<uint64_t>(l.K * l.N));
  std::vector<const Linear*> mine;
  for (size_t i : part_share(sizes, index, count)) mine.push_back(&ls[i]);
  for (size_t k = 0; k < mine.size(); ++k) {
    ctx.progress(k, mine.size(), "quantizing " + mine[k]->weight);
    const QuantWeight q = quantize_linear(ms, *mine[k], o, ctx, false);
    std::vector<uint8_t> bytes(q.q.size() + q.scale.size() * sizeof(float));
    std::memcpy(bytes.data(), q.q.data(), q.q.size());
    std::memcpy(bytes.data() + q.q.size(), q.scale.data(), q.scale.size() * sizeof(float));
    ctx.checkpoint_save(quantized_checkpoint_name(q, o.search_weight_scale.on(mine[k]->kind)), bytes);
  }
  ctx.info("aries: quantized " + std::to_string(mine.size()) + " linear weights (part " + std::to_string(index + 1) +
           " of " + std::to_string(count) + ")");
}

void quantize_weight(const float* w, bool nk, int bits, bool search, QuantWeight& out,
                     const std::function<void(size_t, size_t)>& release) {
  const int64_t K = out.K, N = out.N;
  const int64_t rows_per_release = std::max<int64_t>(1, (int64_t{32} << 20) / (K * 4));
  int64_t released = 0;
  const float qmax = std::ldexp(1.f, bits - 1) - 1.f, qmin = -qmax - 1.f;
  out.q.assign(static_cast<size_t>(K * N), 0);
  out.scale.assign(static_cast<size_t>(N), 1.f);
  std::vector<float> col(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) {
      col[static_cast<size_t>(k)] = nk ? w[n * K + k] : w[k * N + n];
      absmax = std::max(absmax, std::fabs(col[static_cast<size_t>(k)]));
    }
    auto err_of = [&](float s) {
      double e = 0;
      for (float x : col) {
        float q = std::clamp(std::nearbyint(x / s), qmin, qmax);
        e += (q * s - x) * (q * s - x);
      }
      return e;
    };
    float best = absmax > 0 ? absmax / qmax : 1.f;
    if (search && absmax > 0) {
      double best_err = err_of(best);
      for (int i = 10; i < 20; ++i) {
        float s = absmax * static_cast<float>(i) / 20.f / qmax;
        double e = err_of(s);
        if (e < best_err) best_err = e, best = s;
      }
    }
    out.scale[static_cast<size_t>(n)] = best;
    for (int64_t k = 0; k < K; ++k)
      out.q[static_cast<size_t>(n * K + k)] =
          static_cast<int8_t>(std::clamp(std::nearbyint(col[static_cast<size_t>(k)] / best), qmin, qmax));
    if (release && nk && (n + 1 - released == rows_per_release || n + 1 == N)) {
      release(static_cast<size_t>(released * K) * 4, static_cast<size_t>((n + 1 - released) * K) * 4);
      released = n + 1;
    }
  }
}

void compile_package(const char* options_json, const nf_model_set* ms_in, const std::string& out, Context ctx) {
  AriesOptions o = AriesOptions::resolve(Options(options_json).json());
  Device d = load_device(o.device, o.device_file);
  check_mode_on_device(o, d);
  const ModelSet ms = ModelSet::view(ms_in);
  ModelInfo info = inspect(ms);
  if (!o.estimate_only) check_compilable(ms);
  if (has_kv_inputs(ms) && !o.llm.apply)
    throw Error("aries backend: the graph has KV-cache inputs (past_key_values.*): compile it with llm.apply = true "
                "(LlmConfig) or preset 'llm'");
  resolve_lengths(o, info.shape);
  auto parts = part_ranges(o, info.shape.layers);

  // The simulator's view of a role's linears at their compiled bits (`keep`: which ones).
  auto sim_model = [&](const ModelInfo& m, const std::function<bool(const Linear&)>& keep) {
    SimModel s;
    s.shape = m.shape;
    for (const auto& l : m.linears)
      if (keep(l)) s.linears.push_back({l.kind, l.ffn_down, l.block, l.K, l.N, o.bits.of(l.kind)});
    return s;
  };
  SimModel sim = sim_model(info, [](const Linear&) { return true; });
  sim.parts = static_cast<int64_t>(parts.size());
  // A speculative decoder's draft (graphs of role "draft"): its own MXQ part, its own
  // shape for the simulator.
  const std::optional<ModelInfo> draft = draft_of(ms);
  std::set<std::string> target_weights;
  for (const auto& l : info.linears) target_weights.insert(l.weight);

  MemoryPlan mem = memory_plan(sim, o, o.llm.max_cache_length);
  if (draft) {  // resident beside the target: its own weights and KV cache (it runs in turn: no more scratch)
    const SimModel own = sim_model(*draft, [&](const Linear& l) { return !target_weights.count(l.weight); });
    MemoryPlan dm = memory_plan(own, o, o.llm.max_cache_length);
    mem.weight_bytes += dm.weight_bytes;
    mem.kv_cache_bytes += dm.kv_cache_bytes;
  }
  double capacity = d.dram_bytes - d.dram_reserved_bytes;
  if (mem.total() > capacity)
    throw Error("aries backend: the model" + std::string(draft ? " and its draft need " : " needs ") + gib(mem.total()) +
                " of device memory (weights " + gib(mem.weight_bytes) + ", KV cache " + gib(mem.kv_cache_bytes) +
                " for batch " + std::to_string(o.llm.batch_size) + " x " + std::to_string(o.llm.max_cache_length) +
                " tokens, scratch " + gib(mem.activation_bytes) + "); " + d.id + " has " + gib(capacity) + " for models");

  size_t missing = 0;
  std::vector<Linear> every_linear = info.linears;  // the draft's activations are encoded too
  if (draft) every_linear.insert(every_linear.end(), draft->linears.begin(), draft->linears.end());
  nlohmann::json acts = activation_table(ms, o, every_linear, &missing);
  bool calibrated = !acts.empty();
  sim.activations_calibrated = calibrated;
  if (!calibrated && !o.estimate_only)
    ctx.warn("aries: the model set has no calibration encodings: activations will run in float (weights at their "
             "integer grids only); add [calibration] and a quant recipe such as minmax for int8/16-bit activations");
  else if (missing > 0 && !o.estimate_only)
    ctx.warn("aries: " + std::to_string(missing) + " linear/KV activations have no calibration encoding and run in float");

  nlohmann::json linears = linears_json(info.linears, o, parts);
  nlohmann::json parts_json = nlohmann::json::array();
  for (size_t p = 0; p < parts.size(); ++p) {
    double bytes = 0;
    for (const auto& l : linears)
      if (l["part"] == static_cast<int64_t>(p)) bytes += l["K"].get<double>() * l["N"].get<double>() * l["bits"].get<double>() / 8.0;
    parts_json.push_back({{"file", o.estimate_only ? "" : part_file(p, parts.size())},
                          {"blocks", {parts[p].first, parts[p].second}},
                          {"weight_bytes", bytes}});
  }

  nlohmann::json roles_json = nlohmann::json::object();
  if (draft) {
    const std::vector<std::pair<int64_t, int64_t>> one_part{{0, draft->shape.layers}};
    double bytes = 0;
    for (const auto& l : draft->linears) bytes += static_cast<double>(l.K * l.N * o.bits.of(l.kind)) / 8.0;
    roles_json[roles::kDraft] = {{"model", draft->shape.to_json()},
                                 {"linears", linears_json(draft->linears, o, one_part)},
                                 {"file", o.estimate_only ? "" : "draft.mxq"},
                                 {"weight_bytes", bytes}};
    // Its depth loop as one graph reads the same weights (draft.mxq).
    if (const std::optional<ModelInfo> tree = draft_of(ms, roles::kDraftTree)) {
      const std::optional<roles::DraftTree> t = roles::draft_tree_of(ms.metadata(roles::kMetadataKey)[roles::kDraftTree]);
      if (!t) throw Error("aries backend: metadata roles.draft_tree has no 'tree'");
      roles_json[roles::kDraftTree] = {{"model", tree->shape.to_json()},
                                       {"linears", linears_json(tree->linears, o, one_part)},
                                       {"tree", {{"depth", t->depth}, {"branches", t->branches}}}};
    }
  }

  if (!o.estimate_only) {
    size_t done = 0, total = info.linears.size() + (draft ? draft->linears.size() : 0);
    auto write_part = [&](const std::string& file, const nlohmann::json& header, const std::vector<Linear>& ls,
                          const std::function<bool(size_t)>& in_part) {
      MxqWriter wr(out + "/" + file, header);
      for (size_t i = 0; i < ls.size(); ++i) {
        const Linear& l = ls[i];
        if (!in_part(i)) continue;
        ctx.progress(done++, total, "quantizing " + l.weight);
        wr.add(quantize_linear(ms, l, o, ctx, true));
      }
      wr.finish();
    };
    // Weights of each part into its container, quantized at the bit config.
    for (size_t p = 0; p < parts.size(); ++p)
      write_part(part_file(p, parts.size()),
                 {{"format", "npuforge-mxq"}, {"device", o.device}, {"core_mode", o.core_mode},
                  {"part", p}, {"parts", parts.size()}, {"blocks", {parts[p].first, parts[p].second}}},
                 info.linears, [&](size_t i) { return linears[i]["part"] == static_cast<int64_t>(p); });
    // The draft's weights the target does not hold (not its shared embedding or head).
    if (draft)
      write_part("draft.mxq", {{"format", "npuforge-mxq"}, {"device", o.device}, {"core_mode", o.core_mode}, {"role", "draft"}},
                 draft->linears, [&](size_t i) { return !target_weights.count(draft->linears[i].weight); });
    save_graph(ms_in, every_linear, out);
  }

  nlohmann::json meta = {{"backend", "aries"},
                         {"version", kVersion},
                         {"options", o.to_json()},
                         {"preset_extras", o.preset_extras},
                         {"device", d.raw},
                         {"model", info.shape.to_json()},
                         {"linears", linears},
                         {"parts", parts_json},
                         {"activations", acts},
                         {"activations_calibrated", calibrated},
                         {"roles", roles_json},
                         {"estimate_only", o.estimate_only},
                         {"memory", {{"weight_bytes", mem.weight_bytes}, {"kv_cache_bytes", mem.kv_cache_bytes},
                                     {"activation_bytes", mem.activation_bytes}, {"capacity_bytes", capacity}}}};
  std::ofstream f(out + "/aries.json");
  f << meta.dump(1) << "\n";
  if (!f) throw Error("aries backend: cannot write " + out + "/aries.json");
  ctx.info("aries: " + std::to_string(info.linears.size()) + " linear weights in " + std::to_string(parts.size()) +
           " part(s), " + gib(mem.total()) + " of " + gib(capacity) + " device memory" +
           (o.estimate_only ? " (estimate_only: no weights written)" : ""));
}

SimModel sim_model(const nlohmann::json& meta, const nlohmann::json& shape, const nlohmann::json& linears) {
  static const std::map<std::string, Kind> kinds = {{"query", Kind::query}, {"key", Kind::key},   {"value", Kind::value},
                                                    {"output", Kind::output}, {"ffn", Kind::ffn}, {"head", Kind::head},
                                                    {"other", Kind::other}};
  SimModel m;
  m.shape = ModelShape::from_json(shape);
  m.activations_calibrated = meta.value("activations_calibrated", false);
  m.estimate_only = meta.value("estimate_only", false);
  for (const auto& l : linears)
    m.linears.push_back({kinds.at(l.at("kind").get<std::string>()), l.at("ffn_down"), l.at("block"), l.at("K"), l.at("N"),
                         l.at("bits")});
  return m;
}

PackageInfo PackageInfo::read(const std::string& dir) {
  std::ifstream f(dir + "/aries.json");
  if (!f) throw Error("aries backend: " + dir + " has no aries.json (not an aries package)");
  PackageInfo p;
  p.meta = nlohmann::json::parse(f, nullptr, false);
  if (p.meta.is_discarded() || p.meta.value("backend", "") != "aries")
    throw Error("aries backend: " + dir + "/aries.json is not an aries package description");
  p.options = AriesOptions::resolve(p.meta.at("options"));
  p.device = Device::from_json(p.meta.at("device"), dir + "/aries.json (device)");
  p.model = sim_model(p.meta, p.meta.at("model"), p.meta.at("linears"));
  p.model.parts = static_cast<int64_t>(p.meta.at("parts").size());
  return p;
}

}  // namespace nf::aries
