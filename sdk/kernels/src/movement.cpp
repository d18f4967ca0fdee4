#include "npuforge/kernels/movement.h"
#include "npuforge/kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace nf::kernels {
namespace {

// Walks every index of `dims` in row-major order, calling f(flat, idx).
template <class F>
void for_each_index(const Dims& dims, F&& f) {
  int64_t n = numel(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(i, idx);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t fix_index(int64_t i, int64_t n, const char* op) {
  if (i < -n || i >= n) throw KernelError(std::string(op) + ": index " + std::to_string(i) + " out of range [" +
                                          std::to_string(-n) + ", " + std::to_string(n) + ")");
  return i < 0 ? i + n : i;
}

template <class T>
void apply_reduce(T& dst, T v, ScatterReduce r) {
  switch (r) {
    case ScatterReduce::None: dst = v; break;
    case ScatterReduce::Add: dst = static_cast<T>(dst + v); break;
    case ScatterReduce::Mul: dst = static_cast<T>(dst * v); break;
    case ScatterReduce::Max: dst = std::max(dst, v); break;
    case ScatterReduce::Min: dst = std::min(dst, v); break;
  }
}

}  // namespace

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm_in) {
  const size_t r = x.rank();
  std::vector<int64_t> perm = perm_in;
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
  if (perm.size() != r) throw KernelError("Transpose: perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
  Dims out(r);
  auto st = strides_of(x.dims());
  std::vector<int64_t> src_st(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t p = norm_axis(perm[i], static_cast<int64_t>(r), "Transpose");
    out[i] = x.dim(static_cast<size_t>(p));
    src_st[i] = st[static_cast<size_t>(p)];
  }
  Tensor y(x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  // Innermost output axis as a strided copy; contiguous when it is also innermost in x.
  int64_t inner = r ? out[r - 1] : 1, inner_st = r ? src_st[r - 1] : 1;
  Dims outer(out.begin(), out.end() - (r ? 1 : 0));
  int64_t o = 0;
  for_each_index(outer, [&](int64_t, const std::vector<int64_t>& idx) {
    int64_t src = 0;
    for (size_t i = 0; i < idx.size(); ++i) src += idx[i] * src_st[i];
    if (inner_st == 1) std::memcpy(d + o * es, s + src * es, inner * es);
    else if (es == 4)
      for (int64_t j = 0; j < inner; ++j) reinterpret_cast<uint32_t*>(d)[o + j] = reinterpret_cast<const uint32_t*>(s)[src + j * inner_st];
    else
      for (int64_t j = 0; j < inner; ++j) std::memcpy(d + (o + j) * es, s + (src + j * inner_st) * es, es);
    o += inner;
  });
  return y;
}

Dims concat_shape(const std::vector<const Tensor*>& xs, int64_t axis) {
  if (xs.empty()) throw KernelError("Concat: no inputs");
  const Tensor& f = *xs[0];
  int64_t ax = norm_axis(axis, f.rank(), "Concat");
  Dims out = f.dims();
  out[ax] = 0;
  for (const Tensor* t : xs) {
    if (t->dtype() != f.dtype()) throw KernelError("Concat: input dtypes differ");
    if (t->rank() != f.rank()) throw KernelError("Concat: input ranks differ");
    for (size_t i = 0; i < f.rank(); ++i)
      if (static_cast<int64_t>(i) != ax && t->dim(i) != f.dim(i))
        throw KernelError("Concat: shapes " + dims_str(f.dims()) + " and " + dims_str(t->dims()) + " differ off axis " + std::to_string(ax));
    out[ax] += t->dim(ax);
  }
  return out;
}

void concat_into(const std::vector<const Tensor*>& xs, int64_t axis, Tensor& y) {
  Dims out = concat_shape(xs, axis);
  if (y.dims() != out || y.dtype() != xs[0]->dtype()) throw KernelError("Concat: output buffer does not match");
  int64_t ax = norm_axis(axis, out.size(), "Concat");
  const size_t es = dtype_size(y.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < ax; ++i) outer *= out[i];
  for (size_t i = ax + 1; i < out.size(); ++i) inner *= out[i];
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  const size_t row = static_cast<size_t>(out[ax] * inner) * es;
  size_t off = 0;
  for (const Tensor* t : xs) {
    size_t chunk = static_cast<size_t>(t->dim(ax) * inner) * es;
    const uint8_t* s = static_cast<const uint8_t*>(t->raw());
    if (chunk)
      for (int64_t o = 0; o < outer; ++o) std::memcpy(d + o * row + off, s + o * chunk, chunk);
    off += chunk;
  }
}

Tensor concat(const std::vector<const Tensor*>& xs, int64_t axis) {
  Dims out = concat_shape(xs, axis);
  Tensor y(xs[0]->dtype(), out);
  concat_into(xs, axis, y);
  return y;
}

std::vector<Tensor> split(const Tensor& x, int64_t axis, const std::vector<int64_t>& sizes) {
  int64_t ax = norm_axis(axis, x.rank(), "Split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != x.dim(ax)) throw KernelError("Split: sizes sum to " + std::to_string(total) + ", axis has " + std::to_string(x.dim(ax)));
  std::vector<Tensor> r;
  int64_t start = 0;
  for (int64_t s : sizes) {
    r.push_back(slice(x, {start}, {start + s}, {ax}, {1}));
    start += s;
  }
  return r;
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
             const std::vector<int64_t>& axes_in, const std::vector<int64_t>& steps_in) {
  const int64_t r = static_cast<int64_t>(x.rank());
  std::vector<int64_t> st(r, 0), step(r, 1);
  Dims out = x.dims();
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = norm_axis(axes_in.empty() ? static_cast<int64_t>(i) : axes_in[i], r, "Slice");
    int64_t n = x.dim(a), s = starts[i], e = ends[i], k = steps_in.empty() ? 1 : steps_in[i];
    if (k == 0) throw KernelError("Slice: step 0");
    if (s < 0) s += n;
    if (e < 0) e += n;
    if (k > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      out[a] = e > s ? (e - s + k - 1) / k : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      out[a] = s > e ? (s - e + (-k) - 1) / (-k) : 0;
    }
    st[a] = s;
    step[a] = k;
  }
  Tensor y(x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  auto xs = strides_of(x.dims());
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  int64_t inner = r ? out[r - 1] : 1;
  bool contiguous_inner = r == 0 || step[r - 1] == 1;
  Dims outer(out.begin(), out.end() - (r ? 1 : 0));
  if (numel(out) == 0) return y;
  int64_t o = 0;
  for_each_index(outer, [&](int64_t, const std::vector<int64_t>& idx) {
    int64_t src = r ? st[r - 1] * xs[r - 1] : 0;
    for (size_t i = 0; i < idx.size(); ++i) src += (st[i] + idx[i] * step[i]) * xs[i];
    if (contiguous_inner) std::memcpy(d + o * es, s + src * es, inner * es);
    else
      for (int64_t j = 0; j < inner; ++j) std::memcpy(d + (o + j) * es, s + (src + j * step[r - 1]) * es, es);
    o += inner;
  });
  return y;
}

Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis) {
  int64_t ax = norm_axis(axis, x.rank(), "Gather");
  std::vector<int64_t> idx = indices.to_int64s();
  int64_t n = x.dim(ax), outer = 1, inner = 1;
  for (int64_t i = 0; i < ax; ++i) outer *= x.dim(i);
  for (size_t i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  Dims out(x.dims().begin(), x.dims().begin() + ax);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), x.dims().begin() + ax + 1, x.dims().end());
  Tensor y(x.dtype(), out);
  const size_t es = dtype_size(x.dtype()), chunk = static_cast<size_t>(inner) * es;
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  const int64_t ni = static_cast<int64_t>(idx.size());
  for (int64_t i = 0; i < ni; ++i) idx[i] = fix_index(idx[i], n, "Gather");
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < ni; ++i) std::memcpy(d + (o * ni + i) * chunk, s + (o * n + idx[i]) * chunk, chunk);
  return y;
}

Tensor gather_elements(const Tensor& x, const Tensor& indices, int64_t axis) {
  int64_t ax = norm_axis(axis, x.rank(), "GatherElements");
  if (indices.rank() != x.rank()) throw KernelError("GatherElements: indices rank differs from data rank");
  std::vector<int64_t> idx = indices.to_int64s();
  auto xs = strides_of(x.dims());
  Tensor y(x.dtype(), indices.dims());
  const size_t es = dtype_size(x.dtype());
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  for_each_index(indices.dims(), [&](int64_t i, const std::vector<int64_t>& at) {
    int64_t src = 0;
    for (size_t k = 0; k < at.size(); ++k)
      src += (static_cast<int64_t>(k) == ax ? fix_index(idx[i], x.dim(ax), "GatherElements") : at[k]) * xs[k];
    std::memcpy(d + i * es, s + src * es, es);
  });
  return y;
}

Tensor one_hot(const Tensor& indices, int64_t depth, const Tensor& values, int64_t axis) {
  if (depth < 1) throw KernelError("OneHot: depth must be positive");
  if (values.numel() != 2) throw KernelError("OneHot: values must hold [off, on]");
  const int64_t rank = static_cast<int64_t>(indices.rank()) + 1;
  const int64_t ax = norm_axis(axis, static_cast<size_t>(rank), "OneHot");
  Dims out_dims = indices.dims();
  out_dims.insert(out_dims.begin() + ax, depth);
  // Non-integer indices are truncated, as the ONNX spec says.
  std::vector<int64_t> idx = cast(indices, NF_DTYPE_INT64).to_int64s();
  // Index i = (outer, inner) of the indices; the output is [outer, depth, inner].
  int64_t inner = 1;
  for (size_t k = static_cast<size_t>(ax); k < indices.rank(); ++k) inner *= indices.dim(k);
  Tensor y(values.dtype(), out_dims);
  const size_t es = dtype_size(values.dtype());
  const uint8_t* v = static_cast<const uint8_t*>(values.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  for (int64_t o = 0; o < y.numel(); ++o) std::memcpy(d + o * es, v, es);
  for (int64_t i = 0; i < static_cast<int64_t>(idx.size()); ++i) {
    int64_t at = idx[static_cast<size_t>(i)] < 0 ? idx[static_cast<size_t>(i)] + depth : idx[static_cast<size_t>(i)];
    if (at < 0 || at >= depth) continue;
    const int64_t outer = i / inner, in = i % inner;
    std::memcpy(d + ((outer * depth + at) * inner + in) * es, v + es, es);
  }
  return y;
}

Tensor scatter_elements(const Tensor& x, const Tensor& indices, const Tensor& updates, int64_t axis,
                        ScatterReduce reduction) {
  int64_t ax = norm_axis(axis, x.rank(), "ScatterElements");
  if (updates.dims() != indices.dims()) throw KernelError("ScatterElements: updates and indices shapes differ");
  std::vector<int64_t> idx = indices.to_int64s();
  auto xs = strides_of(x.dims());
  Tensor y = x.clone();
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = y.mut<T>();
    const T* u = updates.data<T>();
    for_each_index(indices.dims(), [&](int64_t i, const std::vector<int64_t>& at) {
      int64_t dst = 0;
      for (size_t k = 0; k < at.size(); ++k)
        dst += (static_cast<int64_t>(k) == ax ? fix_index(idx[i], x.dim(ax), "ScatterElements") : at[k]) * xs[k];
      apply_reduce(d[dst], u[i], reduction);
    });
  });
  return y;
}

Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, ScatterReduce reduction) {
  if (indices.rank() < 1) throw KernelError("ScatterND: indices must have rank >= 1");
  int64_t q = indices.dims().back();
  if (q > static_cast<int64_t>(x.rank())) throw KernelError("ScatterND: index depth exceeds data rank");
  std::vector<int64_t> idx = indices.to_int64s();
  auto xs = strides_of(x.dims());
  int64_t slice_n = 1;
  for (size_t i = q; i < x.rank(); ++i) slice_n *= x.dim(i);
  int64_t n_upd = static_cast<int64_t>(idx.size()) / std::max<int64_t>(q, 1);
  if (q == 0) n_upd = numel(Dims(indices.dims().begin(), indices.dims().end() - 1));
  Tensor y = x.clone();
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = y.mut<T>();
    const T* u = updates.data<T>();
    for (int64_t i = 0; i < n_upd; ++i) {
      int64_t dst = 0;
      for (int64_t k = 0; k < q; ++k) dst += fix_index(idx[i * q + k], x.dim(k), "ScatterND") * xs[k];
      for (int64_t j = 0; j < slice_n; ++j) apply_reduce(d[dst + j], u[i * slice_n + j], reduction);
    }
  });
  return y;
}

