#include "pipeline/microsoft_ops.h"

#include <stdexcept>
#include <string>

#include "api/host_api.h"
#include "pipeline/sdk_passes.h"

namespace nf::host {

size_t expand_microsoft_ops(ir::Graph& g) {
  std::string error;
  const int64_t expanded = expand_microsoft_ops_through_abi(host_api(), handle(&g), &error);
  if (!error.empty()) throw std::runtime_error("the model's ONNX Runtime contrib operators: " + error);
  return static_cast<size_t>(expanded);
}

}  // namespace nf::host
