#include "container.h"

#include <npuforge/kernels/elementwise.h>
#include <npuforge/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace nf::htp {
namespace {

constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

Storage parse_storage(const std::string& s, const std::string& where) {
  if (s == "int4") return Storage::Int4;
  if (s == "int8") return Storage::Int8;
  if (s == "int16") return Storage::Int16;
  if (s == "fp16") return Storage::Fp16;
  throw Error(where + ": unknown storage '" + s + "'");
}

struct Layout {
  uint64_t data, scales, zeros;  // offsets inside the payload region
};

std::vector<Layout> layout(const std::vector<StoredTensor>& ts, uint64_t* total) {
  std::vector<Layout> r;
  uint64_t off = 0;
  for (const auto& t : ts) {
    Layout l{};
    l.data = off;
    off = align_up(off + t.payload_bytes());
    l.scales = off;
    off = align_up(off + t.scales.size() * 4);
    l.zeros = off;
    off = align_up(off + t.zeros.size() * 4);
    r.push_back(l);
  }
  *total = off;
  return r;
}

}  // namespace

const char* storage_name(Storage s) {
  switch (s) {
    case Storage::Int4: return "int4";
    case Storage::Int8: return "int8";
    case Storage::Int16: return "int16";
    default: return "fp16";
  }
}

int storage_bits(Storage s) {
  switch (s) {
    case Storage::Int4: return 4;
    case Storage::Int8: return 8;
    default: return 16;
  }
}

int64_t StoredTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

uint64_t StoredTensor::payload_bytes() const { return (static_cast<uint64_t>(numel()) * storage_bits(storage) + 7) / 8; }

int64_t StoredTensor::blocks() const {
  if (block_axis < 0 || block_size <= 0) return 1;
  return (dims[static_cast<size_t>(block_axis)] + block_size - 1) / block_size;
}

int64_t StoredTensor::group_of(int64_t i) const {
  if (axis < 0) return 0;
  int64_t stride_c = 1, stride_b = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (static_cast<int>(d) == axis) break;
    stride_c *= dims[d];
  }
  int64_t ch = (i / stride_c) % dims[static_cast<size_t>(axis)];
  if (block_axis < 0) return ch;
  for (size_t d = dims.size(); d-- > 0;) {
    if (static_cast<int>(d) == block_axis) break;
    stride_b *= dims[d];
  }
  int64_t b = (i / stride_b) % dims[static_cast<size_t>(block_axis)] / block_size;
  return ch * blocks() + b;
}

void quantize_payload(const StoredTensor& t, const float* w, uint8_t* out, int64_t begin, int64_t end) {
  if (t.storage == Storage::Fp16) {
    auto* h = reinterpret_cast<uint16_t*>(out);
    for (int64_t i = begin; i < end; ++i) h[i - begin] = kernels::float_to_half(w[i]);
    return;
  }
  const int bits = storage_bits(t.storage);
  const float qmin = -std::ldexp(1.f, bits - 1), qmax = std::ldexp(1.f, bits - 1) - 1;
  if (t.storage == Storage::Int4) std::memset(out, 0, static_cast<size_t>((end - begin + 1) / 2));
  for (int64_t i = begin; i < end; ++i) {
    int64_t g = t.group_of(i);
    float s = t.scales[static_cast<size_t>(g)], z = t.zeros[static_cast<size_t>(g)];
    float q = s > 0 ? std::clamp(std::nearbyint(w[i] / s) - z, qmin, qmax) : 0.f;
    int v = static_cast<int>(q);
    const int64_t j = i - begin;  // begin is even, so j and i share their nibble
    if (t.storage == Storage::Int4)
      out[j / 2] |= static_cast<uint8_t>((v & 0xF) << ((j & 1) * 4));
    else if (t.storage == Storage::Int8)
      reinterpret_cast<int8_t*>(out)[j] = static_cast<int8_t>(v);
    else
      reinterpret_cast<int16_t*>(out)[j] = static_cast<int16_t>(v);
  }
}