Tensor expand(const Tensor& x, const Dims& shape) {
  Dims out = broadcast_shape(x.dims(), shape, "Expand");
  if (out == x.dims()) return x;
  auto st = broadcast_strides(x.dims(), out);
  Tensor y(x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  size_t r = out.size();
  int64_t inner = r ? out[r - 1] : 1, inner_st = r ? st[r - 1] : 0;
  Dims outer(out.begin(), out.end() - (r ? 1 : 0));
  int64_t o = 0;
  for_each_index(outer, [&](int64_t, const std::vector<int64_t>& idx) {
    int64_t src = 0;
    for (size_t i = 0; i < idx.size(); ++i) src += idx[i] * st[i];
    if (inner_st == 1) std::memcpy(d + o * es, s + src * es, inner * es);
    else
      for (int64_t j = 0; j < inner; ++j) std::memcpy(d + (o + j) * es, s + src * es, es);
    o += inner;
  });
  return y;
}

Tensor tile(const Tensor& x, const std::vector<int64_t>& repeats) {
  if (repeats.size() != x.rank()) throw KernelError("Tile: repeats length differs from rank");
  Dims out = x.dims();
  for (size_t i = 0; i < out.size(); ++i) out[i] *= repeats[i];
  Tensor y(x.dtype(), out);
  auto xs = strides_of(x.dims());
  const size_t es = dtype_size(x.dtype());
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  for_each_index(out, [&](int64_t i, const std::vector<int64_t>& at) {
    int64_t src = 0;
    for (size_t k = 0; k < at.size(); ++k) src += (at[k] % x.dim(k)) * xs[k];
    std::memcpy(d + i * es, s + src * es, es);
  });
  return y;
}

Tensor trilu(const Tensor& x, int64_t k, bool upper) {
  if (x.rank() < 2) throw KernelError("Trilu: input must have rank >= 2");
  int64_t R = x.dim(x.rank() - 2), C = x.dim(x.rank() - 1), B = x.numel() / std::max<int64_t>(R * C, 1);
  Tensor y = Tensor::zeros(x.dtype(), x.dims());
  const size_t es = dtype_size(x.dtype());
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        bool keep = upper ? j - i >= k : j - i <= k;
        if (keep) std::memcpy(d + ((b * R + i) * C + j) * es, s + ((b * R + i) * C + j) * es, es);
      }
  return y;
}

