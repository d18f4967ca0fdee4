// A build as a graph of stages. Each quant/transform stage is a pure function of content-hashed
// inputs (its stage-cache key: the input's key, the plugin library's hash, options, files) and
// its output lands atomically in the stage cache; each compile stage turns the last of them into
// one target's package, written aside in the output folder. Any process that shares the cache
// and the output folder (this one, a worker process, a Slurm job on another node) can run any
// stage whose inputs are ready: `npuforge build-stage PLAN STAGE` runs one. Executors decide
// where stages run; the stages and so the packages are the same under every executor.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nf::host {

struct PlannedStage {
  std::string id;             // "quant-0-lpbq", "transform-1-arcl", "compile-htp"
  std::string label;          // "quant lpbq", "compile htp"
  bool compile = false;
  size_t index = 0;           // quant/transform: position in the chain; compile: position among targets
  std::string target;         // compile: the target's name
  std::string key;            // quant/transform: the stage-cache key of its output
  std::vector<size_t> deps;   // stages (indices into BuildPlan::stages) that must finish first
  uint64_t memory = 0;        // its estimated peak (resources.h): what a node must have free, 0: unknown
  // A part of quant stage `index` (nf_quant_api apply_shard) or of compile `index`
  // (nf_backend_api compile_part): part `shard` of `shards`. The parts run side by side
  // before the stage, which then takes their checkpoints.
  size_t shard = 0, shards = 0;
  bool is_shard() const { return shards > 0; }
};

struct BuildPlan {
  std::filesystem::path manifest;       // absolute
  std::string manifest_hash;            // a stage refuses a manifest edited since the plan
  std::string target;                   // --target
  std::filesystem::path out_dir, cache_root;
  std::filesystem::path work_dir;       // plan.json, results/, logs/ (in <cache>/builds/)
  std::string source_key;               // the source model's key (its hash is not taken again)
  nlohmann::json source_files;          // [{path, size, mtime_ns}] of the .onnx and its data files
  std::vector<PlannedStage> stages;     // the chain in order, then one compile per target (a split stage after its parts)
  std::map<std::string, std::filesystem::path> staging;  // target -> the folder its package is written in

  nlohmann::json to_json() const;
  static BuildPlan from_json(const nlohmann::json& j);
  static BuildPlan read(const std::filesystem::path& plan_json);
  void write() const;  // work_dir/plan.json
  const PlannedStage& stage(const std::string& id) const;  // throws naming the ids there are
  std::filesystem::path result_path(const std::string& id) const { return work_dir / "results" / (id + ".json"); }
  std::filesystem::path log_dir() const { return work_dir / "logs"; }
};

// What a finished stage leaves in work_dir/results/<id>.json (written last, atomically): the
// record package.json keeps for it ({kind, name, version, options, seconds, cached, key}) plus
// "host", "peak_rss_bytes" and "checkpoints_loaded" (steps it took from checkpoints, when any).
void write_stage_result(const BuildPlan& plan, const std::string& id, const nlohmann::json& record);
// The result of a stage, or null when it has none (not run, or failed).
nlohmann::json read_stage_result(const BuildPlan& plan, const std::string& id);

// Runs stages where it chooses. submit() starts a stage once the stages it depends on have
// started (an executor that cannot wait on them itself is given a stage only when its
// dependencies finished: see waits_for_dependencies); poll() says how each started stage is.
class Executor {
 public:
  enum class State { running, succeeded, failed };
  struct Status {
    State state = State::running;
    std::string detail;  // why it failed ("exit code 1", "NODE_FAIL", ...) or where it runs
  };
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Whether submit() may be called before the dependencies finished (Slurm's afterok).
  virtual bool waits_for_dependencies() const = 0;
  // How many stages may run at once (submit() is not called with more outstanding).
  virtual size_t capacity() const = 0;
  // How many parts a stage that splits is split into by default: the machines it spreads
  // stages over (local: 1, one machine's cores serve one stage already; slurm: its nodes).
  virtual size_t width() const = 0;
  // Starts stage `s` (with `after`: the handles of the stages it must wait for, when
  // waits_for_dependencies). Returns a handle; throws when the stage cannot be started.
  virtual std::string submit(const BuildPlan& plan, const PlannedStage& s, const std::vector<std::string>& after) = 0;
  // Several stages at once (Slurm: one job array); by default one submit() each.
  virtual std::vector<std::string> submit_all(const BuildPlan& plan, const std::vector<const PlannedStage*>& stages,
                                              const std::vector<std::string>& after);
  virtual Status poll(const std::string& handle) = 0;
  // Stops a started stage (a failed dependency, Ctrl-C).
  virtual void cancel(const std::string& handle) = 0;
  // The log file of a started stage.
  virtual std::filesystem::path log_path(const BuildPlan& plan, const PlannedStage& s, const std::string& handle) const = 0;
};

struct ExecutorOptions {
  std::string kind = "local";  // "local" or "slurm"
  size_t jobs = 1;             // local: worker processes at once
  int retries = 2;             // attempts of a failed stage after the first
  std::vector<std::string> sbatch_args;  // slurm: given to every sbatch (--partition=..., --account=...)
  int stage_cpus = 1;          // slurm: --cpus-per-task
  size_t shards = 0;           // parts a stage that splits runs in (0: the executor's width())
  std::filesystem::path program;  // the npuforge executable the stages run (default: this one)
};

std::unique_ptr<Executor> make_executor(const ExecutorOptions& options);

// Runs every stage of `plan` whose result is not there yet, each after its dependencies, on
// `executor`; a failed stage is started again up to `retries` times, then the build fails
// naming the stage and its log. `on_progress(done, total, what)` after each change; true
// from it (the user cancels) stops every started stage and throws Cancelled.
void run_stage_graph(const BuildPlan& plan, Executor& executor, int retries,
                     const std::function<bool(size_t done, size_t total, const std::string& what)>& on_progress);

}  // namespace nf::host
