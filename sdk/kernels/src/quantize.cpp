#include "npuforge/kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nf::kernels {
namespace {

// Index of the scale for flat element i: 0 per-tensor, else the coordinate along axis.
struct ScaleIndex {
  bool per_axis = false;
  int64_t n = 1, inner = 1;
  int64_t operator()(int64_t i) const { return per_axis ? (i / inner) % n : 0; }
};

ScaleIndex scale_index(const Tensor& x, const Tensor& scale, int64_t axis, const char* op) {
  ScaleIndex s;
  if (scale.numel() == 1 && scale.rank() <= 1) return s;
  if (scale.rank() != 1) throw KernelError(std::string(op) + ": scale must be a scalar or 1-D (blocked is not supported)");
  int64_t a = norm_axis(axis, x.rank(), op);
  if (scale.dim(0) != x.dim(a)) throw KernelError(std::string(op) + ": scale length does not match axis " + std::to_string(axis));
  s.per_axis = true;
  s.n = x.dim(a);
  for (size_t i = a + 1; i < x.rank(); ++i) s.inner *= x.dim(i);
  return s;
}

}  // namespace

Tensor quantize_linear(const Tensor& x, const Tensor& scale, const Tensor* zp, int64_t axis) {
  if (x.dtype() != NF_DTYPE_FLOAT32 || scale.dtype() != NF_DTYPE_FLOAT32) throw KernelError("QuantizeLinear: only float32 input and scale are supported");
  ScaleIndex si = scale_index(x, scale, axis, "QuantizeLinear");
  nf_dtype out = zp ? zp->dtype() : NF_DTYPE_UINT8;
  return dispatch(out, [&](auto tag) -> Tensor {
    using Q = decltype(tag);
    if constexpr (std::is_same_v<Q, bool> || std::is_floating_point_v<Q>) {
      throw KernelError("QuantizeLinear: unsupported output dtype");
    } else {
      Tensor y(out, x.dims());
      const float* px = x.data<float>();
      const float* ps = scale.data<float>();
      const Q* pz = zp ? zp->data<Q>() : nullptr;
      const double lo = static_cast<double>(std::numeric_limits<Q>::lowest()), hi = static_cast<double>(std::numeric_limits<Q>::max());
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        int64_t c = si(i);
        double q = std::nearbyint(static_cast<double>(px[i]) / ps[c]) + (pz ? static_cast<double>(pz[zp->numel() == 1 ? 0 : c]) : 0.0);
        y.mut<Q>()[i] = static_cast<Q>(std::clamp(q, lo, hi));
      }
      return y;
    }
  });
}

Tensor dequantize_linear(const Tensor& x, const Tensor& scale, const Tensor* zp, int64_t axis) {
  if (scale.dtype() != NF_DTYPE_FLOAT32) throw KernelError("DequantizeLinear: only float32 scale is supported");
  ScaleIndex si = scale_index(x, scale, axis, "DequantizeLinear");
  if (zp && zp->dtype() != x.dtype()) throw KernelError("DequantizeLinear: zero point dtype differs from input");
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using Q = decltype(tag);
    Tensor y(NF_DTYPE_FLOAT32, x.dims());
    const Q* px = x.data<Q>();
    const float* ps = scale.data<float>();
    const Q* pz = zp ? zp->data<Q>() : nullptr;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      int64_t c = si(i);
      double z = pz ? static_cast<double>(pz[zp->numel() == 1 ? 0 : c]) : 0.0;
      y.mut<float>()[i] = static_cast<float>((static_cast<double>(px[i]) - z) * ps[c]);
    }
    return y;
  });
}

}  // namespace nf::kernels
