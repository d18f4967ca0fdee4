#include "npuforge/kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace nf::kernels {
namespace {

// Runs f(out_index, a_index, b_index) over a broadcast, with the innermost loop contiguous
// so the compiler vectorizes the common same-shape and scalar cases.
template <class F>
void broadcast_loop(const Dims& out, const Dims& da, const Dims& db, F&& f) {
  int64_t n = numel(out);
  if (n == 0) return;
  if (da == out && db == out) {
    f.inner(0, 0, 1, 0, 1, n);
    return;
  }
  auto sa = broadcast_strides(da, out), sb = broadcast_strides(db, out);
  size_t r = out.size();
  int64_t inner = r ? out[r - 1] : 1;
  int64_t ia_step = r ? sa[r - 1] : 0, ib_step = r ? sb[r - 1] : 0;
  std::vector<int64_t> idx(r, 0);
  for (int64_t o = 0; o < n; o += inner) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i + 1 < r; ++i) ia += idx[i] * sa[i], ib += idx[i] * sb[i];
    f.inner(o, ia, ia_step, ib, ib_step, inner);
    for (size_t i = r - 1; i-- > 0;) {
      if (++idx[i] < out[i]) break;
      idx[i] = 0;
    }
  }
}

template <class T, class R, class Op>
struct Inner {
  const T* a; const T* b; R* y; Op op;
  void inner(int64_t o, int64_t ia, int64_t sa, int64_t ib, int64_t sb, int64_t n) {
    if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; ++i) y[o + i] = op(a[ia + i], b[ib + i]);
    else if (sa == 1 && sb == 0) { T bv = b[ib]; for (int64_t i = 0; i < n; ++i) y[o + i] = op(a[ia + i], bv); }
    else if (sa == 0 && sb == 1) { T av = a[ia]; for (int64_t i = 0; i < n; ++i) y[o + i] = op(av, b[ib + i]); }
    else for (int64_t i = 0; i < n; ++i) y[o + i] = op(a[ia + i * sa], b[ib + i * sb]);
  }
};

template <class R, class T, class Op>
Tensor apply_binary(const Tensor& a, const Tensor& b, nf_dtype out_dt, const char* name, Op op) {
  Dims out = broadcast_shape(a.dims(), b.dims(), name);
  Tensor y(out_dt, out);
  Inner<T, R, Op> in{a.data<T>(), b.data<T>(), y.mut<R>(), op};
  broadcast_loop(out, a.dims(), b.dims(), in);
  return y;
}

template <class T>
T ipow(T base, T exp) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(std::pow(base, exp));
  else return static_cast<T>(std::pow(static_cast<double>(base), static_cast<double>(exp)));
}