Tensor range(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  return dispatch(start.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw KernelError("Range: bool input");
    } else {
      T s = start.data<T>()[0], l = limit.data<T>()[0], dl = delta.data<T>()[0];
      if (dl == T(0)) throw KernelError("Range: delta is 0");
      double n = std::ceil((static_cast<double>(l) - static_cast<double>(s)) / static_cast<double>(dl));
      int64_t count = std::max<int64_t>(static_cast<int64_t>(n), 0);
      Tensor y(start.dtype(), {count});
      for (int64_t i = 0; i < count; ++i) y.mut<T>()[i] = static_cast<T>(s + static_cast<T>(i) * dl);
      return y;
    }
  });
}

Tensor pad_constant(const Tensor& x, const std::vector<int64_t>& pads, const Tensor* value) {
  const size_t r = x.rank();
  if (pads.size() != 2 * r) throw KernelError("Pad: pads must have 2 * rank entries");
  Dims out(r);
  for (size_t i = 0; i < r; ++i) out[i] = x.dim(i) + pads[i] + pads[i + r];
  Tensor y = Tensor::zeros(x.dtype(), out);
  const size_t es = dtype_size(x.dtype());
  uint8_t* d = static_cast<uint8_t*>(y.mut_raw());
  if (value && value->numel() > 0)
    for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(d + i * es, value->raw(), es);
  auto ys = strides_of(out);
  const uint8_t* s = static_cast<const uint8_t*>(x.raw());
  for_each_index(x.dims(), [&](int64_t i, const std::vector<int64_t>& at) {
    int64_t dst = 0;
    for (size_t k = 0; k < r; ++k) {
      int64_t p = at[k] + pads[k];
      if (p < 0 || p >= out[k]) return;
      dst += p * ys[k];
    }
    std::memcpy(d + dst * es, s + i * es, es);
  });
  return y;
}

}  // namespace nf::kernels
