// The weight container of one split (format in README.md, "Weight container"): a header,
// a JSON table of tensors, then 64-byte aligned payloads. Integer weights are stored at
// their encoding's width on the grid real = (q + zero) * scale (q signed, as the chip's
// kernels see it); weights without an encoding at fp16.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nf::htp {

constexpr char kContainerMagic[8] = {'N', 'F', 'H', 'T', 'P', 'W', '0', '1'};

enum class Storage { Int4, Int8, Int16, Fp16 };
const char* storage_name(Storage s);
int storage_bits(Storage s);

// One stored tensor. Quantization groups: one per (channel, block); `axis` < 0 = one group.
struct StoredTensor {
  std::string name;
  std::vector<int64_t> dims;
  Storage storage = Storage::Fp16;
  std::string encoding;       // "LPBQ", "PER_CHANNEL", ..., "" for fp16
  int axis = -1;              // channel axis
  int block_axis = -1;
  int64_t block_size = 0;
  std::vector<float> scales;  // per group (channel-major: channel * blocks + block)
  std::vector<float> zeros;   // per group

  int64_t numel() const;
  uint64_t payload_bytes() const;  // the stored values
  int64_t blocks() const;          // blocks along block_axis (1 when not blockwise)
  // Group of element i (row-major).
  int64_t group_of(int64_t i) const;
};

// Quantizes elements [begin, end) of the tensor's floats `w` onto its grid (or to fp16) into
// `out`, which receives those elements' stored bytes; begin is even (int4 packs two a byte).
void quantize_payload(const StoredTensor& t, const float* w, uint8_t* out, int64_t begin, int64_t end);
// Reverse: the stored values as floats, exactly on the grid.
void dequantize_payload(const StoredTensor& t, const uint8_t* in, float* out);

// Quantizes the tensor's floats `w` (numel) onto its grid a pass at a time, handing each
// pass's stored bytes to `sink` and then, when given, the byte range of the floats it read to
// `release` (the caller can drop their pages).
void pack_in_passes(const StoredTensor& t, const float* w, const std::function<void(const uint8_t*, size_t)>& sink,
                    const std::function<void(size_t byte_offset, size_t bytes)>& release = {});

// Writes a container; `source(i)` returns the float data of tensor i (numel floats).
// `release(i, byte_offset, bytes)`, when given, is called as each part of those floats has
// been read (the caller can drop its pages), and `done(i)` once tensor i is written.
// `packed(i, &bytes)`, when given, may hand tensor i's stored payload packed already (a
// compile part's); then its floats are not read.
void write_container(const std::string& path, const nlohmann::json& info, const std::vector<StoredTensor>& tensors,
                     const std::function<const float*(size_t)>& source,
                     const std::function<void(size_t)>& done = {},
                     const std::function<void(size_t, size_t, size_t)>& release = {},
                     const std::function<bool(size_t, std::vector<uint8_t>*)>& packed = {});

struct LoadedContainer {
  nlohmann::json info;
  std::vector<StoredTensor> tensors;
  std::vector<std::vector<float>> values;  // dequantized, per tensor
};
// Reads and checks a container (magic, table, every range inside the file, sizes).
LoadedContainer read_container(const std::string& path);

}  // namespace nf::htp
