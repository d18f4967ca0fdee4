#include "pipeline/pipeline.h"

#include <npuforge/graph_roles.hpp>
#include <npuforge/hf_config.hpp>

#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <optional>

#include "api/host_api.h"
#include "calibration/calibration.h"
#include "common/util.h"
#include "manifest/schema.h"
#include "onnx/onnx_io.h"
#include "pipeline/cache_branch.h"
#include "pipeline/checkpoints.h"
#include "pipeline/constant_branches.h"
#include "pipeline/constant_weights.h"
#include "pipeline/fused_cache.h"
#include "pipeline/int64_inputs.h"
#include "pipeline/last_row_logits.h"
#include "pipeline/microsoft_ops.h"
#include "pipeline/nbits_weights.h"
#include "pipeline/resources.h"
#include "pipeline/stage_cache.h"
#include "pipeline/stage_graph.h"
#include "pipeline/tied_head.h"
#include "pipeline/weight_spill.h"
#include "pipeline/weight_transposes.h"
#include "pipeline/widen_floats.h"
#include "runtime/package.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// The set without the graphs of other roles (metadata "roles" dropped with them).
std::unique_ptr<ir::ModelSet> without_roles(const ir::ModelSet& ms) {
  auto out = ms.clone();
  const std::vector<ir::Graph*> targets = out->targets();
  std::erase_if(out->graphs, [&](const auto& g) { return std::find(targets.begin(), targets.end(), g.get()) == targets.end(); });
  out->metadata.erase(roles::kMetadataKey);
  return out;
}

std::string roles_of(const ir::ModelSet& ms) {
  const auto roles = nlohmann::json::parse(ms.metadata.at(roles::kMetadataKey), nullptr, false);
  std::string names;
  for (const auto& [role, _] : roles.items()) names += (names.empty() ? "role '" : ", '") + role + "'";
  return names;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Each file the graph's weights are mapped from, once.
std::vector<const ir::MappedFile*> mapped_files(const ir::Graph& g) {
  std::vector<const ir::MappedFile*> files;
  for (const auto& [name, ref] : g.initializers) {
    auto* mf = dynamic_cast<const ir::MappedFile*>(ref->tensor.buffer.get());
    if (mf && std::find(files.begin(), files.end(), mf) == files.end()) files.push_back(mf);
  }
  return files;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs one plugin call with a progress bar and cancellation; throws the plugin's error.
template <class Call>
void call_plugin(const std::string& label, Call&& call, CheckpointStore* checkpoints = nullptr) {
  Progress bar(label);
  nf_context ctx{label,
                 [&](uint64_t done, uint64_t total, const std::string& what) { return bar.report(done, total, what); },
                 checkpoints};
  nf_status* st = call_plugin_entry([&] { return call(&ctx); });
  ::malloc_trim(0);  // what the stage freed goes back to the system before the next one
  if (cancel_flag()) {
    if (st) host_api()->status_release(st);
    throw Cancelled();
  }
  try {
    ir::check_mapped_files();  // the plugin read a weights file that changed: its result is not to be trusted
  } catch (...) {
    if (st) host_api()->status_release(st);
    throw;
  }
  throw_if_error(st, label);
}

// The speculative decoder's asset options, resolved by manifest::asset_paths (a value from
// the manifest is relative to the manifest, a default to the model's folder). Throws when
// one does not exist, so a build fails before any stage runs (check reports it too).
std::vector<manifest::AssetPath> decoder_assets(const manifest::Manifest& m, const Registry& registry) {
  if (!m.speculative) return {};
  const PluginInfo* decoder = registry.find(NF_KIND_SPECULATIVE, m.speculative->name);
  if (!decoder) return {};
  auto assets = manifest::asset_paths(*m.speculative, decoder->schema, m.dir, fs::path(m.model_onnx).parent_path().string());
  for (const auto& a : assets)
    if (!fs::exists(a.path))
      throw std::runtime_error(manifest::format_error(
          a.where, "speculative decoder '" + m.speculative->name + "' needs its asset '" + a.key + "': '" + a.path +
                       "' does not exist" + (a.given ? "" : " (the default, in the model's folder)") +
                       "; see the decoder's README for how to make it"));
  return assets;
}

// Copies the decoder's assets into `package`/assets/<decoder>/ and returns its options with
// package-relative paths. Files in `compiled` (the .onnx files its build hook imported as
// graphs the package holds compiled) stay out.
nlohmann::json package_decoder_assets(const manifest::Manifest& m, const std::vector<manifest::AssetPath>& assets,
                                      const fs::path& package, const std::set<fs::path>& compiled) {
  nlohmann::json options = m.speculative->options;
  for (const auto& a : assets) {
    fs::path rel = fs::path("assets") / m.speculative->name / fs::path(a.path).filename();
    fs::create_directories(package / rel.parent_path());
    if (fs::is_directory(a.path)) {
      fs::create_directories(package / rel);
      for (const auto& e : fs::recursive_directory_iterator(a.path)) {
        const fs::path to = package / rel / fs::relative(e.path(), a.path);
        if (e.is_directory()) fs::create_directories(to);
        else if (!compiled.count(fs::weakly_canonical(e.path()))) fs::copy(e.path(), to);
      }
    } else {
      fs::copy(a.path, package / rel);
    }
    options[a.key] = rel.string();
  }
  return options;
}

// The asset files a compiled model set (`metadata`: its model-set metadata) makes unneeded:
// the .onnx files imported as graphs of a role, which the package holds, and the files
// beside them the role says it replaces (graph_roles.hpp "replaces"). With no role left
// (the backend could not compile them) none.
std::set<fs::path> compiled_imports(const nlohmann::json& metadata) {
  std::set<fs::path> files;
  if (!metadata.contains(roles::kMetadataKey) || !metadata.contains(kImportedFilesMetadata)) return files;
  std::vector<std::string> replaced;
  for (const auto& [role, entry] : metadata[roles::kMetadataKey].items())
    if (entry.is_object() && entry.contains("replaces") && entry["replaces"].is_array())
      for (const auto& name : entry["replaces"])
        if (name.is_string() && fs::path(name.get<std::string>()).filename() == name.get<std::string>())
          replaced.push_back(name.get<std::string>());  // a file name, never a path out of the folder
  for (const auto& f : metadata[kImportedFilesMetadata])
    if (f.is_string()) {
      const fs::path imported(f.get<std::string>());
      files.insert(imported);
      for (const auto& name : replaced) files.insert(fs::weakly_canonical(imported.parent_path() / name));
    }
  return files;
}

// Refuses what cannot fit by the build's estimated peak memory and disk (resources.h),
// before any stage runs. Returns whether the stage cache fits too:
// a build whose cache entries would fill the disk runs without them.
bool fits_before_start(const BuildNeeds& need, const BuildRequest& req, const fs::path& cache_root) {
  const uint64_t memory = memory_available(), out_free = disk_free(req.out_dir);
  spdlog::info("estimated from the model's {} of fp32 weights: peak memory ~{} ({}), packages ~{}{}{}; available: {} "
               "of memory, {} of disk for the packages",
               human_bytes(need.weight_bytes), human_bytes(need.peak_memory), need.peak_stage, human_bytes(need.package_bytes),
               need.scratch_bytes ? ", scratch ~" + human_bytes(need.scratch_bytes) : std::string(),
               need.cache_bytes ? ", stage cache ~" + human_bytes(need.cache_bytes) : std::string(), human_bytes(memory),
               human_bytes(out_free));
  if (std::string why = why_build_does_not_fit(need, memory, out_free, req.out_dir.string());
      !why.empty() && !req.skip_resource_check)
    throw std::runtime_error(why + "; pass --skip-resource-check to try anyway");
  if (need.package_bytes + need.scratch_bytes > out_free)
    spdlog::warn("the weights this build makes (~{}) do not fit beside the packages on {} ({} free): they stay in "
                 "memory",
                 human_bytes(need.scratch_bytes), req.out_dir.string(), human_bytes(out_free));
  if (need.cache_bytes && need.cache_bytes + need.package_bytes > disk_free(cache_root)) {
    spdlog::warn("the stage cache would need ~{} and {} has {} free: building without it (--cache-dir picks another "
                 "place)",
                 human_bytes(need.cache_bytes), cache_root.string(), human_bytes(disk_free(cache_root)));
    return false;
  }
  return true;
}

// Files a JSON asset names beside itself (rotations.json -> "data": "rotations.bin"),
// with their hashes: the asset's meaning includes their bytes.
std::map<std::string, std::string> json_companions(const fs::path& file) {
  std::map<std::string, std::string> out;
  nlohmann::json j = nlohmann::json::parse(read_regular_file(file, kJsonMax, "asset"), nullptr, false);
  std::vector<const nlohmann::json*> todo{&j};
  while (!todo.empty()) {
    const nlohmann::json* v = todo.back();
    todo.pop_back();
    if (v->is_structured()) {
      for (const auto& x : *v) todo.push_back(&x);
    } else if (v->is_string()) {
      const fs::path rel = v->get<std::string>();
      std::error_code ec;
      if (rel.empty() || rel.is_absolute() || rel.lexically_normal().string().starts_with("..")) continue;
      const fs::path f = file.parent_path() / rel;
      if (f != file && fs::is_regular_file(f, ec)) out[rel.lexically_normal().generic_string()] = hash_file(f);
    }
  }
  return out;
}

// A file's hash (a JSON file's with its companions'); a folder's: of its files' relative
// paths and hashes, in order.
std::string content_hash(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) {
    if (p.extension() != ".json") return hash_file(p);
    return hash_string(hash_file(p) + nlohmann::json(json_companions(p)).dump());
  }
  if (!fs::is_directory(p, ec)) return "missing";
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(p, ec))
    if (e.is_regular_file()) files[fs::relative(e.path(), p).generic_string()] = hash_file(e.path());
  return hash_string(nlohmann::json(files).dump());
}

