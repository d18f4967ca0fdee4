// Layout-independent integer kernels (see exact.h): integer codes in, exact integer sums,
// one rounding at the end.
#include "npuforge/kernels/exact.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "npuforge/kernels/elementwise.h"
#include "npuforge/kernels/parallel.h"

namespace nf::kernels {
namespace {

// sum a[i] * q[i] over n terms, exactly (|a| < 2^16, so a product is < 2^23).
int64_t dot_scalar(const int32_t* a, const int8_t* q, int64_t n) {
  int64_t s0 = 0, s1 = 0;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) s0 += int64_t{a[i]} * q[i], s1 += int64_t{a[i + 1]} * q[i + 1];
  for (; i < n; ++i) s0 += int64_t{a[i]} * q[i];
  return s0 + s1;
}

__attribute__((target("avx2"))) int64_t dot_avx2(const int32_t* a, const int8_t* q, int64_t n) {
  int64_t total = 0, i = 0;
  while (i + 8 <= n) {
    // At most 128 products a lane before widening: 128 * 2^23 = 2^30 fits int32.
    __m256i acc = _mm256_setzero_si256();
    const int64_t end = std::min(n, i + 8 * 128);
    for (; i + 8 <= end; i += 8) {
      __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(w, x));
    }
    __m256i wide = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(acc)),
                                    _mm256_cvtepi32_epi64(_mm256_extracti128_si256(acc, 1)));
    alignas(32) int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), wide);
    total += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
  return total + dot_scalar(a + i, q + i, n - i);
}

// Signed codes of row n of an Int4 weight (format in linear.h: nibble = q + 8).
void int4_row(const PackedWeight& w, int64_t n, int8_t* out) {
  const uint8_t* row = w.q4.data() + n * w.row_bytes;
  for (int64_t k = 0; k < w.K; ++k) {
    uint8_t v = row[(k >> 4) * 8 + (k & 7)];
    out[k] = static_cast<int8_t>(((k & 15) < 8 ? (v & 15) : (v >> 4)) - 8);
  }
}

// The weight's zero points as integers (they are integer-valued by construction).
std::vector<int64_t> integer_zeros(const PackedWeight& w) {
  std::vector<int64_t> z(w.zeros.size());
  for (size_t i = 0; i < z.size(); ++i) {
    z[i] = std::llround(w.zeros[i]);
    if (static_cast<float>(z[i]) != w.zeros[i]) throw KernelError("linear_exact: weight zero point is not an integer");
  }
  return z;
}

int64_t bits_of(uint64_t v) { return v ? 64 - __builtin_clzll(v) : 0; }

// sum a[i] * b[i] in int64 (products of 24-bit codes; the caller bounds the sum).
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
int64_t dot_i64(const int32_t* a, const int32_t* b, int64_t n) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += int64_t{a[i]} * b[i];
  return s;
}

}  // namespace

void linear_exact(const int32_t* a, int64_t M, const PackedWeight& w, double a_scale, const float* bias, float* y,
                  int threads) {
  if (w.format != WeightFormat::Int8 && w.format != WeightFormat::Int4)
    throw KernelError("linear_exact: the weight is not packed as integers");
  const int64_t K = w.K, N = w.N, nb = w.n_blocks, bs = w.block_size;
  if (M <= 0) return;
  const std::vector<int64_t> zeros = integer_zeros(w);
  std::vector<int64_t> asum;  // per (row, block): for the zero points
  if (!zeros.empty()) {
    asum.assign(static_cast<size_t>(M * nb), 0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) asum[m * nb + k / bs] += a[m * K + k];
  }
  const bool simd = using_simd();
  parallel_for(N, threads, 8, [&](int64_t n0, int64_t n1) {
    std::vector<int8_t> unpacked(w.format == WeightFormat::Int4 ? static_cast<size_t>(K) : 0);
    for (int64_t n = n0; n < n1; ++n) {
      const int8_t* q = w.q8.data() + n * K;
      if (w.format == WeightFormat::Int4) {
        int4_row(w, n, unpacked.data());
        q = unpacked.data();
      }
      for (int64_t m = 0; m < M; ++m) {
        double acc = 0;  // blocks in a fixed order: the same sum whatever the layout
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t k0 = b * bs, len = std::min(K, k0 + bs) - k0;
          int64_t dot = simd ? dot_avx2(a + m * K + k0, q + k0, len) : dot_scalar(a + m * K + k0, q + k0, len);
          if (!zeros.empty()) dot += zeros[n * nb + b] * asum[m * nb + b];
          acc += static_cast<double>(w.scales[n * nb + b]) * static_cast<double>(dot);
        }
        y[m * N + n] = static_cast<float>(a_scale * acc) + (bias ? bias[n] : 0.f);
      }
    }
  });
}

Tensor linear_exact(const Tensor& x, float a_scale, const PackedWeight& w, const float* bias, int threads) {
  if (x.dtype() != NF_DTYPE_FLOAT32) throw KernelError("MatMul: packed weights need a float32 input");
  if (x.rank() < 1 || x.dims().back() != w.K)
    throw KernelError("MatMul: input " + dims_str(x.dims()) + " does not match weight [" + std::to_string(w.K) + "," +
                      std::to_string(w.N) + "]");
  if (!(a_scale > 0)) throw KernelError("linear_exact: activation scale must be positive");
  std::vector<int32_t> codes(static_cast<size_t>(x.numel()));
  const float* p = x.data<float>();
  const float inv = 1.f / a_scale;  // values are code * scale: within far less than 0.5 of the code
  for (size_t i = 0; i < codes.size(); ++i) {
    float c = std::nearbyint(p[i] * inv);
    if (!(std::fabs(c) < 65536.f)) throw KernelError("linear_exact: activation code out of the 16-bit range");
    codes[i] = static_cast<int32_t>(c);
  }
  Dims out = x.dims();
  out.back() = w.N;
  Tensor y(NF_DTYPE_FLOAT32, out);
  linear_exact(codes.data(), x.numel() / w.K, w, a_scale, bias, y.mut<float>(), threads);
  return y;
}

