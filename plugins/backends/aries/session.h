// The aries session: integer execution of a package on the host. Weights come from the
// MXQ containers at their integer grids (int8 / int4 per output channel) and are attached
// to the graph with PER_CHANNEL encodings; activations carry the package's PER_TENSOR
// encodings (int8, 16-bit where configured). The execution engine (npuforge::engine) then
// runs the integer kernels on exactly those grids and rounds activations where produced.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <npuforge/engine/executor.h>

namespace nf::aries {

class Session {
 public:
  explicit Session(const std::string& artifacts_dir);
  ~Session();
  engine::GraphPlan& plan(const std::string& graph);

 private:
  nf_model_set* ms_ = nullptr;
  engine::SessionOptions opts_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<engine::GraphPlan>> plans_;
  engine::PackCache packs_;
};

}  // namespace nf::aries