// A stage plugin's options with each asset option (a path: schema "format": "asset") made
// absolute as manifest::asset_paths rules (a written value against the manifest's folder, a
// schema default against the model's), so a build means the same files from whatever folder
// it runs in; and {option: content hash} of those files for the stage's cache key.
std::pair<nlohmann::json, nlohmann::json> resolve_asset_options(const manifest::PluginUse& use, const PluginInfo& p,
                                                                const manifest::Manifest& m) {
  nlohmann::json options = use.options, files = nlohmann::json::object();
  for (const auto& a : manifest::asset_paths(use, p.schema, m.dir, fs::path(m.model_onnx).parent_path().string())) {
    if (use.options.value(a.key, std::string()).empty()) continue;  // "" is "no file"
    options[a.key] = a.path;
    files[a.key] = content_hash(a.path);
  }
  return {options, files};
}

// The hash of the program this runs in (the host's libraries are static): what the host
// does to a model before a compile (the last-row head) is part of the compile's key.
const std::string& host_program_hash() {
  static const std::string hash = [] {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("unknown") : hash_file(self);
  }();
  return hash;
}

// tie_lm_head, with an info line when it tied a copy.
std::string tie_lm_head_and_say(ir::Graph& g) {
  std::string copy = tie_lm_head(g);
  if (!copy.empty())
    spdlog::info("tied LM head: '{}' is the transpose of the embedding table; the head reads the table instead", copy);
  return copy;
}

// What loading does to a source before any stage sees it, in this order: the layouts and
// weight forms other exporters write, read as the one every stage knows. Returns a tag per
// change for the source's cache key (cached stages of a build from before these steps must
// not be replayed); `say` logs each change (a stage process, handed the key, stays quiet).
std::string read_source_forms(ir::Graph& g, int64_t heads, bool say) {
  std::string key;
  auto changed = [&](const std::string& tag, const std::string& line) {
    if (say) spdlog::info("{}", line);
    key += hash_string(tag);
  };
  if (std::string merge = inline_cache_branch(g); !merge.empty())
    changed("inline_cache_branch",
            "merged decoder (optimum's decoder_model_merged): the If '" + merge + "' read as its branch with the KV cache");
  if (size_t selected = select_constant_branches(g))
    changed("select_constant_branches",
            std::to_string(selected) + " If node(s) choosing between constant tables (ONNX Runtime GenAI's LongRoPE "
                                       "cos/sin caches) read as a Slice of both, chosen by the same condition");
  if (size_t expanded = expand_microsoft_ops(g))
    changed("expand_microsoft_ops", std::to_string(expanded) +
                                        " fused operators (ONNX Runtime GenAI's GroupQueryAttention, RotaryEmbedding, "
                                        "[Skip]SimplifiedLayerNormalization; opset 23's Attention, RotaryEmbedding, "
                                        "RMSNormalization) expanded into standard operators");
  if (size_t lifted = lift_constant_weights(g))
    changed("lift_constant_weights", std::to_string(lifted) + " weights stored as Constant nodes read as initializers");
  if (size_t widened = int64_decoder_inputs(g))
    changed("int64_decoder_inputs", std::to_string(widened) +
                                        " int32 decoder inputs (input_ids, attention_mask, position_ids) read as "
                                        "int64, cast in the graph");
  if (std::string copy = say ? tie_lm_head_and_say(g) : tie_lm_head(g); !copy.empty())
    key += hash_string("tie_lm_head " + copy);
  if (int64_t layers = read_fused_cache_as_pairs(g, heads))
    changed("fused_cache_as_pairs", "fused KV cache (GPT-BigCode exported with transformers < 4.54): " +
                                        std::to_string(layers) + " layers read as key/value pairs");
  return key;
}

}  // namespace

