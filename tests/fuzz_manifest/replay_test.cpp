// Every corpus file (the seeds and each crash the fuzzer ever found) as a normal test:
// a crash that comes back fails here without a fuzzing build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

namespace {

std::vector<std::string> corpus_files() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(NPUFORGE_FUZZ_CORPUS))
    if (e.is_regular_file()) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

class Corpus : public ::testing::TestWithParam<std::string> {};

TEST_P(Corpus, NeverCrashes) {
  std::ifstream in(fs::path(NPUFORGE_FUZZ_CORPUS) / GetParam(), std::ios::binary);
  ASSERT_TRUE(in);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NO_THROW(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

INSTANTIATE_TEST_SUITE_P(ManifestFuzz, Corpus, ::testing::ValuesIn(corpus_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(Corpus, HasSeeds) { EXPECT_GE(corpus_files().size(), 10u); }

}  // namespace
