// The Slurm executor: each stage a batch job running `npuforge build-stage`, submitted with
// sbatch as soon as the jobs it waits for are (--dependency=afterok), the compiles of all
// targets as one job array. The cache, the output folder, the model, the manifest, the
// plugins and this executable must be at the same paths on every node (a shared file system).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/util.h"
#include "pipeline/executors.h"

extern char** environ;

namespace fs = std::filesystem;

namespace nf::host {

CommandOutput run_command(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  CommandOutput out;
  if (rc != 0) {
    ::close(fds[0]);
    out.output = argv[0] + ": " + std::strerror(rc);
    return out;
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;)
    if (n > 0) out.output.append(buf, size_t(n));
    else if (errno != EINTR) break;
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

namespace {

std::string quoted(const std::string& s) {  // for sh, in single quotes
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string first_output_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.empty() ? "(no output)" : line;
}

class SlurmExecutor final : public Executor {
 public:
  SlurmExecutor(ExecutorOptions options, fs::path program) : options_(std::move(options)), program_(std::move(program)) {
    CommandOutput v = run_command({"sbatch", "--version"});
    if (v.code != 0)
      throw std::runtime_error("the slurm executor needs Slurm's sbatch on PATH (Debian: slurm-client): " +
                               first_output_line(v.output));
  }

  std::string name() const override { return "slurm"; }
  bool waits_for_dependencies() const override { return true; }
  size_t capacity() const override { return SIZE_MAX; }
  // The nodes the cluster lists: each part loads the stage's input, so one part a node
  // (sinfo -N prints a node once per partition it is in).
  size_t width() const override {
    CommandOutput out = run_command({"sinfo", "-h", "-N", "-o", "%N"});
    if (out.code != 0) return 1;
    std::set<std::string> nodes;
    std::istringstream lines(out.output);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) nodes.insert(line);
    return std::max<size_t>(1, nodes.size());
  }

  std::string submit(const BuildPlan& plan, const PlannedStage& s, const std::vector<std::string>& after) override {
    const fs::path script = write_script(plan, s.id, {&s});
    const std::string id =
        sbatch(plan, s.id, script, after, s.memory, "--output=" + (plan.log_dir() / (s.id + "-%j.log")).string());
    logs_[id] = plan.log_dir() / (s.id + "-" + id + ".log");
    return id;
  }

  std::vector<std::string> submit_all(const BuildPlan& plan, const std::vector<const PlannedStage*>& stages,
                                      const std::vector<std::string>& after) override {
    if (stages.size() == 1) return {submit(plan, *stages[0], after)};
    // One array per kind: the targets' compiles (and their parts), or the parts of one stage.
    std::string name = stages[0]->compile ? "compile" : stages[0]->id.substr(0, stages[0]->id.rfind("-part-")) + "-parts";
    const fs::path script = write_script(plan, name + "-array", stages);
    uint64_t memory = 0;  // one request for the array: its largest stage's
    for (const PlannedStage* s : stages) memory = std::max(memory, s->memory);
    const std::string id = sbatch(plan, name, script, after, memory,
                                  "--output=" + (plan.log_dir() / (name + "-%A_%a.log")).string(),
                                  "--array=0-" + std::to_string(stages.size() - 1));
    std::vector<std::string> handles;
    for (size_t k = 0; k < stages.size(); ++k) {
      handles.push_back(id + "_" + std::to_string(k));
      logs_[handles.back()] = plan.log_dir() / (name + "-" + handles.back() + ".log");
    }
    return handles;
  }

  Status poll(const std::string& handle) override {
    CommandOutput out = run_command({"scontrol", "-o", "show", "job", handle});
    // A job Slurm no longer lists finished long ago: its result file says how.
    if (out.code != 0) return {State::succeeded, ""};
    std::smatch m;
    std::string state, reason, exit_code;
    if (std::regex_search(out.output, m, std::regex(R"(JobState=(\S+))"))) state = m[1];
    if (std::regex_search(out.output, m, std::regex(R"(Reason=(\S+))"))) reason = m[1];
    if (std::regex_search(out.output, m, std::regex(R"(ExitCode=(\S+))"))) exit_code = m[1];
    if (state == "COMPLETED") return {State::succeeded, ""};
    if (state == "PENDING" && reason != "DependencyNeverSatisfied") return {State::running, "pending: " + reason};
    static const std::vector<std::string> active{"RUNNING",  "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING",
                                                 "SUSPENDED", "STAGE_OUT",  "SIGNALING", "REQUEUE_FED"};
    if (std::find(active.begin(), active.end(), state) != active.end()) return {State::running, state};
    return {State::failed, "Slurm job " + handle + " " + state + " (reason " + reason + ", exit code " + exit_code + ")"};
  }

  void cancel(const std::string& handle) override { run_command({"scancel", handle}); }

  fs::path log_path(const BuildPlan&, const PlannedStage&, const std::string& handle) const override {
    auto it = logs_.find(handle);
    return it == logs_.end() ? fs::path() : it->second;
  }

 private:
  fs::path write_script(const BuildPlan& plan, const std::string& name, const std::vector<const PlannedStage*>& stages) {
    std::string text = "#!/bin/sh\n# npuforge build stage(s), submitted by `npuforge build --executor slurm`\n";
    const std::string run = "exec " + quoted(program_.string()) + " build-stage " + quoted((plan.work_dir / "plan.json").string());
    if (stages.size() == 1) {
      text += run + " " + quoted(stages[0]->id) + "\n";
    } else {
      text += "case \"$SLURM_ARRAY_TASK_ID\" in\n";
      for (size_t k = 0; k < stages.size(); ++k) text += std::to_string(k) + ") id=" + quoted(stages[k]->id) + " ;;\n";
      text += "*) echo \"no stage for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\nesac\n" + run + " \"$id\"\n";
    }
    const fs::path script = plan.work_dir / "jobs" / (name + ".sh");
    fs::create_directories(script.parent_path());
    write_text_file_atomic(script, text);
    fs::permissions(script, fs::perms::owner_exec, fs::perm_options::add);
    return script;
  }

  std::string sbatch(const BuildPlan& plan, const std::string& name, const fs::path& script,
                     const std::vector<std::string>& after, uint64_t memory, const std::string& output,
                     const std::string& array = "") {
    std::vector<std::string> argv{"sbatch", "--parsable", "--requeue", "--job-name=npuforge-" + name, output,
                                  "--chdir=" + plan.work_dir.string(), "--cpus-per-task=" + std::to_string(options_.stage_cpus)};
    if (!array.empty()) argv.push_back(array);
    // The stage's estimated peak, at least 1 GB: what the node must have free for it.
    if (memory) argv.push_back("--mem=" + std::to_string(std::max<uint64_t>(memory >> 20, 1024)) + "M");
    if (!after.empty()) {
      std::string dep = "--dependency=afterok";
      for (const auto& a : after) dep += ":" + a;
      argv.push_back(dep);
    }
    for (const auto& a : options_.sbatch_args) argv.push_back(a);
    argv.push_back(script.string());
    CommandOutput out = run_command(argv);
    std::smatch m;
    const std::string text = out.output;
    if (out.code != 0 || !std::regex_search(text, m, std::regex(R"(^(\d+))")))
      throw std::runtime_error("sbatch refused stage '" + name + "': " + first_output_line(out.output));
    return m[1];
  }

  ExecutorOptions options_;
  fs::path program_;
  std::map<std::string, fs::path> logs_;
};

}  // namespace

std::unique_ptr<Executor> make_slurm_executor(const ExecutorOptions& options, const fs::path& program) {
  return std::make_unique<SlurmExecutor>(options, program);
}

}  // namespace nf::host