void check_graphs(const ir::ModelSet& ms, const std::string& context) {
  for (const auto& g : ms.graphs)
    if (std::string why = ir::graph_problem(*g); !why.empty())
      throw std::runtime_error(context + ": graph '" + g->name + "': " + why);
}

std::vector<std::string> load_and_validate(manifest::Manifest& m, Registry& registry) {
  registry.load_directories(Registry::search_path(m.plugin_paths));
  for (const auto& w : registry.warnings()) spdlog::warn("{}", w);
  auto lookup = [&](const std::string& kind, const std::string& name) -> std::optional<nlohmann::json> {
    nf_plugin_kind k;
    if (!parse_kind(kind, &k)) return std::nullopt;
    const PluginInfo* p = registry.find(k, name);
    if (!p) return std::nullopt;
    return p->schema;
  };
  auto installed = [&](const std::string& kind) {
    std::vector<std::string> names;
    nf_plugin_kind k;
    if (parse_kind(kind, &k))
      for (const PluginInfo* p : registry.list(k)) names.push_back(p->name);
    return names;
  };
  return manifest::validate(m, lookup, installed);
}

std::unique_ptr<ir::ModelSet> map_source_model(const std::string& onnx_path, const std::string& config_path,
                                               std::string* config_text) {
  auto ms = std::make_unique<ir::ModelSet>();
  auto g = onnx_io::load_model(onnx_path);
  g->name = "model";
  std::string config = config_path;
  if (config.empty()) {
    fs::path beside = fs::path(onnx_path).parent_path() / "config.json";
    if (fs::is_regular_file(beside)) config = beside.string();
  }
  if (!config.empty()) {
    std::string text = read_regular_file(config, kJsonMax, "model config");
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(config + ": not valid JSON");
    }
    ms->metadata["config"] = cfg.dump();
    if (config_text) *config_text = std::move(text);
  }
  ms->graphs.push_back(std::move(g));
  return ms;
}

std::unique_ptr<ir::ModelSet> load_source_model(const std::string& onnx_path, const std::string& config_path,
                                               const std::string& known_key) {
  std::string config_text;
  auto ms = map_source_model(onnx_path, config_path, &config_text);
  ir::Graph& g = *ms->graphs[0];

  const int64_t heads = ms->metadata.count("config")
                            ? hf_config::get_int(nlohmann::json::parse(ms->metadata.at("config")), "num_attention_heads").value_or(-1)
                            : -1;
  if (!known_key.empty()) {
    read_source_forms(g, heads, false);
    ms->metadata["source_key"] = nlohmann::json(known_key).dump();
    return ms;
  }
  // The cache key of the source: the .onnx bytes and every external-data file it maps.
  std::string key = hash_file(onnx_path);
  for (const ir::MappedFile* mf : mapped_files(g))
    key += hash_buffer(*mf);  // drops the pages it hashed: loading maps, it does not read
  key += read_source_forms(g, heads, true);
  if (foldable_weight_transposes(g)) key += hash_string("fold_weight_transposes");  // prepare() folds them
  if (nbits_nodes(g)) key += hash_string("dequantize_nbits_nodes");               // and dequantizes these
  if (tied_head_as_table(g)) key += hash_string("table_from_tied_head");          // and turns this round
  if (ms->metadata.count("config")) key += hash_string(config_text);
  ms->metadata["source_key"] = nlohmann::json(hash_string(key)).dump();
  return ms;
}

void read_weight_forms(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep) {
  if (Widened w = widen_16bit_floats(g, keep); w.any())
    spdlog::info("the model is {}: computing in float32 ({} weights widened, {})", ir::dtype_name(w.from), w.weights,
                 human_bytes(w.bytes));
  if (DequantizedNBits d = dequantize_nbits_nodes(g, keep); d.weights || d.tables) {
    spdlog::info("{} MatMulNBits weights and {} GatherBlockQuantized tables (ONNX Runtime's block-quantized forms) "
                 "dequantized to float32 ({})",
                 d.weights, d.tables, human_bytes(d.bytes));
    if (d.tables) tie_lm_head_and_say(g);  // a table shared with the head's codes: now two equal copies
  }
  if (FoldedTransposes f = fold_weight_transposes(g, keep); f.weights) {
    spdlog::info("{} weights stored [out, in] behind a Transpose (torch's dynamo export) read as [in, out] initializers ({})",
                 f.weights, human_bytes(f.bytes));
    tie_lm_head_and_say(g);  // a head that was one of them
  }
  if (std::string table = table_from_tied_head(g, keep); !table.empty())
    spdlog::info("tied LM head stored as the head's weight, the embeddings gathered from its Transpose (ONNX "
                 "Runtime GenAI): the table '{}' is made an initializer and the head reads its Transpose", table);
}

std::vector<manifest::ManifestError> validate_stages(const manifest::Manifest& m, const Registry& registry,
                                                     const ir::ModelSet& source) {
  std::vector<manifest::ManifestError> errors;
  auto validate = [&](nf_plugin_kind kind, const manifest::PluginUse& use) {
    const PluginInfo* p = registry.find(kind, use.name);
    if (!p) return;
    auto entry = kind == NF_KIND_QUANT ? p->quant()->validate : p->transform()->validate;
    if (!entry) return;  // a plugin without the entry (built before it, or nothing to check)
    const std::string label = std::string(kind_name(kind)) + " " + use.name;
    const std::string options = resolve_asset_options(use, *p, m).first.dump();
    nf_context ctx{label, {}};
    nf_status* st = call_plugin_entry([&] { return entry(options.c_str(), handle(&source), &ctx); });
    try {
      throw_if_error(st, label);
    } catch (const std::exception& e) {
      errors.emplace_back(use.where, e.what());
    }
  };
  for (const auto& q : m.quant) validate(NF_KIND_QUANT, q);
  for (const auto& t : m.transforms) validate(NF_KIND_TRANSFORM, t);
  return errors;
}

namespace {

// The steps of one build, shared by every executor: the in-process build runs them in
// order; a stage process (`npuforge build-stage`) runs one of them, taking its input from
// the stage cache.
class BuildSteps {
 public:
  struct ChainStage {
    nf_plugin_kind kind;
    const manifest::PluginUse* use;
    const PluginInfo* plugin;
    std::string label, id, key;
    nlohmann::json options;  // asset options made absolute
  };

  BuildSteps(const manifest::Manifest& m, const Registry& registry, const StageCache& cache, fs::path cache_root,
             const fs::path& out_dir, std::vector<manifest::AssetPath> assets,
             std::function<void(const std::string&, const std::string&)> on_checkpoint, uint64_t package_bytes)
      : m_(m),
        registry_(registry),
        cache_(cache),
        cache_root_(std::move(cache_root)),
        assets_(std::move(assets)),
        on_checkpoint_(std::move(on_checkpoint)),
        spill_(out_dir, package_bytes) {
    // A decoder's build hook is the first stage: what it adds is calibrated, quantized
    // and compiled with the target.
    if (m.speculative)
      if (const PluginInfo* d = registry_.find(NF_KIND_SPECULATIVE, m.speculative->name); d && d->speculative()->build)
        add(NF_KIND_SPECULATIVE, *m.speculative);
    for (const auto& q : m.quant) add(NF_KIND_QUANT, q);
    for (const auto& t : m.transforms) add(NF_KIND_TRANSFORM, t);
  }

