// `npuforge build`: manifest -> quant recipes -> transforms -> one package per target.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "manifest/manifest.h"
#include "pipeline/stage_graph.h"
#include "registry/registry.h"

namespace nf::host {

// Loads the plugins a manifest can see and checks the manifest against their schemas.
// Returns every error (one line each); empty means the manifest is good.
std::vector<std::string> load_and_validate(manifest::Manifest& m, Registry& registry);

// The source model as a model set of one graph named "model", with metadata "config"
// (HF config.json, when given or found beside the model) and "source_key" (hash of the
// model's bytes, the root of the stage-cache keys).
// With `known_key` (a stage process of a planned build), the weights are not hashed again:
// the key is taken as given (the plan checked the files' sizes and times).
std::unique_ptr<ir::ModelSet> load_source_model(const std::string& onnx_path, const std::string& config_path,
                                               const std::string& known_key = "");

// The weight forms a loaded source is read in before any stage (or a bare-model run) sees it,
// each making new weights that `keep` receives as they are made (WeightSpill): 16-bit floats
// widened to float32, MatMulNBits weights dequantized, [out, in] weights behind a Transpose
// folded, a tied table gathered from the head's Transpose turned round. Logs each change.
void read_weight_forms(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep);
// The same graph and config, mapped and not read (no key): what `check` validates on.
// `config_text` receives the config's bytes when there is one.
std::unique_ptr<ir::ModelSet> map_source_model(const std::string& onnx_path, const std::string& config_path,
                                               std::string* config_text = nullptr);

// Every quant and transform stage's validate entry (where its plugin has one) on the source
// model: the errors apply would give for these options on this model, each located at the
// stage's name key ("manifest:line:col: <stage>: <message>"). build and check run it first.
std::vector<manifest::ManifestError> validate_stages(const manifest::Manifest& m, const Registry& registry,
                                                     const ir::ModelSet& source);

// Throws "<context>: graph '<name>': <problem>" for the first graph ir::graph_problem
// refuses: a backend never sees a graph it could crash on.
void check_graphs(const ir::ModelSet& ms, const std::string& context);

struct BuildRequest {
  std::string target = "all";        // a [targets.NAME] or "all"
  std::filesystem::path out_dir;     // packages go to out_dir/<target>
  bool use_cache = true;
  // Build even when the estimated peak memory or package size exceeds what the machine has.
  bool skip_resource_check = false;
  std::filesystem::path cache_root;  // empty: StageCache::default_root()
  // Called before each stage starts ("quant lpbq", "transform arcl", "compile htp").
  std::function<void(const std::string& stage)> on_stage;
  // Called after a stage saves a checkpoint (name), e.g. to interrupt a build there.
  std::function<void(const std::string& stage, const std::string& name)> on_checkpoint;
  // Where the stages run: "local" with one job is this process; more jobs, or "slurm", run
  // them as a graph of stage processes sharing the stage cache (stage_graph.h).
  ExecutorOptions executor;
};

struct BuildResult {
  std::vector<std::filesystem::path> packages;
  size_t checkpoints_loaded = 0;  // steps of interrupted stages taken from their checkpoints
};

// Runs the build. Throws on any error (nothing half-written stays) and Cancelled when the
// user interrupts.
BuildResult build(const manifest::Manifest& m, Registry& registry, const BuildRequest& req);

// `npuforge build-stage PLAN STAGE`: runs one stage of a planned build in this process and
// leaves its result beside the plan (stage_graph.h). Throws when the manifest, the model or
// a plugin changed since the plan was made.
void run_planned_stage(const std::filesystem::path& plan, const std::string& stage_id);

}  // namespace nf::host
