// Opens what `run` and `eval` are given: a package directory (through its backend) or a
// bare .onnx file (through the cpu backend, without building a package).
#pragma once

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
  int64_t vocab = -1;     // from the logits shape, -1 when symbolic
};

// `decoder`: the speculative decoder a bare .onnx will run with ("" or "none": none); its
// assets' extra embedding rows (ssd's forecast tokens) are appended before the model opens.
std::unique_ptr<OpenModel> open_model(const std::string& path, const std::string& decoder = "");

}  // namespace nf::cli
