#include "mxq.h"

#include <cstring>
#include <filesystem>

namespace nf::aries {
namespace {

constexpr char kMagic[8] = {'N', 'F', 'M', 'X', 'Q', '0', '1', '\n'};
constexpr uint64_t kMxqVersion = 1;
constexpr size_t kPreamble = 64;
constexpr uint64_t kAlign = 64;

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

MxqWriter::MxqWriter(const std::string& path, nlohmann::json header)
    : path_(path), f_(path, std::ios::binary | std::ios::trunc), header_(std::move(header)), hash_(kFnvSeed) {
  if (!f_) throw Error("aries backend: cannot write " + path);
  char zero[kPreamble] = {};
  f_.write(zero, kPreamble);
}

void MxqWriter::write(const void* p, size_t n) {
  f_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  hash_ = fnv1a64(p, n, hash_);
  offset_ += n;
}

void MxqWriter::add(const QuantWeight& w) {
  auto align = [&] {
    static const uint8_t pad[kAlign] = {};
    if (offset_ % kAlign) write(pad, kAlign - offset_ % kAlign);
  };
  align();
  uint64_t data_offset = offset_;
  if (w.bits == 8) {
    write(w.q.data(), w.q.size());
  } else {
    // Two 4-bit values a byte, low nibble first, each row padded to whole bytes.
    int64_t row = (w.K + 1) / 2;
    std::vector<uint8_t> packed(static_cast<size_t>(row * w.N), 0);
    for (int64_t n = 0; n < w.N; ++n)
      for (int64_t k = 0; k < w.K; ++k) {
        uint8_t v = static_cast<uint8_t>(w.q[static_cast<size_t>(n * w.K + k)]) & 0xF;
        packed[static_cast<size_t>(n * row + k / 2)] |= static_cast<uint8_t>(k % 2 ? v << 4 : v);
      }
    write(packed.data(), packed.size());
  }
  uint64_t data_bytes = offset_ - data_offset;
  align();
  uint64_t scale_offset = offset_;
  write(w.scale.data(), w.scale.size() * sizeof(float));
  tensors_.push_back({{"name", w.name}, {"kind", w.kind}, {"block", w.block}, {"K", w.K}, {"N", w.N},
                      {"bits", w.bits}, {"nk", w.nk}, {"layout", "channel-major [N][K], symmetric"},
                      {"data_offset", data_offset}, {"data_bytes", data_bytes}, {"scale_offset", scale_offset}});
}

void MxqWriter::finish() {
  uint64_t payload = offset_;
  nlohmann::json table = header_;
  table["tensors"] = tensors_;
  std::string js = table.dump();
  write(js.data(), js.size());
  char pre[kPreamble] = {};
  std::memcpy(pre, kMagic, 8);
  uint64_t fields[4] = {kMxqVersion, payload, js.size(), hash_};
  std::memcpy(pre + 8, fields, sizeof fields);
  f_.seekp(0);
  f_.write(pre, kPreamble);
  f_.close();
  if (!f_) throw Error("aries backend: cannot write " + path_);
}

MxqFile MxqFile::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("aries backend: cannot read " + path);
  char pre[kPreamble];
  if (!f.read(pre, kPreamble) || std::memcmp(pre, kMagic, 8) != 0)
    throw Error("aries backend: " + path + " is not an MXQ container (bad magic)");
  uint64_t fields[4];
  std::memcpy(fields, pre + 8, sizeof fields);
  if (fields[0] != kMxqVersion)
    throw Error("aries backend: " + path + " has container version " + std::to_string(fields[0]) + ", expected " +
                std::to_string(kMxqVersion));
  uint64_t size = std::filesystem::file_size(path);
  if (size != kPreamble + fields[1] + fields[2])
    throw Error("aries backend: " + path + " is truncated or padded (" + std::to_string(size) + " bytes, header says " +
                std::to_string(kPreamble + fields[1] + fields[2]) + ")");
  MxqFile m;
  m.payload.resize(fields[1]);
  std::string js(fields[2], '\0');
  f.read(reinterpret_cast<char*>(m.payload.data()), static_cast<std::streamsize>(m.payload.size()));
  f.read(js.data(), static_cast<std::streamsize>(js.size()));
  if (!f) throw Error("aries backend: cannot read " + path);
  uint64_t h = fnv1a64(js.data(), js.size(), fnv1a64(m.payload.data(), m.payload.size(), kFnvSeed));
  if (h != fields[3]) throw Error("aries backend: " + path + " is corrupted (checksum mismatch)");
  m.header = nlohmann::json::parse(js, nullptr, false);
  if (m.header.is_discarded() || !m.header.contains("tensors"))
    throw Error("aries backend: " + path + " has an unreadable tensor table");
  return m;
}

QuantWeight MxqFile::tensor(size_t i) const {
  const auto& t = header.at("tensors").at(i);
  QuantWeight w;
  w.name = t.at("name");
  w.kind = t.at("kind");
  w.block = t.at("block");
  w.K = t.at("K");
  w.N = t.at("N");
  w.bits = t.at("bits");
  w.nk = t.at("nk");
  uint64_t off = t.at("data_offset"), bytes = t.at("data_bytes"), soff = t.at("scale_offset");
  uint64_t want = w.bits == 8 ? static_cast<uint64_t>(w.K * w.N) : static_cast<uint64_t>((w.K + 1) / 2 * w.N);
  if (bytes != want || off + bytes > payload.size() || soff + w.N * sizeof(float) > payload.size())
    throw Error("aries backend: tensor '" + w.name + "' of the container lies outside its payload");
  w.q.resize(static_cast<size_t>(w.K * w.N));
  const uint8_t* p = payload.data() + off;
  if (w.bits == 8) {
    std::memcpy(w.q.data(), p, w.q.size());
  } else {
    int64_t row = (w.K + 1) / 2;
    for (int64_t n = 0; n < w.N; ++n)
      for (int64_t k = 0; k < w.K; ++k) {
        uint8_t b = p[n * row + k / 2];
        int v = (k % 2 ? b >> 4 : b) & 0xF;
        w.q[static_cast<size_t>(n * w.K + k)] = static_cast<int8_t>(v >= 8 ? v - 16 : v);
      }
  }
  w.scale.resize(static_cast<size_t>(w.N));
  std::memcpy(w.scale.data(), payload.data() + soff, w.scale.size() * sizeof(float));
  return w;
}

}  // namespace nf::aries