void dequantize_payload(const StoredTensor& t, const uint8_t* in, float* out) {
  const int64_t n = t.numel();
  if (t.storage == Storage::Fp16) {
    auto* h = reinterpret_cast<const uint16_t*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = kernels::half_to_float(h[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    int v;
    if (t.storage == Storage::Int4) {
      v = (in[i / 2] >> ((i & 1) * 4)) & 0xF;
      if (v >= 8) v -= 16;
    } else if (t.storage == Storage::Int8) {
      v = reinterpret_cast<const int8_t*>(in)[i];
    } else {
      v = reinterpret_cast<const int16_t*>(in)[i];
    }
    int64_t g = t.group_of(i);
    out[i] = (static_cast<float>(v) + t.zeros[static_cast<size_t>(g)]) * t.scales[static_cast<size_t>(g)];
  }
}

void pack_in_passes(const StoredTensor& t, const float* w, const std::function<void(const uint8_t*, size_t)>& sink,
                    const std::function<void(size_t, size_t)>& release) {
  // Passes of 8 Mi values (32 MiB of floats read, at most 16 MiB written): a weight's floats
  // are never in memory whole. Even-sized, so int4 bytes never straddle two passes.
  constexpr int64_t kPass = int64_t{8} << 20;
  std::vector<uint8_t> buf;
  const int64_t n = t.numel();
  for (int64_t b = 0; b < n; b += kPass) {
    const int64_t e = std::min(n, b + kPass);
    buf.resize(static_cast<size_t>(((e - b) * storage_bits(t.storage) + 7) / 8));
    quantize_payload(t, w, buf.data(), b, e);
    sink(buf.data(), buf.size());
    if (release) release(static_cast<size_t>(b) * 4, static_cast<size_t>(e - b) * 4);
  }
}

void write_container(const std::string& path, const nlohmann::json& info, const std::vector<StoredTensor>& tensors,
                     const std::function<const float*(size_t)>& source, const std::function<void(size_t)>& done,
                     const std::function<void(size_t, size_t, size_t)>& release,
                     const std::function<bool(size_t, std::vector<uint8_t>*)>& packed) {
  uint64_t total = 0;
  auto lay = layout(tensors, &total);
  nlohmann::json table = nlohmann::json::array();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    table.push_back({{"name", t.name},
                     {"dims", t.dims},
                     {"storage", storage_name(t.storage)},
                     {"encoding", t.encoding},
                     {"axis", t.axis},
                     {"block_axis", t.block_axis},
                     {"block_size", t.block_size},
                     {"data", {lay[i].data, t.payload_bytes()}},
                     {"scales", {lay[i].scales, t.scales.size()}},
                     {"zeros", {lay[i].zeros, t.zeros.size()}}});
  }
  nlohmann::json head = {{"format", "npuforge-htp-weights"}, {"version", 1}, {"info", info},
                         {"payload_bytes", total}, {"tensors", table}};
  std::string text = head.dump();
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("htp: cannot write " + path);
  uint64_t len = text.size();
  f.write(kContainerMagic, 8);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  uint64_t pos = 16 + len;
  std::vector<char> zeros(kAlign, 0);
  auto pad_to = [&](uint64_t target) {
    while (pos < target) {
      uint64_t n = std::min<uint64_t>(kAlign, target - pos);
      f.write(zeros.data(), static_cast<std::streamsize>(n));
      pos += n;
    }
  };
  const uint64_t base = align_up(pos);
  pad_to(base);
  std::vector<uint8_t> buf;  // a payload a part packed
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    pad_to(base + lay[i].data);
    if (packed && packed(i, &buf)) {
      if (buf.size() != t.payload_bytes()) throw Error("htp: packed payload of '" + t.name + "' has the wrong size");
      f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
      pos += buf.size();
    } else {
      pack_in_passes(t, source(i),
                     [&](const uint8_t* bytes, size_t size) {
                       f.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(size));
                       pos += size;
                     },
                     [&](size_t offset, size_t bytes) {
                       if (release) release(i, offset, bytes);
                     });
    }
    if (done) done(i);
    pad_to(base + lay[i].scales);
    f.write(reinterpret_cast<const char*>(t.scales.data()), static_cast<std::streamsize>(t.scales.size() * 4));
    pos += t.scales.size() * 4;
    pad_to(base + lay[i].zeros);
    f.write(reinterpret_cast<const char*>(t.zeros.data()), static_cast<std::streamsize>(t.zeros.size() * 4));
    pos += t.zeros.size() * 4;
  }
  pad_to(base + total);
  f.flush();
  if (!f) throw Error("htp: writing " + path + " failed (disk full?)");
}