  const std::vector<ChainStage>& chain() const { return chain_; }

  // The key of the prepared source (widened: follows from the source's bytes and the host's
  // version), then of every stage after.
  void set_keys(const std::string& source_key) {
    std::string key = hash_string(source_key + "\nprepared");
    std::map<std::string, std::string> library_hashes;  // plugin library path -> hash of its bytes
    for (auto& s : chain_) {
      // The output depends on the options, the bytes of the files they name, the plugin's
      // library and (quant) the calibration data: all of it goes into the key.
      auto [options, files] = resolve_asset_options(*s.use, *s.plugin, m_);
      s.options = options;
      nlohmann::json inputs{{"options", s.use->options}, {"files", files}};
      if (s.kind == NF_KIND_QUANT) inputs["calibration"] = calibration_cache_key(m_);
      auto lib = library_hashes.find(s.plugin->library);
      if (lib == library_hashes.end()) lib = library_hashes.emplace(s.plugin->library, hash_file(s.plugin->library)).first;
      key = s.key = StageCache::key(key, kind_name(s.kind), s.plugin->name, s.plugin->version, lib->second, inputs);
    }
    model_key_ = key;
  }

  // The source as the stages see it (read_weight_forms), new weights in the scratch file.
  std::unique_ptr<ir::ModelSet> prepare(std::unique_ptr<ir::ModelSet> ms) {
    read_weight_forms(*ms->graphs[0], [&](ir::TensorRef& t) { spill_.spill(t); });
    spill_new_weights(*ms);
    return ms;
  }

  // The model after the first `count` stages: the latest of them the stage cache holds,
  // then the stages after it run here (from `source()` when the cache holds none). Appends
  // each stage's record (package.json "stages") to `records`.
  std::unique_ptr<ir::ModelSet> model_after(size_t count, const std::function<std::unique_ptr<ir::ModelSet>()>& source,
                                            nlohmann::json& records, const std::function<void(const std::string&)>& on_stage) {
    std::unique_ptr<ir::ModelSet> ms;
    size_t first = count;  // the first stage to run here
    for (; first > 0; --first) {
      const ChainStage& s = chain_[first - 1];
      if (cancel_flag()) throw Cancelled();
      const auto t0 = std::chrono::steady_clock::now();
      if ((ms = cache_.load(s.key))) {
        on_stage(s.label);
        for (size_t i = 0; i < first; ++i) records.push_back(record(chain_[i], i + 1 == first ? seconds_since(t0) : 0, true));
        spdlog::info("{}: {} graph(s) from the stage cache{}", s.label, ms->graphs.size(),
                     first > 1 ? " (with the " + std::to_string(first - 1) + " stage(s) before it)" : "");
        break;
      }
    }
    if (!ms) ms = source();
    for (size_t i = first; i < count; ++i) records.push_back(run(i, ms, on_stage));
    return ms;
  }

  // Runs chain stage i on `ms` (the output of stage i-1) and stores its output in the stage
  // cache. Returns its record.
  nlohmann::json run(size_t i, std::unique_ptr<ir::ModelSet>& ms, const std::function<void(const std::string&)>& on_stage) {
    const ChainStage& s = chain_[i];
    on_stage(s.label);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string options = s.options.dump();
    std::unique_ptr<TextCalibration> calibration = calibration_for(s);
    std::unique_ptr<StageCheckpoints> checkpoints = checkpoints_for(s);
    call_plugin(
        s.label,
        [&](nf_context* ctx) {
          if (s.kind == NF_KIND_QUANT) return s.plugin->quant()->apply(options.c_str(), handle(ms.get()), calibration.get(), ctx);
          if (s.kind == NF_KIND_SPECULATIVE) return s.plugin->speculative()->build(options.c_str(), handle(ms.get()), ctx);
          return s.plugin->transform()->apply(options.c_str(), handle(ms.get()), ctx);
        },
        checkpoints.get());
    const bool stored = cache_.store(s.key, *ms);
    if (checkpoints) {
      if (checkpoints->loaded())
        spdlog::info("{}: resumed an interrupted run ({} step(s) from its checkpoints)", s.label, checkpoints->loaded());
      checkpoints_loaded_ += checkpoints->loaded();
      if (stored) checkpoints->remove_all();
    }
    spill_new_weights(*ms);
    const double secs = seconds_since(t0);
    spdlog::info("{}: {} graph(s) in {:.2f}s", s.label, ms->graphs.size(), secs);
    return record(s, secs, false);
  }

  // How many parts quant stage i runs in when `wanted` could run side by side: 1 unless its
  // plugin splits its work (nf_quant_api shard_count, apply_shard) with these options.
  size_t shard_count(size_t i, size_t wanted) const {
    const ChainStage& s = chain_[i];
    if (s.kind != NF_KIND_QUANT || wanted < 2 || !m_.calibration || !s.plugin->quant()->shard_count ||
        !s.plugin->quant()->apply_shard)
      return 1;  // without [calibration] no recipe has work to split
    size_t count = 1;
    const std::string options = s.options.dump();
    throw_if_error(call_plugin_entry([&] { return s.plugin->quant()->shard_count(options.c_str(), wanted, &count); }),
                   s.label);
    // At most a part per calibration batch: a part without a batch of its own would load
    // the stage's input to calibrate nothing.
    return std::clamp<size_t>(count, 1, std::min<size_t>(wanted, static_cast<size_t>(m_.calibration->num_samples)));
  }

  // Runs part `index` of `count` of quant stage i on `ms` (the output of stage i-1): its
  // results go to the stage's checkpoints, which the stage takes when it runs.
  nlohmann::json run_shard(size_t i, ir::ModelSet& ms, size_t index, size_t count) {
    const ChainStage& s = chain_[i];
    const auto t0 = std::chrono::steady_clock::now();
    const std::string options = s.options.dump();
    std::unique_ptr<TextCalibration> calibration = calibration_for(s);
    std::unique_ptr<StageCheckpoints> checkpoints = checkpoints_for(s);
    if (!checkpoints) throw std::runtime_error(s.label + ": its parts hand their results on through the stage cache");
    const std::string label = s.label + " (part " + std::to_string(index + 1) + " of " + std::to_string(count) + ")";
    call_plugin(
        label,
        [&](nf_context* ctx) {
          return s.plugin->quant()->apply_shard(options.c_str(), handle(&ms), calibration.get(), ctx, index, count);
        },
        checkpoints.get());
    const double secs = seconds_since(t0);
    spdlog::info("{}: done in {:.2f}s", label, secs);
    return {{"kind", "part"}, {"stage", s.label}, {"part", index}, {"parts", count}, {"seconds", secs}};
  }

