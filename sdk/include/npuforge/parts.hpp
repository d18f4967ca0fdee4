// Helpers for work split into parts (nf_quant_api apply_shard, nf_backend_api compile_part):
// which items a part takes, and stable names for the checkpoints a part hands on.
// Header-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nf {

// The items part `index` of `count` takes: a contiguous run, in order, of about equal total
// size (an item goes to the part its middle falls in). Every item goes to exactly one part.
inline std::vector<size_t> part_share(const std::vector<uint64_t>& sizes, size_t index, size_t count) {
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  std::vector<size_t> mine;
  uint64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t middle = at + sizes[i] / 2;
    at += sizes[i];
    if (count > 0 && std::min<uint64_t>(count - 1, middle * count / std::max<uint64_t>(total, 1)) == index)
      mine.push_back(i);
  }
  return mine;
}

// FNV-1a over the fields that decide a checkpoint's contents, for its name: `prefix` then 16
// hex digits (checkpoint names are at most 128 of [A-Za-z0-9._-]).
class CheckpointName {
 public:
  explicit CheckpointName(std::string prefix) : prefix_(std::move(prefix)) {}
  CheckpointName& add(const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
    return *this;
  }
  CheckpointName& add(const std::string& s) { return add(s.data(), s.size() + 1); }  // with its end
  CheckpointName& add(int64_t v) { return add(&v, sizeof v); }
  std::string str() const {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h_));
    return prefix_ + hex;
  }

 private:
  std::string prefix_;
  uint64_t h_ = 1469598103934665603ull;
};

}  // namespace nf