LoadedContainer read_container(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error("htp: cannot open weight container " + path);
  const uint64_t size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  auto corrupt = [&](const std::string& why) { return Error("htp: corrupt weight container " + path + ": " + why); };
  char magic[8];
  uint64_t len = 0;
  if (size < 16 || !f.read(magic, 8) || std::memcmp(magic, kContainerMagic, 8) != 0) throw corrupt("bad magic");
  f.read(reinterpret_cast<char*>(&len), 8);
  if (len > size - 16) throw corrupt("table length past the end of the file");
  std::string text(len, '\0');
  f.read(text.data(), static_cast<std::streamsize>(len));
  nlohmann::json head = nlohmann::json::parse(text, nullptr, false);
  if (!head.is_object() || head.value("format", "") != "npuforge-htp-weights" || head.value("version", 0) != 1)
    throw corrupt("the table is not an npuforge-htp-weights v1 JSON document");
  const uint64_t base = align_up(16 + len);
  LoadedContainer c;
  c.info = head.value("info", nlohmann::json::object());
  try {
    const uint64_t total = head.at("payload_bytes").get<uint64_t>();
    if (base + total != size) throw corrupt("file is " + std::to_string(size) + " bytes, the table says " +
                                            std::to_string(base + total));
    for (const auto& e : head.at("tensors")) {
      StoredTensor t;
      t.name = e.at("name").get<std::string>();
      t.dims = e.at("dims").get<std::vector<int64_t>>();
      for (int64_t d : t.dims)
        if (d < 0 || d > (int64_t{1} << 40)) throw corrupt("tensor '" + t.name + "' has a bad dimension");
      t.storage = parse_storage(e.at("storage").get<std::string>(), path);
      t.encoding = e.at("encoding").get<std::string>();
      t.axis = e.at("axis").get<int>();
      t.block_axis = e.at("block_axis").get<int>();
      t.block_size = e.at("block_size").get<int64_t>();
      const int rank = static_cast<int>(t.dims.size());
      if (t.axis >= rank || t.block_axis >= rank || (t.block_axis >= 0 && (t.axis < 0 || t.block_size <= 0)))
        throw corrupt("tensor '" + t.name + "' has bad axes");
      auto range = [&](const char* key, uint64_t want) {
        auto r = e.at(key).get<std::vector<uint64_t>>();
        if (r.size() != 2 || r[1] != want || r[0] > total || r[1] > total - r[0])
          throw corrupt("tensor '" + t.name + "': bad " + key + " range");
        return r[0];
      };
      uint64_t groups = t.axis < 0 ? 1 : static_cast<uint64_t>(t.dims[static_cast<size_t>(t.axis)] * t.blocks());
      bool fp = t.storage == Storage::Fp16;
      uint64_t d_off = range("data", t.payload_bytes());
      uint64_t s_off = range("scales", fp ? 0 : groups);
      uint64_t z_off = range("zeros", fp ? 0 : groups);
      auto read_at = [&](uint64_t off, void* dst, uint64_t n) {
        f.seekg(static_cast<std::streamoff>(base + off));
        if (n && !f.read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) throw corrupt("short read");
      };
      t.scales.resize(fp ? 0 : groups);
      t.zeros.resize(fp ? 0 : groups);
      read_at(s_off, t.scales.data(), t.scales.size() * 4);
      read_at(z_off, t.zeros.data(), t.zeros.size() * 4);
      for (float s : t.scales)
        if (!std::isfinite(s) || s < 0) throw corrupt("tensor '" + t.name + "' has a bad scale");
      std::vector<uint8_t> payload(t.payload_bytes());
      read_at(d_off, payload.data(), payload.size());
      std::vector<float> values(static_cast<size_t>(t.numel()));
      dequantize_payload(t, payload.data(), values.data());
      c.tensors.push_back(std::move(t));
      c.values.push_back(std::move(values));
    }
  } catch (const nlohmann::json::exception& e) {
    throw corrupt(std::string("bad table (") + e.what() + ")");
  }
  return c;
}

}  // namespace nf::htp
