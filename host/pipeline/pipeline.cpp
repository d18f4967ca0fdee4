#include "pipeline/pipeline.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>

#include "api/host_api.h"
#include "calibration/calibration.h"
#include "manifest/schema.h"
#include "onnx/onnx_io.h"
#include "pipeline/checkpoints.h"
#include "pipeline/package.h"
#include "pipeline/resources.h"
#include "pipeline/speculative_assets.h"
#include "pipeline/stage_cache.h"
#include "pipeline/tied_head.h"
#include "pipeline/util.h"
#include "pipeline/weight_spill.h"
#include "pipeline/widen_floats.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json value_spec(const ir::Graph& g, const std::string& name) {
  nlohmann::json spec{{"name", name}};
  auto it = g.types.find(name);
  if (it == g.types.end()) return spec;
  spec["dtype"] = ir::dtype_name(it->second.dtype);
  if (it->second.shape) {
    nlohmann::json shape = nlohmann::json::array();
    for (const auto& d : *it->second.shape) shape.push_back(d.value >= 0 ? nlohmann::json(d.value) : nlohmann::json(d.param));
    spec["shape"] = shape;
  }
  return spec;
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
// package-relative paths.
nlohmann::json package_decoder_assets(const manifest::Manifest& m, const std::vector<manifest::AssetPath>& assets,
                                      const fs::path& package) {
  nlohmann::json options = m.speculative->options;
  for (const auto& a : assets) {
    fs::path rel = fs::path("assets") / m.speculative->name / fs::path(a.path).filename();
    fs::create_directories(package / rel.parent_path());
    fs::copy(a.path, package / rel, fs::copy_options::recursive);
    options[a.key] = rel.string();
  }
  return options;
}

// Estimates the build's peak memory and disk from the source's shapes (resources.h) and
// refuses what cannot fit, before any stage runs. Returns whether the stage cache fits too:
// a build whose cache entries would fill the disk runs without them.
bool fits_before_start(const manifest::Manifest& m, const std::vector<std::pair<std::string, manifest::PluginUse>>& targets,
                       const ir::ModelSet& source, const BuildRequest& req, const fs::path& cache_root) {
  std::vector<std::string> backends;
  for (const auto& t : targets) backends.push_back(t.second.name);
  const BuildNeeds need = estimate_build(m, backends, source, req.use_cache);
  const uint64_t memory = memory_available(), out_free = disk_free(req.out_dir);
  spdlog::info("estimated from the model's {} of fp32 weights: peak memory ~{} ({}), packages ~{}{}{}; available: {} "
               "of memory, {} of disk for the packages",
               human_bytes(need.weight_bytes), human_bytes(need.peak_memory), need.peak_stage, human_bytes(need.package_bytes),
               need.scratch_bytes ? ", scratch ~" + human_bytes(need.scratch_bytes) : std::string(),
               need.cache_bytes ? ", stage cache ~" + human_bytes(need.cache_bytes) : std::string(), human_bytes(memory),
               human_bytes(out_free));
  const std::string override_hint = "; pass --skip-resource-check to try anyway";
  if (need.peak_memory > memory && !req.skip_resource_check)
    throw std::runtime_error("this build needs ~" + human_bytes(need.peak_memory) + " of memory at its peak (" +
                             need.peak_stage + " on " + human_bytes(need.weight_bytes) +
                             " of fp32 weights) and this machine has " + human_bytes(memory) +
                             " available (MemAvailable + swap, within the cgroup's limit)" + override_hint);
  if (need.package_bytes > out_free && !req.skip_resource_check)
    throw std::runtime_error("the packages need ~" + human_bytes(need.package_bytes) + " of disk and " +
                             req.out_dir.string() + " has " + human_bytes(out_free) + " free" + override_hint);
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
// absolute against the manifest's folder, so a build means the same files from whatever
// folder it runs in; and {option: content hash} of those files for the stage's cache key.
std::pair<nlohmann::json, nlohmann::json> resolve_asset_options(const manifest::PluginUse& use, const PluginInfo& p,
                                                                const std::string& manifest_dir) {
  nlohmann::json options = use.options, files = nlohmann::json::object();
  for (const auto& a : manifest::asset_paths(use, p.schema, manifest_dir, manifest_dir)) {
    if (use.options.value(a.key, std::string()).empty()) continue;  // "" is "no file"
    options[a.key] = a.path;
    files[a.key] = content_hash(a.path);
  }
  return {options, files};
}

}  // namespace