  // How many parts target `use`'s compile runs in when `wanted` could run side by side: 1
  // unless its backend splits its work (nf_backend_api compile_part_count, compile_part).
  size_t compile_part_count(const manifest::PluginUse& use, size_t wanted) const {
    const PluginInfo* backend = &backend_of(use);
    if (wanted < 2 || !backend->backend()->compile_part_count || !backend->backend()->compile_part) return 1;
    size_t count = 1;
    const std::string options = use.options.dump();
    throw_if_error(call_plugin_entry([&] { return backend->backend()->compile_part_count(options.c_str(), wanted, &count); }),
                   "compile " + use.name);
    return std::clamp<size_t>(count, 1, wanted);
  }

  // Runs part `index` of `count` of target's compile on the chain's output: what it makes
  // goes to the compile's checkpoints, which the compile takes when it runs.
  nlohmann::json run_compile_part(const std::string& target, const manifest::PluginUse& use,
                                  const ir::ModelSet& chain_output, size_t index, size_t count) {
    const PluginInfo* backend = &backend_of(use);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string label =
        "compile " + target + " (part " + std::to_string(index + 1) + " of " + std::to_string(count) + ")";
    std::unique_ptr<StageCheckpoints> checkpoints = checkpoints_for(compile_key(use, *backend), "compile " + target);
    if (!checkpoints) throw std::runtime_error(label + ": the parts of a compile hand their results on through the stage cache");
    const std::unique_ptr<ir::ModelSet> with_last_row = with_last_row_logits(chain_output);  // as compile gets it
    const ir::ModelSet& ms = with_last_row ? *with_last_row : chain_output;
    const std::string options = use.options.dump();
    call_plugin(
        label,
        [&](nf_context* ctx) {
          return backend->backend()->compile_part(options.c_str(), handle(&ms), ctx, index, count);
        },
        checkpoints.get());
    const double secs = seconds_since(t0);
    spdlog::info("{}: done in {:.2f}s", label, secs);
    return {{"kind", "part"}, {"stage", "compile " + target}, {"part", index}, {"parts", count}, {"seconds", secs}};
  }

  // Compiles the chain's output for one target into `staging` (artifacts, package.json,
  // build_report.json) and seals it. `built` gives the chain's output, loaded only when the
  // compile is not in the cache; `records` are the stages' records.
  void compile(const std::string& target, const manifest::PluginUse& use,
               const std::function<const ir::ModelSet&()>& built, const fs::path& staging,
               const nlohmann::json& records) {
    const PluginInfo* backend = &backend_of(use);
    const std::string label = "compile " + target;
    fs::create_directories(staging / "artifacts");
    auto t0 = std::chrono::steady_clock::now();
    std::string options = use.options.dump();
    std::string artifacts = (staging / "artifacts").string();
    const std::string key = compile_key(use, *backend);
    // What the package says of the model set compiled: its graphs and metadata.
    nlohmann::json artifact_hashes = nlohmann::json::object();  // taken as the cache copied them
    std::optional<nlohmann::json> model = cache_.load_compile(key, artifacts, &artifact_hashes);
    const bool cached = model.has_value();
    if (!cached) {
      // A dynamic-layout decoder is packaged with its LM head also on the last row alone.
      const ir::ModelSet& chain_output = built();
      const std::unique_ptr<ir::ModelSet> with_last_row = with_last_row_logits(chain_output);
      const ir::ModelSet* ms = with_last_row ? with_last_row.get() : &chain_output;
      check_graphs(*ms, "before " + label);
      // What the compile's parts made (nf_backend_api compile_part), and where an interrupted
      // compile resumes.
      std::unique_ptr<StageCheckpoints> checkpoints = checkpoints_for(key, label);
      auto compile = [&](const ir::ModelSet& set) {
        call_plugin(
            label,
            [&](nf_context* ctx) {
              return backend->backend()->compile(options.c_str(), handle(&set), artifacts.c_str(), ctx);
            },
            checkpoints.get());
      };
      // A backend that cannot compile the graphs of a role (a draft arcl has not made
      // static) still builds the target's package; the decoder then runs its draft on the host.
      std::unique_ptr<ir::ModelSet> targets_only;
      try {
        compile(*ms);
      } catch (const Cancelled&) {
        throw;
      } catch (const std::exception& e) {
        if (ms->targets().size() == ms->graphs.size() || cancel_flag()) throw;
        targets_only = without_roles(*ms);
        spdlog::warn("{}: {} cannot compile the graphs of {} ({}); the package holds the target's graphs alone", target,
                     backend->name, roles_of(*ms), first_line(e.what()));
        fs::remove_all(artifacts);
        fs::create_directories(artifacts);
        compile(*targets_only);
        ms = targets_only.get();
      }
      model = nlohmann::json{{"graphs", graph_specs(*ms)}, {"graph_count", ms->graphs.size()}, {"metadata", nlohmann::json::object()}};
      for (const auto& [k, v] : ms->metadata) (*model)["metadata"][k] = nlohmann::json::parse(v);
      const bool stored = cache_.store_compile(key, artifacts, *model, &artifact_hashes);
      if (checkpoints) {
        if (checkpoints->loaded()) spdlog::info("{}: {} step(s) from its parts or an interrupted run", label, checkpoints->loaded());
        checkpoints_loaded_ += checkpoints->loaded();
        if (stored) checkpoints->remove_all();
      }
    }
    double compile_secs = seconds_since(t0);
    const nlohmann::json& metadata = (*model)["metadata"];

    nlohmann::json meta{{"format", kPackageFormat},
                        {"version", kPackageVersion},
                        {"created_by", "npuforge 0.1.0"},
                        {"target", target},
                        {"backend", {{"name", backend->name}, {"version", backend->version}, {"options", use.options}}},
                        {"graphs", (*model)["graphs"]},
                        {"stages", records},
                        {"source", {{"onnx", m_.model_onnx}, {"key", metadata.at("source_key")}}},
                        {"tokenizer", nullptr},
                        {"speculative", nullptr}};
    if (metadata.contains("config")) {
      write_text_file_atomic(staging / "config.json", metadata["config"].dump(2));
      meta["config"] = "config.json";
    }
    if (!m_.model_tokenizer.empty()) {
      // Read with the bounds of any input (a FIFO or a device in its place is refused).
      write_text_file_atomic(staging / "tokenizer.json", read_regular_file(m_.model_tokenizer, kTokenizerMax, "tokenizer"));
      fs::path tcfg = fs::path(m_.model_tokenizer).parent_path() / "tokenizer_config.json";
      if (fs::is_regular_file(tcfg))
        write_text_file_atomic(staging / "tokenizer_config.json", read_regular_file(tcfg, kTokenizerMax, "tokenizer config"));
      meta["tokenizer"] = "tokenizer.json";
    }
    // Model-set metadata the transforms left for the runner ("io": static layout, variants).
    nlohmann::json extra = metadata;
    extra.erase("config");
    extra.erase("source_key");
    extra.erase(kImportedFilesMetadata);  // the build machine's paths
    meta["metadata"] = extra;
    if (m_.speculative)
      meta["speculative"] = {{"decoder", m_.speculative->name},
                             {"options", package_decoder_assets(m_, assets_, staging, compiled_imports(metadata))}};

    nlohmann::json report{{"target", target},
                          {"backend", backend->name},
                          {"stages", records},
                          {"compile_seconds", compile_secs},
                          {"compile_cached", cached},
                          {"graphs", (*model)["graph_count"]},
                          {"peak_rss_bytes", peak_rss_bytes()}};
    write_text_file_atomic(staging / "build_report.json", report.dump(2) + "\n");
    seal_package(staging, meta, artifact_hashes);
    if (cached) spdlog::info("{}: {} compile from the stage cache", target, backend->name);
    else spdlog::info("{}: {} compiled in {:.2f}s", target, backend->name, compile_secs);
  }

