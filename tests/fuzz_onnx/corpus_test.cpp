// Replays every file in tests/fuzz_onnx/corpus through import: each crash the fuzzer ever
// found is kept there, so it stays fixed.
#include "fuzz_one.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

TEST(FuzzCorpus, EveryInputLoadsOrIsRefused) {
  fs::path corpus = fs::path(NPUFORGE_SOURCE_DIR) / "tests/fuzz_onnx/corpus";
  size_t n = 0, loaded = 0;
  for (const auto& e : fs::directory_iterator(corpus)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes{std::istreambuf_iterator<char>(in), {}};
    ++n;
    try {
      nf::fuzz::import_one(bytes, NPUFORGE_FUZZ_DATA_DIR);
      ++loaded;
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.path().filename() << ": " << ex.what();
    }
  }
  EXPECT_GE(n, 10u);
  std::cout << n << " corpus inputs replayed\n";
}
