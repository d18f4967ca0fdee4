#include "compile.h"

#include <npuforge/parts.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "cache_constants.h"
#include "container.h"
#include "estimate.h"
#include "graph_summary.h"
#include "options.h"

namespace fs = std::filesystem;

namespace nf::htp {
namespace {

struct Variant {
  std::string graph;
  int64_t ar = 0, cl = 0;
  std::string split = "1_of_1";
  std::string role;  // "" for the target; a draft's graphs are priced on their own
};

// arcl's names; a graph of another role (a draft) carries its source graph's name first.
Variant parse_variant(const std::string& name) {
  static const std::regex re(R"(^(?:.+_)?ar(\d+)_cl(\d+)(?:_scl\d+)?(?:_(\d+_of_\d+))?$)");
  std::smatch m;
  if (!std::regex_match(name, m, re))
    throw Error("htp: graph '" + name + "' is not an AR/CL variant ([{graph}_]ar{ar}_cl{cl}[_scl{scl}][_{i}_of_{n}]); run the arcl transform before compiling for htp");
  Variant v{name, std::stoll(m[1]), std::stoll(m[2]), m[3].matched ? m[3].str() : "1_of_1", ""};
  return v;
}

// Float initializers that feed HMX ops or table lookups, directly or through folded layout ops.
// `hmx` receives those feeding matmuls, `lm_head` those feeding the matmul that makes `logits`.
std::set<std::string> packed_weights_of(Graph g, std::set<std::string>* hmx = nullptr, std::set<std::string>* lm_head = nullptr) {
  std::set<std::string> inits;
  for (const auto& s : g.initializer_names()) {
    Tensor t = g.initializer(s);
    if (t && t.dtype() == NF_DTYPE_FLOAT32 && t.nbytes() > sizeof(float)) inits.insert(s);
  }
  static const std::set<std::string> move = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Identity", "Flatten", "Cast"};
  std::map<std::string, std::set<std::string>> origin;
  for (const auto& s : inits) origin[s] = {s};
  std::set<std::string> used;
  for (const Node& n : g.nodes()) {
    std::string op(n.op_type());
    if (move.count(op)) {
      for (const auto& o : n.outputs()) origin[o] = origin[n.input(0)];
    } else if (op == "MatMul" || op == "Gemm" || op == "Conv") {
      // The LM head: its result reaches `logits` through layout ops only.
      bool head = false;
      for (std::string v = n.output(0);;) {
        if (v == "logits") { head = true; break; }
        bool moved = false;
        for (const Node& m : g.nodes())
          if (m.input_count() > 0 && m.input(0) == v && move.count(std::string(m.op_type()))) { v = m.output(0); moved = true; break; }
        if (!moved) break;
      }
      for (size_t i = 0; i < std::min<size_t>(n.input_count(), 2); ++i)
        for (const auto& s : origin[n.input(i)]) {
          used.insert(s);
          if (hmx) hmx->insert(s);
          if (head && lm_head) lm_head->insert(s);
        }
    } else if (op == "Gather") {
      for (const auto& s : origin[n.input(0)]) used.insert(s);
    }
  }
  return used;
}

// Storage of one weight from its encoding (or fp16 without one).
StoredTensor plan_weight(ModelSet ms, const std::string& name, const Tensor& t, const HtpOptions& o, int assumed_bw,
                         WeightInfo* info) {
  StoredTensor s;
  s.name = name;
  s.dims = t.dims();
  const nf_encoding* e = ms.encoding(name);
  if ((!e || e->is_float) && assumed_bw) {
    // Costing only (pack_weights = false): the recipe's storage, LPBQ block 64 or int8 per
    // channel, with one fp32 scale per output channel (the last axis of a [K, N] weight). A
    // mixed recipe keeps assume_int8_share of the 4-bit elements at 8 bits; which layers is
    // not published, so every 4-bit weight carries that share.
    const int64_t channels = s.dims.back(), numel = t.nbytes() / sizeof(float);
    const double bits = assumed_bw == 4 ? 4 * (1 + o.assume_int8_share) : assumed_bw;
    info->bits = assumed_bw;
    info->lpbq = assumed_bw == 4;
    info->bytes = static_cast<uint64_t>(numel * bits / 8) + channels * 4 +
                  (assumed_bw == 4 ? static_cast<uint64_t>(numel / 64) * 4 / 8 : 0);
    s.storage = assumed_bw == 4 ? Storage::Int4 : Storage::Int8;
    return s;
  }
  if (!e || e->is_float) {
    if (!o.fp16_relaxed_precision)
      throw Error("htp: weight '" + name + "' has no integer encoding and fp16_relaxed_precision is false: quantize it (a quant recipe) or allow fp16");
    s.storage = Storage::Fp16;
    info->bits = 16;
    info->is_float = true;
    info->bytes = s.payload_bytes();
    return s;
  }
  auto bad = [&](const std::string& why) { return Error("htp: encoding of weight '" + name + "': " + why); };
  const bool lpbq = e->enc_type == NF_ENC_LPBQ;
  const int bits = lpbq ? e->compressed_bw : e->bw;
  if (bits < 2 || bits > 16) throw bad(std::to_string(bits) + "-bit weights; HTP stores 4, 8 or 16 bits");
  s.storage = bits <= 4 ? Storage::Int4 : bits <= 8 ? Storage::Int8 : Storage::Int16;
  const int rank = static_cast<int>(s.dims.size());
  s.encoding = e->enc_type == NF_ENC_PER_TENSOR ? "PER_TENSOR" : e->enc_type == NF_ENC_PER_CHANNEL ? "PER_CHANNEL"
               : e->enc_type == NF_ENC_PER_BLOCK ? "PER_BLOCK" : "LPBQ";
  int64_t channels = 1;
  if (e->enc_type != NF_ENC_PER_TENSOR) {
    if (e->axis < 0 || e->axis >= rank) throw bad("channel axis " + std::to_string(e->axis) + " is outside rank " + std::to_string(rank));
    s.axis = e->axis;
    channels = s.dims[static_cast<size_t>(e->axis)];
  }
  if (e->enc_type == NF_ENC_PER_BLOCK || lpbq) {
    if (rank != 2 || e->block_axis != 1 - e->axis || e->block_size <= 0) throw bad("blockwise encodings need a 2-D weight with block axis = the other axis");
    s.block_axis = e->block_axis;
    s.block_size = e->block_size;
  }
  const int64_t nb = s.blocks();
  const size_t groups = static_cast<size_t>(channels * nb);
  size_t need = e->enc_type == NF_ENC_PER_TENSOR ? 1 : e->enc_type == NF_ENC_PER_BLOCK ? groups : static_cast<size_t>(channels);
  if (e->num_scales != need) throw bad(std::to_string(e->num_scales) + " scales, expected " + std::to_string(need));
  if (lpbq && e->num_block_ints != groups) throw bad(std::to_string(e->num_block_ints) + " per-block ints, expected " + std::to_string(groups));
  s.scales.resize(groups);
  s.zeros.resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    size_t c = g / static_cast<size_t>(nb);
    size_t src = e->enc_type == NF_ENC_PER_TENSOR ? 0 : e->enc_type == NF_ENC_PER_BLOCK ? g : c;
    float sc = e->scale[src];
    if (lpbq) sc *= static_cast<float>(e->per_block_int_scale[g]);
    s.scales[g] = sc;
    // The kernels' signed grid: w = (q + zero) * scale; AIMET's unsigned offset shifts by 2^(bits-1).
    s.zeros[g] = e->is_sym ? 0.f : static_cast<float>(e->offset[src] + (1 << (bits - 1)));
  }
  // Device bytes as the chip stores them: LPBQ = 4-bit values + (dbw-bw)-bit block ints +
  // fp32 per-channel scales; others = values + fp32 scale (and int offset) per group.
  info->bits = bits;
  info->lpbq = lpbq;
  uint64_t meta = lpbq ? (groups * static_cast<uint64_t>(e->bw - e->compressed_bw) + 7) / 8 + channels * 4
                       : need * (e->is_sym ? 4 : 8);
  info->bytes = s.payload_bytes() + meta;
  return s;
}

// Swaps initializers for what the package stores while the graphs are saved (empty
// placeholders for packed weights, the container holds them; cache constants on the cache's
// grid), restoring the model set afterwards even on error.
class InitializerSwap {
 public:
  explicit InitializerSwap(std::vector<ConstantOnGrid> swaps) {
    for (auto& s : swaps) {
      saved_.push_back({s.graph, s.name, s.graph.initializer(s.name)});
      s.graph.set_initializer(s.name, s.rounded);
    }
  }
  ~InitializerSwap() {
    for (auto& s : saved_)
      if (nf_status* st = host().graph_set_initializer(s.g.get(), s.name.c_str(), s.t.get())) host().status_release(st);
  }

