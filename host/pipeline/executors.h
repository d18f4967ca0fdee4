// The executors behind make_executor (stage_graph.h), one file each.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/stage_graph.h"

namespace nf::host {

std::unique_ptr<Executor> make_local_executor(size_t jobs, const std::filesystem::path& program);
std::unique_ptr<Executor> make_slurm_executor(const ExecutorOptions& options, const std::filesystem::path& program);

// Runs argv (argv[0] looked up on PATH) and returns its exit code (-1: could not start,
// 128 + N: killed by signal N) and what it wrote to stdout and stderr.
struct CommandOutput {
  int code = -1;
  std::string output;
};
CommandOutput run_command(const std::vector<std::string>& argv);

}  // namespace nf::host