const char* binary_name(Binary op) {
  static const char* n[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "FMod", "Equal", "Less",
                            "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"};
  return n[static_cast<int>(op)];
}

}  // namespace

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  if (a.dtype() != b.dtype())
    throw KernelError(std::string(name) + ": input dtypes differ (" + dtype_name(a.dtype()) + " vs " +
                      dtype_name(b.dtype()) + ")");
  // Half types compute in float32 and round back once: exact for max/min/compare, and
  // correctly rounded for + - * / (float32 carries more than twice their precision).
  if (a.dtype() == NF_DTYPE_FLOAT16 || a.dtype() == NF_DTYPE_BFLOAT16) {
    Tensor y = binary(op, cast(a, NF_DTYPE_FLOAT32), cast(b, NF_DTYPE_FLOAT32));
    return y.dtype() == NF_DTYPE_BOOL ? y : cast(y, a.dtype());
  }
  return dispatch(a.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    nf_dtype dt = a.dtype();
    switch (op) {
      case Binary::Add: return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return static_cast<T>(x + y); });
      case Binary::Sub: return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return static_cast<T>(x - y); });
      case Binary::Mul: return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return static_cast<T>(x * y); });
      case Binary::Div:
        if constexpr (std::is_integral_v<T>) {
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return y == 0 ? T(0) : static_cast<T>(x / y); });
        } else {
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return static_cast<T>(x / y); });
        }
      case Binary::Pow:
        // x ** 2 (RMSNorm's square) as x * x: the correctly rounded square, vectorized, where
        // powf is called per element.
        if constexpr (std::is_floating_point_v<T>)
          if (b.numel() == 1 && b.data<T>()[0] == T(2))
            return apply_binary<T, T>(a, b, dt, name, [](T x, T) { return x * x; });
        return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return ipow(x, y); });
      case Binary::Max:
        if constexpr (std::is_floating_point_v<T>)
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return std::isnan(x) || std::isnan(y) ? std::numeric_limits<T>::quiet_NaN() : std::max(x, y); });
        else
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return std::max(x, y); });
      case Binary::Min:
        if constexpr (std::is_floating_point_v<T>)
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return std::isnan(x) || std::isnan(y) ? std::numeric_limits<T>::quiet_NaN() : std::min(x, y); });
        else
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return std::min(x, y); });
      case Binary::Mod:
        // Integer Mod follows Python (sign of the divisor).
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) {
            if (y == 0) return T(0);
            T r = static_cast<T>(x % y);
            if constexpr (std::is_signed_v<T>) if (r != 0 && ((r < 0) != (y < 0))) r = static_cast<T>(r + y);
            return r;
          });
        } else {
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return static_cast<T>(std::fmod(x, y)); });
        }
      case Binary::FMod:
        if constexpr (std::is_integral_v<T>)
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return y == 0 ? T(0) : static_cast<T>(x % y); });
        else
          return apply_binary<T, T>(a, b, dt, name, [](T x, T y) { return static_cast<T>(std::fmod(x, y)); });
      case Binary::Equal: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x == y; });
      case Binary::Less: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x < y; });
      case Binary::LessOrEqual: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x <= y; });
      case Binary::Greater: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x > y; });
      case Binary::GreaterOrEqual: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x >= y; });
      case Binary::And: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x && y; });
      case Binary::Or: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return x || y; });
      case Binary::Xor: return apply_binary<bool, T>(a, b, NF_DTYPE_BOOL, name, [](T x, T y) { return bool(x) != bool(y); });
    }
    throw KernelError("internal: unknown binary op");
  });
}

Tensor unary(Unary op, const Tensor& x) {
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    Tensor y(x.dtype(), x.dims());
    const T* a = x.data<T>();
    T* o = y.mut<T>();
    int64_t n = x.numel();
    auto each = [&](auto f) { for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(a[i])); };
    if constexpr (std::is_same_v<T, bool>) {
      if (op != Unary::Not) throw KernelError("unary op on bool tensor");
      each([](bool v) { return !v; });
    } else {
      using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
      switch (op) {
        case Unary::Neg: each([](T v) { return -v; }); break;
        case Unary::Abs: each([](T v) { if constexpr (std::is_unsigned_v<T>) return v; else return v < 0 ? -v : v; }); break;
        case Unary::Sqrt: each([](T v) { return std::sqrt(F(v)); }); break;
        case Unary::Reciprocal: each([](T v) { return F(1) / F(v); }); break;
        case Unary::Exp: each([](T v) { return std::exp(F(v)); }); break;
        case Unary::Log: each([](T v) { return std::log(F(v)); }); break;
        case Unary::Cos: each([](T v) { return std::cos(F(v)); }); break;
        case Unary::Sin: each([](T v) { return std::sin(F(v)); }); break;
        case Unary::Tanh: each([](T v) { return std::tanh(F(v)); }); break;
        case Unary::Erf: each([](T v) { return std::erf(F(v)); }); break;
        case Unary::Sigmoid: each([](T v) { return F(1) / (F(1) + std::exp(-F(v))); }); break;
        case Unary::Relu: each([](T v) { return v > T(0) ? v : T(0); }); break;
        case Unary::Floor: each([](T v) { return std::floor(F(v)); }); break;
        case Unary::Ceil: each([](T v) { return std::ceil(F(v)); }); break;
        case Unary::Sign: each([](T v) { return T(v > T(0)) - T(v < T(0)); }); break;
        // log(1 + e^v) without overflow: v + log(1 + e^-v) for v > 0.
        case Unary::Softplus:
          each([](T v) { return F(v) > F(0) ? F(v) + std::log1p(std::exp(-F(v))) : std::log1p(std::exp(F(v))); });
          break;
        case Unary::Not: throw KernelError("Not: input must be bool");
      }
    }
    return y;
  });
}

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  if (x.dtype() != NF_DTYPE_FLOAT32 && x.dtype() != NF_DTYPE_FLOAT64) throw KernelError("Gelu: input must be float");
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    Tensor y(x.dtype(), x.dims());
    if constexpr (std::is_floating_point_v<T>) {
      const T* a = x.data<T>();
      T* o = y.mut<T>();
      // The constants of the ONNX definition: 1/sqrt(2), and sqrt(2/pi) with 0.044715.
      const T inv_sqrt2 = T(0.70710678118654752440), sqrt_2_over_pi = T(0.79788456080286535588);
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        const T v = a[i];
        o[i] = tanh_approximation ? T(0.5) * v * (T(1) + std::tanh(sqrt_2_over_pi * (v + T(0.044715) * v * v * v)))
                                  : T(0.5) * v * (T(1) + std::erf(v * inv_sqrt2));
      }
    }
    return y;
  });
}

Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y) {
  if (cond.dtype() != NF_DTYPE_BOOL) throw KernelError("Where: condition must be bool");
  if (x.dtype() != y.dtype()) throw KernelError("Where: X and Y dtypes differ");
  Dims out = broadcast_shape(broadcast_shape(cond.dims(), x.dims(), "Where"), y.dims(), "Where");
  auto sc = broadcast_strides(cond.dims(), out), sx = broadcast_strides(x.dims(), out),
       sy = broadcast_strides(y.dims(), out);
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    Tensor r(x.dtype(), out);
    const bool* c = cond.data<bool>();
    const T* a = x.data<T>();
    const T* b = y.data<T>();
    T* o = r.mut<T>();
    int64_t n = numel(out);
    std::vector<int64_t> idx(out.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t ic = 0, ia = 0, ib = 0;
      for (size_t d = 0; d < out.size(); ++d) ic += idx[d] * sc[d], ia += idx[d] * sx[d], ib += idx[d] * sy[d];
      o[i] = c[ic] ? a[ia] : b[ib];
      for (size_t d = out.size(); d-- > 0;) {
        if (++idx[d] < out[d]) break;
        idx[d] = 0;
      }
    }
    return r;
  });
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) { man <<= 1; --exp; }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // round to nearest even
  return static_cast<uint16_t>(h);
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {
uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

// Float to integer: NaN/inf and out-of-range values saturate instead of being UB.
template <class D, class S>
D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) return v != S(0);
  else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    if (std::isnan(v)) return D(0);
    if (v <= static_cast<S>(std::numeric_limits<D>::lowest())) return std::numeric_limits<D>::lowest();
    if (v >= static_cast<S>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else return static_cast<D>(v);
}
}  // namespace