 private:
  struct Saved {
    Graph g;
    std::string name;
    Tensor t;
  };
  std::vector<Saved> saved_;
};

std::vector<ConstantOnGrid> placeholders(ModelSet ms, const std::map<std::string, std::set<std::string>>& by_graph) {
  std::vector<ConstantOnGrid> out;
  for (const auto& [graph, names] : by_graph) {
    Graph g(host().model_set_find_graph(ms.get(), graph.c_str()));
    for (const auto& n : names) {
      std::vector<int64_t> dims{0};
      out.push_back({g, n, Tensor::create(NF_DTYPE_FLOAT32, dims)});
    }
  }
  return out;
}

void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream f(p);
  f << j.dump(1) << "\n";
  if (!f) throw Error("htp: cannot write " + p.string());
}

// What compile packs: the variants, the weight groups (one per split, shared by its
// variants, or one per graph without sharing) and each group's stored tensors.
struct Packing {
  std::vector<Variant> variants;
  std::map<std::string, std::vector<std::string>> group_graphs;
  std::map<std::string, std::set<std::string>> graph_weights;
  std::map<std::string, WeightInfo> weights;
  std::map<std::string, std::vector<StoredTensor>> group_tensors;
  // Where each packed weight is (graph, name): fetched again when it is packed, so neither
  // planning nor packing holds more than one weight's mapped pages.
  std::map<std::string, std::vector<std::pair<Graph, std::string>>> group_sources;
  nlohmann::json splits = nlohmann::json::array();
  uint64_t total_weight_bytes = 0;
};