  // The compile's key, as a stage's: the model it compiles (the chain's last key), the
  // backend (name, version, library bytes and its data folder <library dir>/<name>/, where
  // htp keeps its chip files and aries its device files), its options and the files they
  // name, and the host program (it adds the last-row head before compiling).
  std::string compile_key(const manifest::PluginUse& use) const { return compile_key(use, backend_of(use)); }
  std::string compile_key(const manifest::PluginUse& use, const PluginInfo& backend) const {
    const fs::path data = fs::path(backend.library).parent_path() / backend.name;
    nlohmann::json inputs{{"options", use.options},
                          {"files", resolve_asset_options(use, backend, m_).second},
                          {"data", content_hash(data)},
                          {"host", host_program_hash()}};
    return StageCache::key(model_key_, "compile", backend.name, backend.version, hash_file(backend.library), inputs);
  }

  size_t checkpoints_loaded() const { return checkpoints_loaded_; }
  // The record of chain stage i when its output is in the cache already.
  nlohmann::json cached_record(size_t i) const { return record(chain_[i], 0, true); }

 private:
  const PluginInfo& backend_of(const manifest::PluginUse& use) const {
    const PluginInfo* backend = registry_.find(NF_KIND_BACKEND, use.name);
    if (!backend) throw std::runtime_error("no backend plugin named '" + use.name + "'");
    return *backend;
  }

  void add(nf_plugin_kind kind, const manifest::PluginUse& use) {
    const PluginInfo* p = registry_.find(kind, use.name);
    if (!p) throw std::runtime_error(std::string("no ") + kind_name(kind) + " plugin named '" + use.name + "'");
    const std::string label = std::string(kind_name(kind)) + " " + use.name;
    chain_.push_back({kind, &use, p, label, std::string(kind_name(kind)) + "-" + std::to_string(chain_.size()) + "-" + use.name, "", {}});
  }

  // Quant recipes calibrate on the manifest's [calibration] text (null without one).
  std::unique_ptr<TextCalibration> calibration_for(const ChainStage& s) const {
    return s.kind == NF_KIND_QUANT ? make_calibration(m_, registry_) : nullptr;
  }

  // The stage's checkpoints (with the stage cache): a stage interrupted earlier resumes from
  // the steps it saved, and takes what its parts found.
  std::unique_ptr<StageCheckpoints> checkpoints_for(const ChainStage& s) const { return checkpoints_for(s.key, s.label); }
  std::unique_ptr<StageCheckpoints> checkpoints_for(const std::string& key, const std::string& label) const {
    if (!cache_.enabled()) return nullptr;
    return std::make_unique<StageCheckpoints>(cache_root_, key, [this, label](const std::string& name) {
      if (on_checkpoint_) on_checkpoint_(label, name);
    });
  }

  static nlohmann::json record(const ChainStage& s, double seconds, bool cached) {
    return {{"kind", kind_name(s.kind)}, {"name", s.plugin->name}, {"version", s.plugin->version}, {"options", s.use->options},
            {"seconds", seconds},         {"cached", cached},       {"key", s.key}};
  }

  void spill_new_weights(ir::ModelSet& ms) {
    if (uint64_t moved = spill_.spill(ms)) {
      ::malloc_trim(0);
      spdlog::debug("moved {} of new weights to the scratch file", human_bytes(moved));
    }
  }

  const manifest::Manifest& m_;
  const Registry& registry_;
  const StageCache& cache_;
  fs::path cache_root_;
  std::string model_key_;  // of the chain's output (set_keys)
  std::vector<manifest::AssetPath> assets_;
  std::function<void(const std::string&, const std::string&)> on_checkpoint_;
  // New weights (widened, grown or made by stages) go to a scratch file beside the output,
  // so they leave memory like the model's own mapped weights.
  WeightSpill spill_;
  SpillReleasedWeights spill_as_released_{spill_};
  std::vector<ChainStage> chain_;
  size_t checkpoints_loaded_ = 0;
};

std::vector<std::pair<std::string, manifest::PluginUse>> selected_targets(const manifest::Manifest& m, const std::string& target) {
  std::vector<std::pair<std::string, manifest::PluginUse>> targets;
  for (const auto& t : m.targets)
    if (target == "all" || target == t.first) targets.push_back(t);
  if (targets.empty()) {
    std::string names;
    for (const auto& t : m.targets) names += (names.empty() ? "" : ", ") + t.first;
    throw std::runtime_error(m.path + ": no target named '" + target + "' (targets: " + names + ")");
  }
  return targets;
}

// {path, size, mtime_ns} of a file, null when it cannot be stat'ed: a stage process refuses
// a model whose stamps changed since the build was planned (hashing it again would cost as
// much as the stage).
nlohmann::json file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return nullptr;
  return {{"path", path}, {"size", st.st_size}, {"mtime_ns", int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec}};
}

// The stamps of the .onnx and of every file its weights are mapped from.
nlohmann::json source_stamps(const std::string& onnx, const ir::Graph& g) {
  std::vector<std::string> paths{fs::absolute(onnx).string()};
  for (const ir::MappedFile* mf : mapped_files(g)) paths.push_back(fs::absolute(mf->path()).string());
  nlohmann::json files = nlohmann::json::array();
  for (const auto& p : paths) {
    nlohmann::json stamp = file_stamp(p);
    if (stamp.is_null()) throw std::runtime_error(p + ": " + std::strerror(errno));
    files.push_back(std::move(stamp));
  }
  return files;
}

