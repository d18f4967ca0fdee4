#include "npuforge/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace nf::kernels {
namespace {

// Splits a tensor around one axis: [outer, n, inner].
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Dims& d, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(d.size()); ++i) {
    if (i < axis) s.outer *= d[i];
    else if (i == axis) s.n = d[i];
    else s.inner *= d[i];
  }
  return s;
}

}  // namespace

Tensor reduce(Reduce op, const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  const int64_t r = static_cast<int64_t>(x.rank());
  std::vector<bool> red(static_cast<size_t>(r), axes.empty());
  for (int64_t a : axes) red[norm_axis(a, r, "Reduce")] = true;
  Dims out_keep = x.dims(), out;
  for (int64_t i = 0; i < r; ++i) {
    if (red[i]) out_keep[i] = 1;
    if (!red[i] || keepdims) out.push_back(out_keep[i]);
  }
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    if constexpr (std::is_same_v<T, bool>) {
      throw KernelError("Reduce on bool tensor");
    } else {
      int64_t n_out = numel(out_keep), n_in = x.numel();
      Acc init = op == Reduce::Max ? static_cast<Acc>(std::numeric_limits<T>::lowest())
                 : op == Reduce::Min ? static_cast<Acc>(std::numeric_limits<T>::max())
                 : op == Reduce::Prod ? Acc(1) : Acc(0);
      if (op == Reduce::Max && std::is_floating_point_v<T>) init = -std::numeric_limits<Acc>::infinity();
      if (op == Reduce::Min && std::is_floating_point_v<T>) init = std::numeric_limits<Acc>::infinity();
      std::vector<Acc> acc(static_cast<size_t>(n_out), init);
      auto so = broadcast_strides(out_keep, x.dims());
      const T* p = x.data<T>();
      std::vector<int64_t> idx(static_cast<size_t>(r), 0);
      int64_t o = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        Acc v = static_cast<Acc>(p[i]);
        Acc& a = acc[o];
        switch (op) {
          case Reduce::Sum: case Reduce::Mean: a += v; break;
          case Reduce::Max: a = std::max(a, v); break;
          case Reduce::Min: a = std::min(a, v); break;
          case Reduce::Prod: a *= v; break;
          case Reduce::SumSquare: case Reduce::L2: a += v * v; break;
        }
        for (int64_t d = r - 1; d >= 0; --d) {
          o += so[d];
          if (++idx[d] < x.dim(d)) break;
          o -= so[d] * idx[d];
          idx[d] = 0;
        }
      }
      int64_t count = n_out ? n_in / n_out : 0;
      Tensor y(x.dtype(), out);
      for (int64_t i = 0; i < n_out; ++i) {
        Acc a = acc[i];
        if (op == Reduce::Mean) a = count ? static_cast<Acc>(a / static_cast<Acc>(count)) : a;
        if (op == Reduce::L2) a = static_cast<Acc>(std::sqrt(static_cast<double>(a)));
        y.mut<T>()[i] = static_cast<T>(a);
      }
      return y;
    }
  });
}

Tensor softmax(const Tensor& x, int64_t axis, bool log) {
  if (x.dtype() != NF_DTYPE_FLOAT32) throw KernelError("Softmax: only float32 is supported");
  AxisSplit s = split_at(x.dims(), norm_axis(axis, x.rank(), "Softmax"));
  Tensor y(NF_DTYPE_FLOAT32, x.dims());
  const float* p = x.data<float>();
  float* q = y.mut<float>();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t in = 0; in < s.inner; ++in) {
      const float* a = p + o * s.n * s.inner + in;
      float* b = q + o * s.n * s.inner + in;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < s.n; ++i) mx = std::max(mx, a[i * s.inner]);
      float sum = 0;
      for (int64_t i = 0; i < s.n; ++i) sum += (b[i * s.inner] = std::exp(a[i * s.inner] - mx));
      if (log) {
        float ls = std::log(sum);
        for (int64_t i = 0; i < s.n; ++i) b[i * s.inner] = a[i * s.inner] - mx - ls;
      } else {
        float inv = 1.f / sum;
        for (int64_t i = 0; i < s.n; ++i) b[i * s.inner] *= inv;
      }
    }
  return y;
}