Packing plan_packing(const HtpOptions& o, const ModelSet& ms) {
  Packing p;
  // 1. ops, static shapes, variant names; weight sharing needs one AR when disabled.
  std::set<int64_t> ars;
  const nlohmann::json roles = ms.metadata(roles::kMetadataKey);
  for (const Graph& g : ms.graphs()) {
    check_ops(g);
    check_static(g);
    p.variants.push_back(parse_variant(g.name()));
    p.variants.back().role = roles::role_of(roles, g.name());
    if (p.variants.back().role.empty()) ars.insert(p.variants.back().ar);
  }
  if (!o.weight_sharing && ars.size() > 1)
    throw Error("htp: weight_sharing = false needs a single AR variant (the model set has " + std::to_string(ars.size()) +
                " AR values; set the arcl transform's arn to one value or keep weight_sharing)");

  // 2. Weight groups.
  std::set<std::string> hmx_weights, lm_head_weights;
  std::set<std::string> target_groups;  // groups holding a target graph (the others: a draft's)
  for (const auto& v : p.variants) {
    std::string group = o.weight_sharing ? v.split : v.graph;
    p.group_graphs[group].push_back(v.graph);
    if (v.role.empty()) target_groups.insert(group);
    p.graph_weights[v.graph] =
        packed_weights_of(Graph(host().model_set_find_graph(ms.get(), v.graph.c_str())), &hmx_weights, &lm_head_weights);
  }
  // Each weight is packed once, in the first group that reads it, target groups before a
  // role's (a draft reading the target's embedding table or LM head, whose graphs are a group
  // of their own beside a split target's, takes them from the target's container).
  std::map<std::string, std::string> owner;  // weight -> its group
  for (bool targets : {true, false})
    for (const auto& [group, graphs] : p.group_graphs)
      if ((target_groups.count(group) > 0) == targets)
        for (const auto& g : graphs)
          for (const auto& name : p.graph_weights[g]) owner.emplace(name, group);

  for (const auto& [group, graphs] : p.group_graphs) {
    std::set<std::string> names;
    for (const auto& g : graphs)
      for (const auto& name : p.graph_weights[g])
        if (owner.at(name) == group) names.insert(name);
    Graph first(host().model_set_find_graph(ms.get(), graphs.front().c_str()));
    uint64_t bytes = 0;
    for (const auto& name : names) {
      Graph holder = first;
      for (const auto& g : graphs)
        if (p.graph_weights[g].count(name)) {
          holder = Graph(host().model_set_find_graph(ms.get(), g.c_str()));
          break;
        }
      Tensor t = holder.initializer(name);
      WeightInfo info;
      int assumed = !o.assume_weight_bw || !hmx_weights.count(name) ? 0 : lm_head_weights.count(name) ? 8 : o.assume_weight_bw;
      p.group_tensors[group].push_back(plan_weight(ms, name, t, o, assumed, &info));
      p.group_sources[group].push_back({holder, name});
      p.weights[name] = info;
      bytes += info.bytes;
    }
    p.total_weight_bytes += bytes;
    p.splits.push_back({{"name", group},
                        {"file", o.pack_weights ? nlohmann::json("htp/weights_" + group + ".bin") : nlohmann::json()},
                        {"graphs", graphs},
                        {"weight_bytes", bytes}});
  }
  return p;
}

