#include "npuforge/kernels/tensor.h"

#include <npuforge/plugin.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

namespace nf::kernels {

// One dtype table for the SDK: plugin.hpp's.
size_t dtype_size(nf_dtype t) { return nf::dtype_size(t); }
const char* dtype_name(nf_dtype t) { return nf::dtype_name(t); }

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

namespace {

// Reuse of large buffers: decode allocates the same activations every token, and glibc
// serves blocks above 128 KiB with mmap/munmap (page faults + unmap every step). Freed
// buffers >= 64 KiB wait in a pool keyed by size class (1/8 of a power of two, so growing
// attention shapes reuse them) up to kPoolCap bytes in total.
constexpr size_t kPoolMin = 64 << 10, kPoolCap = size_t(512) << 20;

size_t size_class(size_t n) {
  if (n < kPoolMin) return (n + 63) / 64 * 64;
  size_t p = size_t(1) << (63 - __builtin_clzll(n));
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

struct BufferPool {
  std::mutex mu;
  std::multimap<size_t, void*> free;
  size_t bytes = 0;
};
BufferPool& pool() {
  static BufferPool* p = new BufferPool;  // never destroyed: tensors may die after static destructors
  return *p;
}

void* pool_get(size_t n) {
  if (n >= kPoolMin) {
    BufferPool& bp = pool();
    std::lock_guard<std::mutex> lock(bp.mu);
    auto it = bp.free.find(n);
    if (it != bp.free.end()) {
      void* p = it->second;
      bp.free.erase(it);
      bp.bytes -= n;
      return p;
    }
  }
  return std::aligned_alloc(64, n);
}

void pool_put(void* p, size_t n) {
  if (n >= kPoolMin) {
    BufferPool& bp = pool();
    std::lock_guard<std::mutex> lock(bp.mu);
    if (bp.bytes + n <= kPoolCap) {
      bp.free.emplace(n, p);
      bp.bytes += n;
      return;
    }
  }
  std::free(p);
}

}  // namespace

Tensor::Tensor(nf_dtype dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {
  for (int64_t d : dims_)
    if (d < 0) throw KernelError("negative dimension in shape " + dims_str(dims_));
  if (dtype_size(dtype) == 0) throw KernelError(std::string("dtype ") + dtype_name(dtype) + " is not supported");
  // 64-byte aligned so SIMD loads of rows start aligned; +1 keeps empty tensors non-null.
  size_t n = size_class(nbytes() + 64);
  void* p = pool_get(n);
  if (!p) throw KernelError("out of memory allocating " + std::to_string(n) + " bytes");
  keep_ = std::shared_ptr<const void>(p, [n](const void* q) { pool_put(const_cast<void*>(q), n); });
  data_ = p;
  writable_ = true;
}

Tensor Tensor::zeros(nf_dtype dtype, Dims dims) {
  Tensor t(dtype, std::move(dims));
  std::memset(t.mut_raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(nf_dtype dtype, Dims dims, const void* data, std::shared_ptr<const void> keep) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.data_ = data;
  t.keep_ = std::move(keep);
  return t;
}

Tensor Tensor::wrap(nf_dtype dtype, Dims dims, void* data, std::shared_ptr<const void> keep) {
  Tensor t = borrow(dtype, std::move(dims), data, std::move(keep));
  t.writable_ = true;
  return t;
}

void* Tensor::mut_raw() {
  if (!writable_) throw KernelError("internal: write to a borrowed tensor");
  return const_cast<void*>(data_);
}

Tensor Tensor::reshaped(Dims dims) const {
  if (kernels::numel(dims) != numel())
    throw KernelError("cannot reshape " + dims_str(dims_) + " to " + dims_str(dims));
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, dims_);
  std::memcpy(t.mut_raw(), data_, nbytes());
  return t;
}

std::vector<int64_t> Tensor::to_int64s() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  if (dtype_ == NF_DTYPE_INT64) std::memcpy(v.data(), data_, nbytes());
  else if (dtype_ == NF_DTYPE_INT32) for (size_t i = 0; i < v.size(); ++i) v[i] = data<int32_t>()[i];
  else throw KernelError(std::string("expected an int64 or int32 tensor, got ") + dtype_name(dtype_));
  return v;
}

int64_t norm_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    throw KernelError(std::string(op) + ": axis " + std::to_string(axis) + " out of range for rank " +
                      std::to_string(rank));
  return a;
}

Dims broadcast_shape(const Dims& a, const Dims& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1)
      throw KernelError(std::string(op) + ": shapes " + dims_str(a) + " and " + dims_str(b) +
                        " do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

std::vector<int64_t> strides_of(const Dims& d) {
  std::vector<int64_t> s(d.size());
  int64_t acc = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = acc;
    acc *= d[i];
  }
  return s;
}

std::vector<int64_t> broadcast_strides(const Dims& d, const Dims& out) {
  std::vector<int64_t> s(out.size(), 0);
  std::vector<int64_t> own = strides_of(d);
  size_t off = out.size() - d.size();
  for (size_t i = 0; i < d.size(); ++i) s[off + i] = d[i] == 1 ? 0 : own[i];
  return s;
}

}  // namespace nf::kernels