void check_graphs(const ir::ModelSet& ms, const std::string& context) {
  for (const auto& g : ms.graphs)
    if (std::string why = ir::graph_problem(*g); !why.empty())
      throw std::runtime_error(context + ": graph '" + g->name + "': " + why);
}

nlohmann::json graph_specs(const ir::ModelSet& ms) {
  nlohmann::json graphs = nlohmann::json::array();
  for (const auto& g : ms.graphs) {
    nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
    for (const auto& n : g->inputs) in.push_back(value_spec(*g, n));
    for (const auto& n : g->outputs) out.push_back(value_spec(*g, n));
    graphs.push_back({{"name", g->name}, {"inputs", in}, {"outputs", out}});
  }
  return graphs;
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

std::unique_ptr<ir::ModelSet> load_source_model(const std::string& onnx_path, const std::string& config_path) {
  std::string config_text;
  auto ms = map_source_model(onnx_path, config_path, &config_text);
  ir::Graph& g = *ms->graphs[0];

  // The cache key of the source: the .onnx bytes and every external-data file it maps.
  std::string key = hash_file(onnx_path);
  std::vector<const ir::Buffer*> seen;
  for (const auto& [name, ref] : g.initializers) {
    auto* mf = dynamic_cast<const ir::MappedFile*>(ref->tensor.buffer.get());
    if (!mf || std::find(seen.begin(), seen.end(), mf) != seen.end()) continue;
    seen.push_back(mf);
    key += hash_buffer(*mf);  // drops the pages it hashed: loading maps, it does not read
  }
  // Cached stages of a build from before this step must not be replayed: the key says so.
  if (std::string copy = tie_lm_head(g); !copy.empty()) {
    spdlog::info("tied LM head: '{}' is the transpose of the embedding table; the head reads the table instead", copy);
    key += hash_string("tie_lm_head " + copy);
  }
  if (ms->metadata.count("config")) key += hash_string(config_text);
  ms->metadata["source_key"] = nlohmann::json(hash_string(key)).dump();
  return ms;
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
    const std::string options = resolve_asset_options(use, *p, m.dir).first.dump();
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

BuildResult build(const manifest::Manifest& m, Registry& registry, const BuildRequest& req) {
  auto stage_hook = [&](const std::string& s) {
    if (req.on_stage) req.on_stage(s);
    if (cancel_flag()) throw Cancelled();
  };
  std::vector<std::pair<std::string, manifest::PluginUse>> targets;
  for (const auto& t : m.targets)
    if (req.target == "all" || req.target == t.first) targets.push_back(t);
  if (targets.empty()) {
    std::string names;
    for (const auto& t : m.targets) names += (names.empty() ? "" : ", ") + t.first;
    throw std::runtime_error(m.path + ": no target named '" + req.target + "' (targets: " + names + ")");
  }

  // Refuse now, not after the work, to replace anything but our own packages.
  for (const auto& t : targets)
    if (std::string why = why_not_replaceable(req.out_dir / t.first); !why.empty())
      throw std::runtime_error((req.out_dir / t.first).string() + " " + why +
                               "; not replacing it (move it away or choose another --out)");
  const auto assets = decoder_assets(m, registry);  // a missing draft fails now, not after the compile
  auto t_load = std::chrono::steady_clock::now();
  stage_hook("load");
  auto ms = load_source_model(m.model_onnx, m.model_config);
  std::string key = nlohmann::json::parse(ms->metadata["source_key"]).get<std::string>();
  spdlog::info("loaded {} in {:.2f}s", m.model_onnx, seconds_since(t_load));
  const fs::path cache_root = req.cache_root.empty() ? StageCache::default_root() : req.cache_root;
  const bool cache_fits = fits_before_start(m, targets, *ms, req, cache_root);
  StageCache cache(cache_root, req.use_cache && cache_fits);
  // New weights (widened, grown or made by stages) go to a scratch file beside the output,
  // so they leave memory like the model's own mapped weights.
  WeightSpill spill(req.out_dir);
  if (Widened w = widen_16bit_floats(*ms->graphs[0], [&](ir::TensorRef& t) { spill.spill(t); }); w.any()) {
    spdlog::info("the model is {}: computing in float32 ({} weights widened, {})", ir::dtype_name(w.from), w.weights,
                 human_bytes(w.bytes));
    key = hash_string(key + "widen_16bit_floats");
  }
  // What a stage would refuse on this model is refused now, not after the stages before it.
  if (auto errors = validate_stages(m, registry, *ms); !errors.empty()) {
    for (size_t i = 0; i + 1 < errors.size(); ++i) spdlog::error("{}", errors[i].what());
    throw errors.back();
  }
  // A speculative decoder's extra embedding rows (ssd's forecast tokens) join the token
  // embedding table before any stage, so quant recipes and transforms see the final table.
  if (auto a = find_speculative_assets(assets)) {
    std::string rows = add_extra_embeddings(*ms, *a);
    if (!rows.empty()) key = hash_string(key + "extra_embeddings" + rows);
  }
  SpillReleasedWeights spill_as_released(spill);
  auto spill_new_weights = [&] {
    if (uint64_t moved = spill.spill(*ms)) {
      ::malloc_trim(0);
      spdlog::debug("moved {} of new weights to the scratch file", human_bytes(moved));
    }
  };
  spill_new_weights();

  nlohmann::json stages = nlohmann::json::array();
  size_t checkpoints_loaded = 0;
  std::map<std::string, std::string> library_hashes;  // plugin library path -> hash of its bytes
  auto run_stage = [&](nf_plugin_kind kind, const manifest::PluginUse& use) {
    const PluginInfo* p = registry.find(kind, use.name);
    if (!p) throw std::runtime_error(std::string("no ") + kind_name(kind) + " plugin named '" + use.name + "'");
    std::string label = std::string(kind_name(kind)) + " " + use.name;
    stage_hook(label);
    // The output depends on the options, the bytes of the files they name, the plugin's
    // library and (quant) the calibration data: all of it goes into the key.
    auto [options_json, files] = resolve_asset_options(use, *p, m.dir);
    nlohmann::json inputs{{"options", use.options}, {"files", files}};
    if (kind == NF_KIND_QUANT) inputs["calibration"] = calibration_cache_key(m);
    auto lib = library_hashes.find(p->library);
    if (lib == library_hashes.end()) lib = library_hashes.emplace(p->library, hash_file(p->library)).first;
    key = StageCache::key(key, kind_name(kind), p->name, p->version, lib->second, inputs);
    auto t0 = std::chrono::steady_clock::now();
    bool cached = false;
    if (auto hit = cache.load(key)) {
      ms = std::move(hit);
      cached = true;
    } else {
      std::string options = options_json.dump();
      // Quant recipes calibrate on the manifest's [calibration] text (null without one).
      std::unique_ptr<TextCalibration> calibration;
      if (kind == NF_KIND_QUANT) calibration = make_calibration(m, registry);
      // A stage interrupted earlier resumes from the steps it saved (with the stage cache).
      std::unique_ptr<StageCheckpoints> checkpoints;
      if (cache.enabled())
        checkpoints = std::make_unique<StageCheckpoints>(cache_root, key, [&](const std::string& name) {
          if (req.on_checkpoint) req.on_checkpoint(label, name);
        });
      call_plugin(
          label,
          [&](nf_context* ctx) {
            if (kind == NF_KIND_QUANT) return p->quant()->apply(options.c_str(), handle(ms.get()), calibration.get(), ctx);
            return p->transform()->apply(options.c_str(), handle(ms.get()), ctx);
          },
          checkpoints.get());
      const bool stored = cache.store(key, *ms);
      if (checkpoints) {
        if (checkpoints->loaded())
          spdlog::info("{}: resumed an interrupted run ({} step(s) from its checkpoints)", label, checkpoints->loaded());
        checkpoints_loaded += checkpoints->loaded();
        if (stored) checkpoints->remove_all();
      }
    }
    spill_new_weights();
    double secs = seconds_since(t0);
    spdlog::info("{}: {} graph(s) in {:.2f}s{}", label, ms->graphs.size(), secs, cached ? " (cached)" : "");
    stages.push_back({{"kind", kind_name(kind)}, {"name", p->name}, {"version", p->version}, {"options", use.options},
                      {"seconds", secs}, {"cached", cached}, {"key", key}});
  };
  for (const auto& q : m.quant) run_stage(NF_KIND_QUANT, q);
  for (const auto& t : m.transforms) run_stage(NF_KIND_TRANSFORM, t);

  BuildResult result;
  result.checkpoints_loaded = checkpoints_loaded;
  fs::create_directories(req.out_dir);
  remove_stale_build_dirs(req.out_dir);
  // Every target is compiled and sealed aside first, then all are committed together: a
  // failure at any target leaves every earlier package as it was.
  std::vector<std::unique_ptr<TempDir>> stagings;
  std::vector<StagedPackage> staged;
  for (const auto& [target, use] : targets) {
    const PluginInfo* backend = registry.find(NF_KIND_BACKEND, use.name);
    if (!backend) throw std::runtime_error("no backend plugin named '" + use.name + "'");
    std::string label = "compile " + target;
    stage_hook(label);
    stagings.push_back(std::make_unique<TempDir>(req.out_dir, "." + target + ".partial-"));
    const TempDir& staging = *stagings.back();
    fs::create_directories(staging.path() / "artifacts");
    auto t0 = std::chrono::steady_clock::now();
    std::string options = use.options.dump();
    std::string artifacts = (staging.path() / "artifacts").string();
    check_graphs(*ms, "before " + label);
    call_plugin(label, [&](nf_context* ctx) {
      return backend->backend()->compile(options.c_str(), handle(ms.get()), artifacts.c_str(), ctx);
    });
    double compile_secs = seconds_since(t0);

    nlohmann::json meta{{"format", kPackageFormat},
                        {"version", kPackageVersion},
                        {"created_by", "npuforge 0.1.0"},
                        {"target", target},
                        {"backend", {{"name", backend->name}, {"version", backend->version}, {"options", use.options}}},
                        {"graphs", graph_specs(*ms)},
                        {"stages", stages},
                        {"source", {{"onnx", m.model_onnx}, {"key", nlohmann::json::parse(ms->metadata["source_key"])}}},
                        {"tokenizer", nullptr},
                        {"speculative", nullptr}};
    if (ms->metadata.count("config")) {
      write_text_file_atomic(staging.path() / "config.json", nlohmann::json::parse(ms->metadata["config"]).dump(2));
      meta["config"] = "config.json";
    }
    if (!m.model_tokenizer.empty()) {
      // Read with the bounds of any input (a FIFO or a device in its place is refused).
      write_text_file_atomic(staging.path() / "tokenizer.json",
                             read_regular_file(m.model_tokenizer, kTokenizerMax, "tokenizer"));
      fs::path tcfg = fs::path(m.model_tokenizer).parent_path() / "tokenizer_config.json";
      if (fs::is_regular_file(tcfg))
        write_text_file_atomic(staging.path() / "tokenizer_config.json",
                               read_regular_file(tcfg, kTokenizerMax, "tokenizer config"));
      meta["tokenizer"] = "tokenizer.json";
    }
    // Model-set metadata the transforms left for the runner ("io": static layout, variants).
    nlohmann::json extra = nlohmann::json::object();
    for (const auto& [k, v] : ms->metadata)
      if (k != "config" && k != "source_key") extra[k] = nlohmann::json::parse(v);
    meta["metadata"] = extra;
    if (m.speculative)
      meta["speculative"] = {{"decoder", m.speculative->name},
                             {"options", package_decoder_assets(m, assets, staging.path())}};

    nlohmann::json report{{"target", target},
                          {"backend", backend->name},
                          {"stages", stages},
                          {"compile_seconds", compile_secs},
                          {"graphs", ms->graphs.size()},
                          {"peak_rss_bytes", peak_rss_bytes()}};
    write_text_file_atomic(staging.path() / "build_report.json", report.dump(2) + "\n");
    stage_hook("seal " + target);
    seal_package(staging.path(), meta);
    staged.push_back({staging.path(), req.out_dir / target});
    spdlog::info("{}: {} compiled in {:.2f}s", target, backend->name, compile_secs);
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

}  // namespace nf::host
