// The local executor: each stage a `npuforge build-stage` process on this machine, as many
// at once as --jobs says (a 2-core machine compiles two targets at once).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "pipeline/executors.h"

extern char** environ;

namespace fs = std::filesystem;

namespace nf::host {
namespace {

class LocalExecutor final : public Executor {
 public:
  LocalExecutor(size_t jobs, fs::path program) : jobs_(jobs ? jobs : 1), program_(std::move(program)) {}
  ~LocalExecutor() override {
    for (auto& [pid, status] : children_)
      if (status.state == State::running) stop(pid);
  }

  std::string name() const override { return "local, " + std::to_string(jobs_) + " worker(s)"; }
  bool waits_for_dependencies() const override { return false; }
  size_t capacity() const override { return jobs_; }
  // One machine: a stage already runs on all its cores, and each part would hold its own
  // copy of the stage's input. Parts only when asked for (--shards).
  size_t width() const override { return 1; }

  std::string submit(const BuildPlan& plan, const PlannedStage& s, const std::vector<std::string>&) override {
    const fs::path log = plan.log_dir() / (s.id + ".log");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    posix_spawn_file_actions_addclose(&actions, STDIN_FILENO);
    const std::string plan_json = (plan.work_dir / "plan.json").string();
    std::vector<std::string> args{program_.string(), "build-stage", plan_json, s.id};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, program_.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("could not start " + program_.string() + ": " + std::strerror(rc));
    children_[pid] = {State::running, "pid " + std::to_string(pid)};
    logs_[std::to_string(pid)] = log;
    return std::to_string(pid);
  }

  Status poll(const std::string& handle) override {
    const pid_t pid = std::stoi(handle);
    Status& st = children_.at(pid);
    if (st.state != State::running) return st;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return st;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      st = {State::succeeded, ""};
    else if (WIFEXITED(status))
      st = {State::failed, "exit code " + std::to_string(WEXITSTATUS(status))};
    else
      st = {State::failed, std::string("killed by signal ") + strsignal(WTERMSIG(status))};
    return st;
  }

  void cancel(const std::string& handle) override {
    const pid_t pid = std::stoi(handle);
    if (children_.at(pid).state == State::running) stop(pid);
  }

  fs::path log_path(const BuildPlan&, const PlannedStage&, const std::string& handle) const override {
    return logs_.at(handle);
  }

 private:
  // SIGTERM: the stage stops at its next progress report and removes what it half-wrote;
  // SIGKILL after 30 s.
  void stop(pid_t pid) {
    ::kill(pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 300; ++i) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        children_[pid] = {State::failed, "cancelled"};
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    children_[pid] = {State::failed, "cancelled"};
  }

  size_t jobs_;
  fs::path program_;
  std::map<pid_t, Status> children_;
  std::map<std::string, fs::path> logs_;
};

}  // namespace

std::unique_ptr<Executor> make_local_executor(size_t jobs, const fs::path& program) {
  return std::make_unique<LocalExecutor>(jobs, program);
}

}  // namespace nf::host
