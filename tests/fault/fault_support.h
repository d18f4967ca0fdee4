// Helpers of the fault suite: run the real npuforge (with a timeout, so a hang fails the
// test instead of the suite), scratch folders, manifests over the test models.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/cli_support.h"

namespace nf::fault {

namespace fs = std::filesystem;
using nf::test::CommandResult;

// Runs `npuforge ARGS...` with extra environment `env`, killed after `seconds`
// (exit_code 137 then). stdout and stderr are captured apart.
inline CommandResult run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                         int seconds = 300) {
  static int counter = 0;
  const fs::path err = fs::temp_directory_path() /
                       ("nf_fault_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::string cmd = "timeout -s KILL " + std::to_string(seconds) + " env";
  for (const auto& [k, v] : env) cmd += " " + nf::test::quote(k + "=" + v);
  cmd += " " + nf::test::quote(nf::test::binary());
  for (const auto& a : args) cmd += " " + nf::test::quote(a);
  cmd += " 2>" + nf::test::quote(err.string()) + " </dev/null";
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = nf::test::slurp(err);
  fs::remove(err);
  return r;
}

// What every refused input must give: a non-zero exit that is not a signal (no crash, no
// timeout), the "npuforge: error:" line, no C++ runtime abort text.
inline void expect_clean_error(const CommandResult& r, const std::string& expect) {
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_LT(r.exit_code, 128) << "killed by a signal or timed out:\n" << r.err;
  EXPECT_NE(r.err.find("npuforge: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << "want '" << expect << "' in:\n" << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

// As above, and the error is the only line on stderr.
inline void expect_one_error_line(const CommandResult& r, const std::string& expect) {
  expect_clean_error(r, expect);
  EXPECT_EQ(nf::test::line_count(r.err), 1) << r.err;
}

// A fresh folder for one test, removed when the test process ends.
inline fs::path scratch(const std::string& name) {
  const fs::path d = nf::test::process_dir("fault") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

using test::test_plugins;
inline std::string fault_plugins(const std::string& kase) { return std::string(NF_FAULT_PLUGIN_DIR) + "/" + kase; }

// A manifest over a test model with a cpu target; `extra` is appended verbatim.
inline fs::path write_manifest(const fs::path& dir, const std::string& extra, const std::string& model = "llama_gqa") {
  std::ofstream(dir / "manifest.toml") << "[model]\nonnx = \"" << nf::test::model_dir(model) << "/model.onnx\"\n"
                                       << "[targets.cpu]\nbackend = \"cpu\"\n"
                                       << extra;
  return dir / "manifest.toml";
}

inline void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Names in `dir` (not recursive), sorted.
inline std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A pid that belonged to a process which has exited (reaped): "dead".
inline pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

inline std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace nf::fault
