#include "pipeline/stage_graph.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/util.h"
#include "pipeline/executors.h"

namespace fs = std::filesystem;

namespace nf::host {

nlohmann::json BuildPlan::to_json() const {
  nlohmann::json stages_json = nlohmann::json::array();
  for (const auto& s : stages)
    stages_json.push_back({{"id", s.id}, {"label", s.label}, {"compile", s.compile}, {"index", s.index},
                           {"target", s.target}, {"key", s.key}, {"deps", s.deps}, {"memory", s.memory},
                           {"shard", s.shard}, {"shards", s.shards}});
  nlohmann::json staging_json = nlohmann::json::object();
  for (const auto& [t, dir] : staging) staging_json[t] = dir.string();
  return {{"manifest", manifest.string()}, {"manifest_hash", manifest_hash}, {"target", target},
          {"out_dir", out_dir.string()},   {"cache_root", cache_root.string()}, {"work_dir", work_dir.string()},
          {"source_key", source_key},      {"source_files", source_files},     {"stages", stages_json},
          {"staging", staging_json}};
}

BuildPlan BuildPlan::from_json(const nlohmann::json& j) {
  auto str = [](const nlohmann::json& o, const char* key) { return o.at(key).get<std::string>(); };
  BuildPlan p;
  p.manifest = str(j, "manifest");
  p.manifest_hash = str(j, "manifest_hash");
  p.target = str(j, "target");
  p.out_dir = str(j, "out_dir");
  p.cache_root = str(j, "cache_root");
  p.work_dir = str(j, "work_dir");
  p.source_key = str(j, "source_key");
  p.source_files = j.at("source_files");
  for (const auto& s : j.at("stages"))
    p.stages.push_back({str(s, "id"), str(s, "label"), s.at("compile").get<bool>(), s.at("index").get<size_t>(),
                        str(s, "target"), str(s, "key"), s.at("deps").get<std::vector<size_t>>(),
                        s.at("memory").get<uint64_t>(), s.at("shard").get<size_t>(), s.at("shards").get<size_t>()});
  for (const auto& [t, dir] : j.at("staging").items()) p.staging[t] = dir.get<std::string>();
  for (size_t i = 0; i < p.stages.size(); ++i)
    for (size_t d : p.stages[i].deps)
      if (d >= i) throw std::runtime_error("stage '" + p.stages[i].id + "' depends on a later stage");
  return p;
}

BuildPlan BuildPlan::read(const fs::path& plan_json) {
  try {
    return from_json(nlohmann::json::parse(read_regular_file(plan_json, kJsonMax, "build plan")));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(plan_json.string() + ": not a build plan (" + e.what() + ")");
  }
}

void BuildPlan::write() const {
  fs::create_directories(work_dir / "results");
  fs::create_directories(log_dir());
  write_text_file_atomic(work_dir / "plan.json", to_json().dump(1) + "\n");
}

const PlannedStage& BuildPlan::stage(const std::string& id) const {
  std::string ids;
  for (const auto& s : stages) {
    if (s.id == id) return s;
    ids += (ids.empty() ? "" : ", ") + s.id;
  }
  throw std::runtime_error("the build plan has no stage '" + id + "' (stages: " + ids + ")");
}

void write_stage_result(const BuildPlan& plan, const std::string& id, const nlohmann::json& record) {
  write_text_file_atomic(plan.result_path(id), record.dump(1) + "\n");
}

nlohmann::json read_stage_result(const BuildPlan& plan, const std::string& id) {
  std::error_code ec;
  if (!fs::is_regular_file(plan.result_path(id), ec)) return nullptr;
  return nlohmann::json::parse(read_regular_file(plan.result_path(id), kJsonMax, "stage result"), nullptr, false);
}

std::unique_ptr<Executor> make_executor(const ExecutorOptions& options) {
  const fs::path program = options.program.empty() ? fs::read_symlink("/proc/self/exe") : options.program;
  if (options.kind == "local") return make_local_executor(options.jobs, program);
  if (options.kind == "slurm") return make_slurm_executor(options, program);
  throw std::runtime_error("unknown executor '" + options.kind + "' (executors: local, slurm)");
}

std::vector<std::string> Executor::submit_all(const BuildPlan& plan, const std::vector<const PlannedStage*>& stages,
                                              const std::vector<std::string>& after) {
  std::vector<std::string> handles;
  for (const PlannedStage* s : stages) handles.push_back(submit(plan, *s, after));
  return handles;
}

void run_stage_graph(const BuildPlan& plan, Executor& executor, int retries,
                     const std::function<bool(size_t, size_t, const std::string&)>& on_progress) {
  const size_t n = plan.stages.size();
  std::vector<bool> done(n);
  std::vector<std::string> handle(n);  // "" while not started
  std::vector<int> attempts(n);
  for (size_t i = 0; i < n; ++i) done[i] = !read_stage_result(plan, plan.stages[i].id).is_null();
  // Whether stage j waits on stage i, directly or through others (deps point backwards).
  auto depends_on = [&](size_t j, size_t i) {
    std::vector<bool> reach(n);
    reach[i] = true;
    for (size_t k = i + 1; k <= j; ++k)
      for (size_t d : plan.stages[k].deps) reach[k] = reach[k] || reach[d];
    return reach[j];
  };
  auto count_done = [&] { return size_t(std::count(done.begin(), done.end(), true)); };
  auto cancel_started = [&] {
    for (size_t i = 0; i < n; ++i)
      if (!done[i] && !handle[i].empty()) executor.cancel(handle[i]);
  };
  std::string last = "waiting";
  const auto poll_every = std::chrono::milliseconds(executor.waits_for_dependencies() ? 1000 : 100);
  while (count_done() < n) {
    // Start what may start: stages whose dependencies finished (or, with an executor that
    // waits itself, were started), as many as the executor takes.
    size_t outstanding = 0;
    for (size_t i = 0; i < n; ++i) outstanding += !done[i] && !handle[i].empty();
    std::vector<const PlannedStage*> batch;
    std::vector<size_t> batch_index;
    std::vector<std::string> batch_after;
    auto flush = [&] {
      if (batch.empty()) return;
      auto handles = executor.submit_all(plan, batch, batch_after);
      for (size_t b = 0; b < batch.size(); ++b) {
        handle[batch_index[b]] = handles[b];
        spdlog::debug("stage {} started ({})", batch[b]->id, handles[b]);
      }
      batch.clear();
      batch_index.clear();
    };
    for (size_t i = 0; i < n && outstanding < executor.capacity(); ++i) {
      if (done[i] || !handle[i].empty()) continue;
      bool ready = true;
      std::vector<std::string> after;
      for (size_t d : plan.stages[i].deps) {
        if (done[d]) continue;
        if (!executor.waits_for_dependencies() || handle[d].empty()) ready = false;
        else after.push_back(handle[d]);
      }
      if (!ready) continue;
      // Stages waiting on the same stages start together (Slurm: one job array).
      if (!batch.empty() && after != batch_after) flush();
      batch.push_back(&plan.stages[i]);
      batch_index.push_back(i);
      batch_after = after;
      ++outstanding;
      // A stage must be started before one that waits on it is submitted.
      bool next_waits = i + 1 < n && std::find(plan.stages[i + 1].deps.begin(), plan.stages[i + 1].deps.end(), i) !=
                                         plan.stages[i + 1].deps.end();
      if (next_waits) flush();
    }
    flush();

    for (size_t i = 0; i < n; ++i) {
      if (done[i] || handle[i].empty()) continue;
      Executor::Status st = executor.poll(handle[i]);
      if (st.state == Executor::State::running) continue;
      const PlannedStage& s = plan.stages[i];
      if (st.state == Executor::State::succeeded) {
        if (const nlohmann::json r = read_stage_result(plan, s.id); !r.is_null()) {
          done[i] = true;
          last = s.label + " done";
          const size_t taken = r.is_object() ? r.value("checkpoints_loaded", size_t{0}) : 0;
          const double seconds = r.is_object() && r.contains("seconds") && r["seconds"].is_number() ? r["seconds"].get<double>() : 0;
          spdlog::info("{}: finished in {:.1f}s ({} of {}){}", s.label, seconds, count_done(), n,
                       taken ? "; " + std::to_string(taken) + " step(s) from its parts or an interrupted run" : "");
          continue;
        }
        st = {Executor::State::failed, "it ended without leaving its result"};
      }
      const fs::path log = executor.log_path(plan, s, handle[i]);
      // The stages started after it that wait on it will not run on this attempt's output.
      for (size_t j = i + 1; j < n; ++j)
        if (!done[j] && !handle[j].empty() && depends_on(j, i)) {
          executor.cancel(handle[j]);
          handle[j].clear();
        }
      handle[i].clear();
      if (++attempts[i] > retries) {
        cancel_started();
        throw std::runtime_error("stage '" + s.label + "' failed " + std::to_string(attempts[i]) + " time(s), last: " +
                                 st.detail + "; its log: " + log.string());
      }
      spdlog::warn("stage '{}' failed ({}; log {}); starting it again (attempt {} of {})", s.label, st.detail,
                   log.string(), attempts[i] + 1, retries + 1);
    }
    if (on_progress(count_done(), n, last)) {
      cancel_started();
      throw Cancelled();
    }
    if (count_done() < n) std::this_thread::sleep_for(poll_every);
  }
}

}  // namespace nf::host