LayerNormResult layer_norm(const Tensor& x, const Tensor& scale, const Tensor* bias, int64_t axis, float epsilon) {
  if (x.dtype() != NF_DTYPE_FLOAT32) throw KernelError("LayerNormalization: only float32 is supported");
  int64_t a = norm_axis(axis, x.rank(), "LayerNormalization");
  int64_t rows = 1, cols = 1;
  Dims stat = x.dims();
  for (int64_t i = 0; i < static_cast<int64_t>(x.rank()); ++i) {
    if (i < a) rows *= x.dim(i);
    else cols *= x.dim(i), stat[i] = 1;
  }
  Dims norm_dims(x.dims().begin() + a, x.dims().end());
  auto ss = broadcast_strides(scale.dims(), norm_dims);
  std::vector<int64_t> sb;
  if (bias) sb = broadcast_strides(bias->dims(), norm_dims);
  // Flat index within the normalized block -> index into a broadcast scale/bias.
  auto map = [&](const std::vector<int64_t>& st, int64_t j) {
    int64_t off = 0;
    for (size_t d = norm_dims.size(); d-- > 0;) {
      off += (j % norm_dims[d]) * st[d];
      j /= norm_dims[d];
    }
    return off;
  };
  bool plain_scale = scale.numel() == cols, plain_bias = !bias || bias->numel() == cols;
  LayerNormResult r{Tensor(NF_DTYPE_FLOAT32, x.dims()), Tensor(NF_DTYPE_FLOAT32, stat), Tensor(NF_DTYPE_FLOAT32, stat)};
  const float* p = x.data<float>();
  const float* g = scale.data<float>();
  const float* b = bias ? bias->data<float>() : nullptr;
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = p + i * cols;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += xi[j];
    mean /= static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) var += (xi[j] - mean) * (xi[j] - mean);
    var /= static_cast<double>(cols);
    float inv = static_cast<float>(1.0 / std::sqrt(var + epsilon));
    float* yi = r.y.mut<float>() + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      float gj = plain_scale ? g[j] : g[map(ss, j)];
      float bj = b ? (plain_bias ? b[j] : b[map(sb, j)]) : 0.f;
      yi[j] = static_cast<float>(xi[j] - mean) * inv * gj + bj;
    }
    r.mean.mut<float>()[i] = static_cast<float>(mean);
    r.inv_std_dev.mut<float>()[i] = inv;
  }
  return r;
}

Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  AxisSplit s = split_at(x.dims(), norm_axis(axis, x.rank(), "CumSum"));
  return dispatch(x.dtype(), [&](auto tag) -> Tensor {
    using T = decltype(tag);
    Tensor y(x.dtype(), x.dims());
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t in = 0; in < s.inner; ++in) {
        const T* a = x.data<T>() + o * s.n * s.inner + in;
        T* b = y.mut<T>() + o * s.n * s.inner + in;
        T acc{};
        for (int64_t t = 0; t < s.n; ++t) {
          int64_t i = reverse ? s.n - 1 - t : t;
          if (exclusive) { b[i * s.inner] = acc; acc = static_cast<T>(acc + a[i * s.inner]); }
          else { acc = static_cast<T>(acc + a[i * s.inner]); b[i * s.inner] = acc; }
        }
      }
    return y;
  });
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest, bool sorted) {
  (void)sorted;  // always sorted: a valid order for unsorted too
  int64_t ax = norm_axis(axis, x.rank(), "TopK");
  AxisSplit s = split_at(x.dims(), ax);
  if (k < 0 || k > s.n) throw KernelError("TopK: k=" + std::to_string(k) + " out of range");
  Dims out = x.dims();
  out[ax] = k;
  Tensor idx_t(NF_DTYPE_INT64, out);
  Tensor val_t(x.dtype(), out);
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<int64_t> order(static_cast<size_t>(s.n));
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t in = 0; in < s.inner; ++in) {
        const T* a = x.data<T>() + o * s.n * s.inner + in;
        std::iota(order.begin(), order.end(), 0);
        auto cmp = [&](int64_t i, int64_t j) {
          T u = a[i * s.inner], v = a[j * s.inner];
          if (u != v) return largest ? u > v : u < v;
          return i < j;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
        for (int64_t t = 0; t < k; ++t) {
          int64_t dst = o * k * s.inner + t * s.inner + in;
          idx_t.mut<int64_t>()[dst] = order[t];
          val_t.mut<T>()[dst] = a[order[t] * s.inner];
        }
      }
  });
  return {val_t, idx_t};
}

Tensor arg_reduce(const Tensor& x, int64_t axis, bool keepdims, bool is_max, bool select_last_index) {
  int64_t ax = norm_axis(axis, x.rank(), is_max ? "ArgMax" : "ArgMin");
  AxisSplit s = split_at(x.dims(), ax);
  Dims out = x.dims();
  if (keepdims) out[ax] = 1;
  else out.erase(out.begin() + ax);
  Tensor y(NF_DTYPE_INT64, out);
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t in = 0; in < s.inner; ++in) {
        const T* a = x.data<T>() + o * s.n * s.inner + in;
        int64_t best = 0;
        for (int64_t i = 1; i < s.n; ++i) {
          T u = a[i * s.inner], v = a[best * s.inner];
          bool better = is_max ? (u > v || (select_last_index && u == v)) : (u < v || (select_last_index && u == v));
          if (better) best = i;
        }
        y.mut<int64_t>()[o * s.inner + in] = best;
      }
  });
  return y;
}

}  // namespace nf::kernels