// The checkpoint a compile part saves a packed payload under: named by what decides its
// bytes (the weight, its shape and its grid), so a compile only ever takes the payload of
// the same tensor stored the same way.
std::string packed_checkpoint_name(const StoredTensor& t) {
  CheckpointName name("packed-");
  name.add(t.name).add(t.dims.data(), t.dims.size() * sizeof(int64_t));
  for (int64_t v : {int64_t{static_cast<int>(t.storage)}, int64_t{t.axis}, int64_t{t.block_axis}, t.block_size}) name.add(v);
  return name.add(t.scales.data(), t.scales.size() * sizeof(float)).add(t.zeros.data(), t.zeros.size() * sizeof(float)).str();
}

}  // namespace

size_t compile_part_count(const char* options_json, size_t wanted) {
  // Packing the weights is the work that splits; an estimate-only package packs none.
  return HtpOptions::parse(Options(options_json).json()).pack_weights ? std::max<size_t>(wanted, 1) : 1;
}

void compile_part(const char* options_json, const nf_model_set* ms_in, Context ctx, size_t index, size_t count) {
  HtpOptions o = HtpOptions::parse(Options(options_json).json());
  const ModelSet ms = ModelSet::view(ms_in);
  if (count == 0 || index >= count) throw Error("htp: compile part " + std::to_string(index) + " of " + std::to_string(count));
  const Packing p = plan_packing(o, ms);
  if (!o.pack_weights) return;
  // A share of the containers' tensors, in the order compile writes them, by value count
  // (the work is reading and quantizing each float).
  std::vector<std::pair<const StoredTensor*, const std::pair<Graph, std::string>*>> all, mine;
  std::vector<uint64_t> values;
  for (const auto& [group, tensors] : p.group_tensors)
    for (size_t i = 0; i < tensors.size(); ++i) {
      all.push_back({&tensors[i], &p.group_sources.at(group)[i]});
      values.push_back(static_cast<uint64_t>(tensors[i].numel()));
    }
  for (size_t i : part_share(values, index, count)) mine.push_back(all[i]);
  for (size_t k = 0; k < mine.size(); ++k) {
    const StoredTensor& t = *mine[k].first;
    ctx.progress(k, mine.size(), "packing " + t.name);
    Tensor w = mine[k].second->first.initializer(mine[k].second->second);
    std::vector<uint8_t> payload;
    payload.reserve(t.payload_bytes());
    pack_in_passes(t, w.data_as<float>(), [&](const uint8_t* b, size_t n) { payload.insert(payload.end(), b, b + n); },
                   [&](size_t offset, size_t bytes) { w.drop_pages(offset, bytes); });
    ctx.checkpoint_save(packed_checkpoint_name(t), payload);
  }
  ctx.info("htp: packed " + std::to_string(mine.size()) + " of the weights (part " + std::to_string(index + 1) + " of " +
           std::to_string(count) + ")");
}

