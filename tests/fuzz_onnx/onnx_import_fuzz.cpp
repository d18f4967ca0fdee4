// libFuzzer target: arbitrary bytes through ONNX import (and, when they load, export).
// Built only with -DNPUFORGE_FUZZ=ON and clang; run with scripts/fuzz.sh.
#include "fuzz_one.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nf::fuzz::import_one(std::string_view(reinterpret_cast<const char*>(data), size), NPUFORGE_FUZZ_DATA_DIR);
  return 0;
}
