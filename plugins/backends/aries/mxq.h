// The MXQ-like container: one file per part holding that part's quantized weights (see
// README "Container format"). Layout: a 64-byte preamble (magic "NFMXQ01\n", version,
// payload length, table length, FNV-1a-64 checksum of payload + table), the payload (each
// tensor's integer weights then its per-channel float32 scales, 64-byte aligned), then a
// JSON table describing every tensor. A file whose size, magic, version or checksum does
// not match is refused.
#pragma once

#include <npuforge/plugin.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace nf::aries {

// One weight: w[k, n] = q[n, k] * scale[n] (symmetric per output channel).
struct QuantWeight {
  std::string name;
  std::string kind;
  int64_t block = -1;
  int64_t K = 0, N = 0;
  int bits = 8;
  bool nk = false;  // the graph stores it [N, K] (Gemm transB)
  std::vector<int8_t> q;      // N rows of K values in [-2^(bits-1), 2^(bits-1) - 1]
  std::vector<float> scale;   // N
};

class MxqWriter {
 public:
  MxqWriter(const std::string& path, nlohmann::json header);
  void add(const QuantWeight& w);  // int4 is stored two values a byte (low nibble first)
  void finish();

 private:
  void write(const void* p, size_t n);
  std::string path_;
  std::ofstream f_;
  nlohmann::json header_;
  nlohmann::json tensors_ = nlohmann::json::array();
  uint64_t offset_ = 0, hash_;
};

struct MxqFile {
  nlohmann::json header;   // the table: header fields + "tensors"
  std::vector<uint8_t> payload;
  // Reads and verifies; throws naming the file and what is wrong.
  static MxqFile read(const std::string& path);
  // Unpacks tensor i of the table.
  QuantWeight tensor(size_t i) const;
};

uint64_t fnv1a64(const void* data, size_t n, uint64_t h);
constexpr uint64_t kFnvSeed = 1469598103934665603ull;

}  // namespace nf::aries