Tensor matmul_fixed(const Tensor& a_in, const Tensor& b_in, bool trans_b, float b_scale) {
  if (a_in.dtype() != NF_DTYPE_FLOAT32 || b_in.dtype() != NF_DTYPE_FLOAT32) throw KernelError("MatMul: float32 expected");
  if (a_in.rank() < 2 || b_in.rank() < 2) throw KernelError("MatMul: fixed-point form needs operands of rank >= 2");
  if (!(b_scale > 0)) throw KernelError("MatMul: grid scale must be positive");
  const Dims &da = a_in.dims(), &db = b_in.dims();
  const int64_t M = da[da.size() - 2], K = da.back(), N = trans_b ? db[db.size() - 2] : db.back();
  if ((trans_b ? db.back() : db[db.size() - 2]) != K)
    throw KernelError("MatMul: shapes " + dims_str(da) + " and " + dims_str(db) + " do not match");
  Dims ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
  Dims batch = broadcast_shape(ba, bb, "MatMul");
  auto sa = broadcast_strides(ba, batch), sb = broadcast_strides(bb, batch);
  const int64_t nbatch = numel(batch), nb_b = numel(bb);
  // b's codes, one row of K per output column.
  std::vector<int32_t> bc(static_cast<size_t>(nb_b * N * K));
  uint64_t bmax = 0;
  const float* pb = b_in.data<float>();
  // Values are code * scale: times 1/scale lands within far less than 0.5 of the code.
  const float inv = 1.f / b_scale;
  for (int64_t i = 0; i < nb_b; ++i)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        float v = pb[i * K * N + (trans_b ? n * K + k : k * N + n)];
        float c = std::nearbyint(v * inv);
        if (!(std::fabs(c) < 16777216.f)) throw KernelError("MatMul: grid code out of the 24-bit range");
        bc[(i * N + n) * K + k] = static_cast<int32_t>(c);
        bmax = std::max<uint64_t>(bmax, static_cast<uint64_t>(std::fabs(c)));
      }
  constexpr int kFracBits = 24;  // a's codes: |code| <= 2^24
  if (kFracBits + 1 + bits_of(bmax) + bits_of(static_cast<uint64_t>(K)) > 63)
    throw KernelError("MatMul: fixed-point sum of " + std::to_string(K) + " terms could overflow int64");
  Dims out = batch;
  out.push_back(M);
  out.push_back(N);
  Tensor y(NF_DTYPE_FLOAT32, out);
  const float* pa = a_in.data<float>();
  float* py = y.mut<float>();
  std::vector<int64_t> idx(batch.size(), 0);
  std::vector<int32_t> ac(static_cast<size_t>(K));
  for (int64_t i = 0; i < nbatch; ++i) {
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < batch.size(); ++d) ia += idx[d] * sa[d], ib += idx[d] * sb[d];
    for (int64_t m = 0; m < M; ++m) {
      const float* row = pa + (ia * M + m) * K;
      float amax = 0;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
      float* yr = py + (i * M + m) * N;
      if (!(amax > 0) || !std::isfinite(amax)) {
        if (!std::isfinite(amax)) throw KernelError("MatMul: non-finite input");
        std::fill(yr, yr + N, 0.f);
        continue;
      }
      int e;
      std::frexp(amax, &e);  // amax < 2^e
      for (int64_t k = 0; k < K; ++k) ac[k] = static_cast<int32_t>(std::nearbyint(std::ldexp(row[k], kFracBits - e)));
      const double unit = std::ldexp(static_cast<double>(b_scale), e - kFracBits);
      for (int64_t n = 0; n < N; ++n) {
        const int32_t* bn = bc.data() + (ib * N + n) * K;
        yr[n] = static_cast<float>(static_cast<double>(dot_i64(ac.data(), bn, K)) * unit);
      }
    }
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

Tensor softmax_fixed(const Tensor& x, int64_t axis) {
  if (x.dtype() != NF_DTYPE_FLOAT32) throw KernelError("Softmax: only float32 is supported");
  const int64_t ax = norm_axis(axis, x.rank(), "Softmax");
  int64_t outer = 1, n = x.dim(ax), inner = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(x.rank()); ++i)
    if (i < ax) outer *= x.dim(i);
    else if (i > ax) inner *= x.dim(i);
  if (bits_of(static_cast<uint64_t>(n)) > 22) throw KernelError("Softmax: axis too long for the fixed-point sum");
  constexpr int kFracBits = 40;  // each term (<= 1) in 2^-40 units; 2^22 terms fit int64
  Tensor y(NF_DTYPE_FLOAT32, x.dims());
  const float* p = x.data<float>();
  float* q = y.mut<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const float* a = p + o * n * inner + in;
      float* b = q + o * n * inner + in;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, a[i * inner]);
      int64_t sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        float e = std::exp(a[i * inner] - mx);
        b[i * inner] = e;
        sum += std::llround(std::ldexp(static_cast<double>(e), kFracBits));
      }
      const double denom = std::ldexp(static_cast<double>(sum), -kFracBits);
      for (int64_t i = 0; i < n; ++i) b[i * inner] = static_cast<float>(b[i * inner] / denom);
    }
  return y;
}

}  // namespace nf::kernels
