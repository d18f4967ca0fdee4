// Opens what `run` and `eval` are given: a package directory (through its backend) or a
// bare .onnx file (through the cpu backend, without building a package).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "registry/registry.h"
#include "runner/runner.h"
#include "runtime/package.h"
#include "runtime/session.h"

namespace nf::cli {

struct OpenModel {
  host::Registry registry;
  std::unique_ptr<ir::ModelSet> model_set;  // bare .onnx only
  std::optional<host::Package> package;
  std::unique_ptr<host::BackendSession> session;
  std::unique_ptr<host::Runner> runner;
  std::string tokenizer;  // tokenizer.json path, "" when there is none
  // config.json's eos_token_id (one id or a list): end-of-turn tokens the tokenizer's own
  // list does not name (Command R's <|END_OF_TURN_TOKEN|>, EXAONE's [|endofturn|]).
  std::vector<int32_t> eos_ids;
  int64_t vocab = -1;     // from the logits shape, -1 when symbolic
};

// `decoder`: the speculative decoder a bare .onnx will run with ("" or "none": none); its
// assets' extra embedding rows (ssd's forecast tokens) are appended before the model opens.
std::unique_ptr<OpenModel> open_model(const std::string& path, const std::string& decoder = "");

// --profile FILE (run, eval): each graph node's time, from the engine (NPUFORGE_PROFILE).
void add_profile_option(CLI::App* cmd, std::string& file);
// Sets NPUFORGE_PROFILE to FILE's absolute path before any graph is planned (the engine reads
// it once) and removes an old FILE; "" does nothing. Returns the path ("" when none).
std::filesystem::path start_profile(const std::string& file);
// After every session has closed (the engine writes the file then): the passes and the
// costliest operators, to stderr.
void print_profile(const std::filesystem::path& file);

}  // namespace nf::cli
