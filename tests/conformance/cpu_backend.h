// The cpu backend plugin as the conformance and model tests reach it: loaded once from
// the build tree through the host registry.
#pragma once

#include <string>

#include "registry/registry.h"

namespace nf::test {

inline const nf_backend_api* cpu_backend() {
  static host::Registry registry;
  static const nf_backend_api* api = [] {
    registry.load_library(std::string(NPUFORGE_BINARY_DIR) + "/lib/npuforge/plugins/libnpuforge_cpu.so");
    const host::PluginInfo* p = registry.find(NF_KIND_BACKEND, "cpu");
    return p ? p->backend() : nullptr;
  }();
  return api;
}

}  // namespace nf::test