void compile(const char* options_json, const nf_model_set* ms_in, const std::string& out_dir, Context ctx) {
  HtpOptions o = HtpOptions::parse(Options(options_json).json());
  const ModelSet ms = ModelSet::view(ms_in);
  if (ms.graph_count() == 0) throw Error("htp: the model set has no graphs");
  Packing p = plan_packing(o, ms);
  const std::vector<Variant>& variants = p.variants;
  const nlohmann::json& splits = p.splits;
  std::map<std::string, WeightInfo>& weights = p.weights;
  const uint64_t total_weight_bytes = p.total_weight_bytes;

  // 3. Summaries for the hardware model, then the chip's limits (VTCM tiles, memory).
  nlohmann::json summaries = nlohmann::json::object();
  for (const auto& v : variants) {
    CostPolicy policy{o.fp16_relaxed_precision, o.assume_activation_bw, o.assume_kv_bw};
    nlohmann::json s = summarize(ms, Graph(host().model_set_find_graph(ms.get(), v.graph.c_str())), weights, policy);
    s["ar"] = v.ar;
    s["cl"] = v.cl;
    s["split"] = v.split;
    if (!v.role.empty()) s["role"] = v.role;
    summaries[v.graph] = std::move(s);
  }
  nlohmann::json vlist = nlohmann::json::array();
  for (const auto& v : variants) {
    vlist.push_back({{"graph", v.graph}, {"ar", v.ar}, {"cl", v.cl}, {"split", v.split}});
    if (!v.role.empty()) vlist.back()["role"] = v.role;
  }
  nlohmann::json weights_json = nlohmann::json::object();
  for (const auto& [n, w] : weights) weights_json[n] = {{"bits", w.bits}, {"bytes", w.bytes}, {"lpbq", w.lpbq}};
  nlohmann::json meta = {{"backend", "htp"},
                         {"version", kVersion},
                         {"options", o.resolved_json()},
                         {"chip", {{"chipset", o.chipset}, {"name", o.chip.marketing_name}, {"file", fs::path(o.chip.file).filename().string()}}},
                         {"splits", splits},
                         {"variants", vlist},
                         {"weights", weights_json},
                         {"weight_bytes", total_weight_bytes},
                         {"packed", o.pack_weights},
                         {"model", "model"}};
  check_fits(o, meta, summaries);

  // 4. Artifacts: graphs without packed weights, one container per group, the JSONs.
  fs::create_directories(fs::path(out_dir) / "htp");
  fs::create_directories(fs::path(out_dir) / "model");
  {
    InitializerSwap packed(placeholders(ms, p.graph_weights));
    InitializerSwap on_grid(cache_constants_on_grid(ms));
    check(host().model_set_save(ms.get(), (fs::path(out_dir) / "model").string().c_str()));
  }
  size_t done = 0;
  for (const auto& s : splits) {
    if (!o.pack_weights) break;  // estimate-only package
    std::string group = s["name"];
    ctx.progress(done++, splits.size(), "packing weights of " + group);
    const auto& sources = p.group_sources[group];
    const auto& tensors = p.group_tensors[group];
    Tensor current;
    write_container((fs::path(out_dir) / s["file"].get<std::string>()).string(), {{"split", group}, {"graphs", s["graphs"]}},
                    tensors,
                    [&](size_t i) {
                      current = sources[i].first.initializer(sources[i].second);
                      return current.data_as<float>();
                    },
                    [&](size_t) { current = Tensor(); },
                    [&](size_t, size_t offset, size_t bytes) { current.drop_pages(offset, bytes); },
                    [&](size_t i, std::vector<uint8_t>* bytes) {  // what a compile part packed
                      if (!ctx.checkpoint_load(packed_checkpoint_name(tensors[i]), bytes)) return false;
                      if (bytes->size() == tensors[i].payload_bytes()) return true;
                      ctx.warn("htp: the packed '" + tensors[i].name + "' a compile part left has " +
                               std::to_string(bytes->size()) + " bytes, not " + std::to_string(tensors[i].payload_bytes()) +
                               "; packing it again");
                      return false;
                    });
  }
  write_json(fs::path(out_dir) / "htp" / "graphs.json", summaries);
  write_json(fs::path(out_dir) / "htp.json", meta);

  // Backend extensions in the QNN HTP layout (one graphs entry per weight-shared context).
  nlohmann::json gl = nlohmann::json::array();
  for (const auto& s : splits)
    gl.push_back({{"graph_names", s["graphs"]}, {"vtcm_mb", o.vtcm_size_in_mb}, {"O", o.optimization_type},
                  {"hvx_threads", o.hvx_threads}, {"fp16_relaxed_precision", o.fp16_relaxed_precision ? 1 : 0}});
  nlohmann::json ext = {
      {"graphs", gl},
      {"devices", nlohmann::json::array({{{"soc_model", o.soc_model}, {"dsp_arch", o.dsp_arch},
                                          {"cores", nlohmann::json::array({{{"core_id", 0}, {"perf_profile", o.perf_profile},
                                                                            {"rpc_control_latency", o.rpc_control_latency}}})}}})},
      {"context", {{"weight_sharing_enabled", o.weight_sharing}, {"extended_udma", o.extended_udma}}},
      {"memory", {{"mem_type", "shared_buffer"}}}};
  write_json(fs::path(out_dir) / "htp" / "backend_extensions.json", ext);
  ctx.info("htp: " + std::to_string(variants.size()) + " graph(s), " + std::to_string(splits.size()) + " weight container(s), " +
           std::to_string(total_weight_bytes >> 20) + " MiB of weights for " + o.chipset);
}

}  // namespace nf::htp