// Runs the graph of a build's stages on another executor than this process: writes the
// plan, records the stages the cache already holds, runs the others and leaves the
// targets' packages sealed in `staging`.
void run_elsewhere(const manifest::Manifest& m, const BuildRequest& req, const BuildSteps& steps,
                   const std::vector<std::pair<std::string, manifest::PluginUse>>& targets, const StageCache& cache,
                   const fs::path& cache_root, const std::string& source_key, const nlohmann::json& stamps,
                   const std::vector<std::unique_ptr<TempDir>>& stagings, const BuildNeeds& need) {
  if (!cache.enabled())
    throw std::runtime_error("the " + req.executor.kind + " executor runs stages in other processes, which hand their "
                             "results on through the stage cache: it cannot build without it (--no-cache, or a "
                             "cache that does not fit on its disk)");
  TempDir work(cache_root / "builds", "build-");
  BuildPlan plan;
  plan.manifest = m.path;
  plan.manifest_hash = hash_file(m.path);
  plan.target = req.target;
  plan.out_dir = req.out_dir;
  plan.cache_root = cache_root;
  plan.work_dir = work.path();
  plan.source_key = source_key;
  plan.source_files = stamps;
  const ExecutorOptions& options = req.executor;
  auto executor = make_executor(options);
  // A quant stage whose plugin splits its work runs as parts side by side (one job array),
  // each part after the stage before, the stage after every part.
  const size_t wanted = options.shards ? options.shards : executor->width();
  // Plans stage `s`'s parts (none when `parts` is 1) before it, which then waits on them.
  auto add_parts = [&](PlannedStage& s, size_t parts) {
    if (parts < 2) return;
    spdlog::info("{}: in {} parts side by side", s.label, parts);
    std::vector<size_t> part_indices;
    for (size_t k = 0; k < parts; ++k) {
      PlannedStage part = s;
      part.id = s.id + "-part-" + std::to_string(k);
      part.label = s.label + " (part " + std::to_string(k + 1) + " of " + std::to_string(parts) + ")";
      part.shard = k;
      part.shards = parts;
      part_indices.push_back(plan.stages.size());
      plan.stages.push_back(std::move(part));
    }
    s.deps = part_indices;
  };
  const auto& chain = steps.chain();
  std::vector<size_t> planned(chain.size());  // chain stage -> its index in plan.stages
  for (size_t i = 0, quant = 0; i < chain.size(); ++i) {
    PlannedStage s{chain[i].id, chain[i].label, false, i, "", chain[i].key, {}, need.transform_memory};
    if (chain[i].kind == NF_KIND_QUANT && quant < need.quant_memory.size()) s.memory = need.quant_memory[quant++];
    if (i) s.deps.push_back(planned[i - 1]);
    add_parts(s, cache.contains(chain[i].key) ? 1 : steps.shard_count(i, wanted));
    planned[i] = plan.stages.size();
    plan.stages.push_back(std::move(s));
  }
  // So is a compile whose backend splits its work (its parts, then the compile); the targets
  // compile side by side already, so they share the parts wanted.
  const size_t compile_wanted = std::max<size_t>(1, wanted / targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    PlannedStage s{"compile-" + targets[t].first, "compile " + targets[t].first, true, t, targets[t].first, "", {},
                   need.transform_memory};
    if (!chain.empty()) s.deps.push_back(planned.back());
    add_parts(s, cache.contains_compile(steps.compile_key(targets[t].second))
                     ? 1
                     : steps.compile_part_count(targets[t].second, compile_wanted));
    plan.stages.push_back(std::move(s));
    plan.staging[targets[t].first] = stagings[t]->path();
  }
  plan.write();
  work.release();  // a failed build leaves its plan, results and logs for the user
  // The latest stage the cache holds, and every one before it, is done (its entry is
  // verified when the next stage loads it, and made again there if it is damaged).
  for (size_t c = chain.size(); c > 0; --c)
    if (cache.contains(chain[c - 1].key)) {
      for (const auto& s : plan.stages)
        if (!s.compile && s.index < c)
          write_stage_result(plan, s.id, s.is_shard() ? nlohmann::json{{"kind", "part"}, {"cached", true}} : steps.cached_record(s.index));
      spdlog::info("{} of {} stage(s) in the stage cache already", c, chain.size());
      break;
    }

  spdlog::info("running {} stage(s) on the {} executor; plan, logs and results in {}", plan.stages.size(),
               executor->name(), plan.work_dir.string());
  Progress bar("build (" + executor->name() + ")");
  run_stage_graph(plan, *executor, options.retries, [&](size_t done, size_t total, const std::string& what) {
    if (req.on_stage) req.on_stage(what);
    return bar.report(done, total, what) || cancel_flag();
  });
  std::error_code ec;
  fs::remove_all(plan.work_dir, ec);
}

}  // namespace