Tensor cast(const Tensor& x, nf_dtype to) {
  if (x.dtype() == to) return x;
  int64_t n = x.numel();
  // Half types go through float32.
  if (x.dtype() == NF_DTYPE_FLOAT16 || x.dtype() == NF_DTYPE_BFLOAT16) {
    Tensor f(NF_DTYPE_FLOAT32, x.dims());
    const uint16_t* s = x.data<uint16_t>();
    bool bf = x.dtype() == NF_DTYPE_BFLOAT16;
    for (int64_t i = 0; i < n; ++i) f.mut<float>()[i] = bf ? bf16_to_float(s[i]) : half_to_float(s[i]);
    return cast(f, to);
  }
  if (to == NF_DTYPE_FLOAT16 || to == NF_DTYPE_BFLOAT16) {
    Tensor f = cast(x, NF_DTYPE_FLOAT32);
    Tensor r(to, x.dims());
    bool bf = to == NF_DTYPE_BFLOAT16;
    for (int64_t i = 0; i < n; ++i) {
      float v = f.data<float>()[i];
      r.mut<uint16_t>()[i] = bf ? float_to_bf16(v) : float_to_half(v);
    }
    return r;
  }
  return dispatch(x.dtype(), [&](auto stag) -> Tensor {
    using S = decltype(stag);
    return dispatch(to, [&](auto dtag) -> Tensor {
      using D = decltype(dtag);
      Tensor r(to, x.dims());
      const S* s = x.data<S>();
      D* d = r.mut<D>();
      for (int64_t i = 0; i < n; ++i) d[i] = convert<D, S>(s[i]);
      return r;
    });
  });
}

Tensor clip(const Tensor& x, const Tensor* lo, const Tensor* hi) {
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw KernelError("Clip: bool input");
    } else {
      T l = lo ? lo->data<T>()[0] : std::numeric_limits<T>::lowest();
      T h = hi ? hi->data<T>()[0] : std::numeric_limits<T>::max();
      Tensor y(x.dtype(), x.dims());
      const T* a = x.data<T>();
      T* o = y.mut<T>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] < l ? l : (a[i] > h ? h : a[i]);
      return y;
    }
  });
}

}  // namespace nf::kernels
