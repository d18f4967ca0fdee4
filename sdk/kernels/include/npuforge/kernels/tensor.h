// The reference kernels' tensor: a dtype (nf_dtype codes), dims, and bytes that are either
// owned (shared between tensors that alias them, e.g. after Reshape) or borrowed from the
// caller (weights mapped by the host). Row-major, contiguous.
#pragma once

#include <npuforge/plugin.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nf::kernels {

using Dims = std::vector<int64_t>;

// Kernel errors carry one line the backend passes on unchanged.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

size_t dtype_size(nf_dtype t);
const char* dtype_name(nf_dtype t);
int64_t numel(const Dims& d);
std::string dims_str(const Dims& d);

class Tensor {
 public:
  Tensor() = default;
  // Owned, uninitialized bytes.
  Tensor(nf_dtype dtype, Dims dims);
  // Owned, zero-filled.
  static Tensor zeros(nf_dtype dtype, Dims dims);
  // Views `data` without owning it; the caller keeps it alive. `keep` may hold an owner.
  static Tensor borrow(nf_dtype dtype, Dims dims, const void* data, std::shared_ptr<const void> keep = {});
  // Writable view of caller memory (e.g. a graph output allocated by the host).
  static Tensor wrap(nf_dtype dtype, Dims dims, void* data, std::shared_ptr<const void> keep = {});
  template <class T>
  static Tensor from(nf_dtype dtype, Dims dims, const std::vector<T>& v) {
    Tensor t(dtype, std::move(dims));
    if (v.size() != static_cast<size_t>(t.numel())) throw KernelError("Tensor::from: size mismatch");
    std::memcpy(t.mut_raw(), v.data(), t.nbytes());
    return t;
  }
  template <class T>
  static Tensor scalar(nf_dtype dtype, T v) { return from(dtype, {}, std::vector<T>{v}); }

  bool empty_handle() const { return dtype_ == NF_DTYPE_UNDEFINED; }
  nf_dtype dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  size_t rank() const { return dims_.size(); }
  int64_t dim(size_t i) const { return dims_[i]; }
  int64_t numel() const { return kernels::numel(dims_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const void* raw() const { return data_; }
  template <class T> const T* data() const { return static_cast<const T*>(data_); }
  // Writable bytes; throws for borrowed tensors (kernels never write their inputs).
  void* mut_raw();
  template <class T> T* mut() { return static_cast<T*>(mut_raw()); }

  // Same bytes, other dims (numel must match): Reshape, Squeeze, Flatten are free.
  Tensor reshaped(Dims dims) const;
  // A deep copy with owned bytes.
  Tensor clone() const;
  // Values of an integer tensor (int32/int64) as int64, e.g. shapes and axes inputs.
  std::vector<int64_t> to_int64s() const;

 private:
  nf_dtype dtype_ = NF_DTYPE_UNDEFINED;
  Dims dims_;
  std::shared_ptr<const void> keep_;  // owner of the bytes (ours or the caller's), may be null
  const void* data_ = nullptr;
  bool writable_ = false;
};

// Calls f(T{}) with the C++ type of a numeric dtype; throws for others.
template <class F>
decltype(auto) dispatch(nf_dtype t, F&& f) {
  switch (t) {
    case NF_DTYPE_FLOAT32: return f(float{});
    case NF_DTYPE_FLOAT64: return f(double{});
    case NF_DTYPE_INT64: return f(int64_t{});
    case NF_DTYPE_INT32: return f(int32_t{});
    case NF_DTYPE_INT16: return f(int16_t{});
    case NF_DTYPE_INT8: return f(int8_t{});
    case NF_DTYPE_UINT64: return f(uint64_t{});
    case NF_DTYPE_UINT32: return f(uint32_t{});
    case NF_DTYPE_UINT16: return f(uint16_t{});
    case NF_DTYPE_UINT8: return f(uint8_t{});
    case NF_DTYPE_BOOL: return f(bool{});
    default: throw KernelError(std::string("dtype ") + dtype_name(t) + " is not supported");
  }
}

// Normalizes a possibly negative axis against rank; throws when out of range.
int64_t norm_axis(int64_t axis, int64_t rank, const char* op);

// Numpy broadcasting of two shapes; throws naming `op` when incompatible.
Dims broadcast_shape(const Dims& a, const Dims& b, const char* op);
// Row-major element strides of `d` as seen from output shape `out` (0 on broadcast dims).
std::vector<int64_t> broadcast_strides(const Dims& d, const Dims& out);
std::vector<int64_t> strides_of(const Dims& d);

}  // namespace nf::kernels