BuildResult build(const manifest::Manifest& m, Registry& registry, const BuildRequest& req) {
  auto stage_hook = [&](const std::string& s) {
    if (req.on_stage) req.on_stage(s);
    if (cancel_flag()) throw Cancelled();
  };
  const auto targets = selected_targets(m, req.target);
  // Refuse now, not after the work, to replace anything but our own packages.
  for (const auto& t : targets)
    if (std::string why = why_not_replaceable(req.out_dir / t.first); !why.empty())
      throw std::runtime_error((req.out_dir / t.first).string() + " " + why +
                               "; not replacing it (move it away or choose another --out)");
  const bool in_process = req.executor.kind == "local" && req.executor.jobs <= 1;
  if (in_process && req.executor.shards > 1)
    spdlog::warn("{} parts asked for, but the build runs in this process (--jobs 1): its stages run whole",
                 req.executor.shards);
  if (!in_process && req.executor.kind != "local" && req.executor.kind != "slurm")
    throw std::runtime_error("unknown executor '" + req.executor.kind + "' (executors: local, slurm)");
  auto assets = decoder_assets(m, registry);  // a missing draft fails now, not after the compile
  auto t_load = std::chrono::steady_clock::now();
  stage_hook("load");
  auto source = load_source_model(m.model_onnx, m.model_config);
  const std::string source_key = nlohmann::json::parse(source->metadata["source_key"]).get<std::string>();
  spdlog::info("loaded {} in {:.2f}s", m.model_onnx, seconds_since(t_load));
  // Absolute: stage processes and jobs run elsewhere (Slurm's from the plan's folder).
  const fs::path cache_root = fs::absolute(req.cache_root.empty() ? StageCache::default_root() : req.cache_root);
  std::vector<manifest::PluginUse> backends;
  for (const auto& t : targets) backends.push_back(t.second);
  const PluginInfo* decoder = m.speculative ? registry.find(NF_KIND_SPECULATIVE, m.speculative->name) : nullptr;
  const BuildNeeds need = estimate_build(m, backends, *source, req.use_cache, decoder && decoder->speculative()->build);
  const bool cache_fits = fits_before_start(need, req, cache_root);
  StageCache cache(cache_root, req.use_cache && cache_fits);
  BuildSteps steps(m, registry, cache, cache_root, req.out_dir, assets, req.on_checkpoint, need.package_bytes);
  steps.set_keys(source_key);
  const nlohmann::json stamps = in_process ? nlohmann::json() : source_stamps(m.model_onnx, *source->graphs[0]);
  auto prepared = steps.prepare(std::move(source));
  // What a stage would refuse on this model is refused now, not after the stages before it.
  if (auto errors = validate_stages(m, registry, *prepared); !errors.empty()) {
    for (size_t i = 0; i < errors.size() - 1; ++i) spdlog::error("{}", errors[i].what());
    throw errors.back();
  }

  fs::create_directories(req.out_dir);
  remove_stale_build_dirs(req.out_dir);
  // Every target is compiled and sealed aside first, then all are committed together: a
  // failure at any target leaves every earlier package as it was.
  std::vector<std::unique_ptr<TempDir>> stagings;
  std::vector<StagedPackage> staged;
  for (const auto& t : targets) {
    stagings.push_back(std::make_unique<TempDir>(req.out_dir, "." + t.first + ".partial-"));
    staged.push_back({stagings.back()->path(), req.out_dir / t.first});
  }
  BuildResult result;
  if (in_process) {
    // The chain's output is loaded for the first compile the cache does not hold; while every
    // compile is a cache hit the stages count as cached.
    nlohmann::json records = nlohmann::json::array();
    for (size_t i = 0; i < steps.chain().size(); ++i) records.push_back(steps.cached_record(i));
    std::unique_ptr<ir::ModelSet> ms;
    auto built = [&]() -> const ir::ModelSet& {
      if (!ms) {
        records = nlohmann::json::array();
        ms = steps.model_after(steps.chain().size(), [&] { return std::move(prepared); }, records, stage_hook);
      }
      return *ms;
    };
    for (size_t t = 0; t < targets.size(); ++t) {
      stage_hook("compile " + targets[t].first);
      steps.compile(targets[t].first, targets[t].second, built, stagings[t]->path(), records);
      stage_hook("seal " + targets[t].first);
    }
    result.checkpoints_loaded = steps.checkpoints_loaded();
  } else {
    prepared.reset();  // the stage processes load what they need
    run_elsewhere(m, req, steps, targets, cache, cache_root, source_key, stamps, stagings, need);
  }
  stage_hook("commit");
  ir::check_mapped_files();
  commit_packages(staged);
  for (auto& s : stagings) s->release();  // moved into place, or holding a replaced package commit_packages handled
  for (const auto& s : staged) {
    spdlog::info("package {}", s.final_dir.string());
    result.packages.push_back(s.final_dir);
  }
  return result;
}

void run_planned_stage(const fs::path& plan_path, const std::string& stage_id) {
  const BuildPlan plan = BuildPlan::read(plan_path);
  const PlannedStage& stage = plan.stage(stage_id);
  if (hash_file(plan.manifest) != plan.manifest_hash)
    throw std::runtime_error(plan.manifest.string() + " changed since the build was planned; start the build again");
  for (const auto& f : plan.source_files)
    if (file_stamp(f.at("path").get<std::string>()) != f)
      throw std::runtime_error(f.at("path").get<std::string>() + " changed since the build was planned; start the build again");
  manifest::Manifest m = manifest::parse_manifest(plan.manifest.string());
  Registry registry;
  if (auto errors = load_and_validate(m, registry); !errors.empty()) throw std::runtime_error(errors.front());
  const auto targets = selected_targets(m, plan.target);
  StageCache cache(plan.cache_root);
  // A stage process keeps no disk back for the packages: it has no estimate at hand.
  BuildSteps steps(m, registry, cache, plan.cache_root, plan.out_dir, decoder_assets(m, registry), {}, 0);
  steps.set_keys(plan.source_key);
  // The keys from this process's plugins, files and options must be the plan's: a plugin
  // library or an asset replaced since then would make another build than the one planned.
  const auto& chain = steps.chain();
  for (const auto& s : plan.stages)
    if (!s.compile && (s.index >= chain.size() || !s.id.starts_with(chain[s.index].id) || s.key != chain[s.index].key))
      throw std::runtime_error("the inputs of stage '" + s.label +
                               "' (its plugin library, options or files) changed since the build was planned; start "
                               "the build again");
  auto source = [&] {
    return steps.prepare(load_source_model(m.model_onnx, m.model_config, plan.source_key));
  };
  auto no_hook = [](const std::string&) {
    if (cancel_flag()) throw Cancelled();
  };
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json result;
  if (!stage.compile && cache.contains(stage.key)) {
    result = steps.cached_record(stage.index);  // run again after it finished: a cache hit
  } else if (stage.is_shard() && stage.compile) {
    nlohmann::json records = nlohmann::json::array();
    auto ms = steps.model_after(chain.size(), source, records, no_hook);
    result = steps.run_compile_part(stage.target, targets.at(stage.index).second, *ms, stage.shard, stage.shards);
  } else if (stage.is_shard()) {
    nlohmann::json records = nlohmann::json::array();
    auto ms = steps.model_after(stage.index, source, records, no_hook);
    result = steps.run_shard(stage.index, *ms, stage.shard, stage.shards);
  } else if (!stage.compile) {
    nlohmann::json records = nlohmann::json::array();
    auto ms = steps.model_after(stage.index, source, records, no_hook);
    result = steps.run(stage.index, ms, no_hook);
    if (steps.checkpoints_loaded()) result["checkpoints_loaded"] = steps.checkpoints_loaded();
  } else {
    // The chain's records as the stages that ran them left them.
    nlohmann::json records = nlohmann::json::array();
    for (const auto& s : chain) {
      nlohmann::json r = read_stage_result(plan, s.id);
      if (r.is_null()) throw std::runtime_error("stage '" + s.label + "' has no result: it has not finished");
      for (const char* where : {"host", "peak_rss_bytes", "checkpoints_loaded"}) r.erase(where);
      records.push_back(std::move(r));
    }
    nlohmann::json ignored = nlohmann::json::array();
    std::unique_ptr<ir::ModelSet> ms;  // loaded when the compile is not in the cache
    auto built = [&]() -> const ir::ModelSet& {
      if (!ms) ms = steps.model_after(chain.size(), source, ignored, no_hook);
      return *ms;
    };
    const fs::path staging = plan.staging.at(stage.target);
    // A retried stage starts from an empty folder.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(staging, ec)) fs::remove_all(e.path());
    steps.compile(stage.target, targets.at(stage.index).second, built, staging, records);
    result = {{"kind", "compile"}, {"target", stage.target}, {"seconds", seconds_since(t0)}};
    if (steps.checkpoints_loaded()) result["checkpoints_loaded"] = steps.checkpoints_loaded();
  }
  ir::check_mapped_files();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  result["host"] = host;
  result["peak_rss_bytes"] = peak_rss_bytes();
  write_stage_result(plan, stage.id, result);
}

}  // namespace nf::host
