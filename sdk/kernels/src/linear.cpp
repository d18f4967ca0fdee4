// Packing and quantization of linear weights, and the dispatch between the streaming GEMV
// kernels (small M: decode) and the GEMM on packed rows, integer weights dequantized a tile
// at a time (large M: prefill).
#include "npuforge/kernels/linear.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "gemv.h"
#include "npuforge/kernels/matmul.h"
#include "npuforge/kernels/parallel.h"

namespace nf::kernels {
namespace {

std::atomic<Simd> g_simd_cap{Simd::kAvx512};

// Element (n, k) of the source matrix in either layout.
inline float at(const float* w, int64_t K, int64_t N, bool nk, int64_t n, int64_t k) {
  return nk ? w[n * K + k] : w[k * N + n];
}

void check_dims(int64_t K, int64_t N, int64_t block_size) {
  if (K <= 0 || N <= 0) throw KernelError("linear: empty weight");
  if (block_size <= 0) throw KernelError("linear: block size must be positive");
}

PackedWeight layout(WeightFormat f, int64_t K, int64_t N, int64_t block_size) {
  PackedWeight p;
  p.format = f;
  p.K = K;
  p.N = N;
  p.block_size = std::min(block_size, K);
  p.n_blocks = (K + p.block_size - 1) / p.block_size;
  p.scales.assign(static_cast<size_t>(N * p.n_blocks), 0.f);
  if (f == WeightFormat::Int8) p.q8.assign(static_cast<size_t>(N * K), 0);
  if (f == WeightFormat::Int4) {
    p.row_bytes = (K + 15) / 16 * 8;
    p.q4.assign(static_cast<size_t>(N * p.row_bytes), 0x88);  // q = 0 in both nibbles
  }
  return p;
}

void store(PackedWeight& p, int64_t n, int64_t k, int q) {
  if (p.format == WeightFormat::Int8) {
    p.q8[n * p.K + k] = static_cast<int8_t>(q);
    return;
  }
  uint8_t& b = p.q4[n * p.row_bytes + (k / 16) * 8 + (k % 8)];
  uint8_t v = static_cast<uint8_t>(q + 8);
  b = (k % 16) < 8 ? static_cast<uint8_t>((b & 0xf0) | v) : static_cast<uint8_t>((b & 0x0f) | (v << 4));
}

int load(const PackedWeight& p, int64_t n, int64_t k) {
  if (p.format == WeightFormat::Int8) return p.q8[n * p.K + k];
  uint8_t b = p.q4[n * p.row_bytes + (k / 16) * 8 + (k % 8)];
  return ((k % 16) < 8 ? (b & 15) : (b >> 4)) - 8;
}

// Inputs [k0, k1) of row n of a packed integer weight as floats: blocks of 16 inputs (one
// int4 chunk) in AVX2 when they lie in one block, the rest one by one. k0 is a multiple of 16.
__attribute__((target("avx2,fma"))) void dequant_row_avx2(const PackedWeight& w, int64_t n, int64_t k0, int64_t k1,
                                                          float* out, int64_t& k) {
  const float* sc = w.scales.data() + n * w.n_blocks;
  const float* zp = w.zeros.empty() ? nullptr : w.zeros.data() + n * w.n_blocks;
  for (; k + 16 <= k1 && k / w.block_size == (k + 15) / w.block_size; k += 16) {
    const int64_t b = k / w.block_size;
    __m256i q0, q1;
    if (w.format == WeightFormat::Int8) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q8.data() + n * w.K + k));
      q0 = _mm256_cvtepi8_epi32(v), q1 = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v));
    } else {  // 8 bytes: inputs 0-7 in the low nibbles, 8-15 in the high ones, as q + 8
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.q4.data() + n * w.row_bytes + k / 2));
      const __m128i nib = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
      q0 = _mm256_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(v, nib), eight));
      q1 = _mm256_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), nib), eight));
    }
    const __m256 s = _mm256_set1_ps(sc[b]), z = _mm256_set1_ps(zp ? zp[b] : 0.f);
    _mm256_storeu_ps(out + k - k0, _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(q0), z), s));
    _mm256_storeu_ps(out + k - k0 + 8, _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(q1), z), s));
  }
}

void dequant_row(const PackedWeight& w, int64_t n, int64_t k0, int64_t k1, float* out) {
  int64_t k = k0;
  if (using_simd()) dequant_row_avx2(w, n, k0, k1, out, k);
  for (; k < k1; ++k) {
    const size_t i = static_cast<size_t>(n * w.n_blocks + k / w.block_size);
    out[k - k0] = (static_cast<float>(load(w, n, k)) + (w.zeros.empty() ? 0.f : w.zeros[i])) * w.scales[i];
  }
}

PackedWeight quantize_sym(WeightFormat f, const float* w, int64_t K, int64_t N, int64_t block_size, bool nk) {
  check_dims(K, N, block_size);
  PackedWeight p = layout(f, K, N, block_size);
  const int qmax = f == WeightFormat::Int8 ? 127 : 7, qmin = f == WeightFormat::Int8 ? -127 : -8;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      int64_t k0 = b * p.block_size, k1 = std::min(K, k0 + p.block_size);
      float amax = 0;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(at(w, K, N, nk, n, k)));
      float scale = amax > 0 ? amax / qmax : 1.f;
      p.scales[n * p.n_blocks + b] = scale;
      for (int64_t k = k0; k < k1; ++k) {
        float q = std::nearbyint(at(w, K, N, nk, n, k) / scale);
        store(p, n, k, static_cast<int>(std::clamp(q, float(qmin), float(qmax))));
      }
    }
  return p;
}

void add_bias(float* y, int64_t M, int64_t N, const float* bias) {
  if (bias)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

}  // namespace

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
Simd simd_level() {
  static const Simd cpu = detail::cpu_has_avx512() ? Simd::kAvx512 : cpu_has_avx2() ? Simd::kAvx2 : Simd::kScalar;
  return std::min(cpu, g_simd_cap.load());
}
void limit_simd(Simd max) { g_simd_cap = max; }
const char* simd_name(Simd s) { return s == Simd::kAvx512 ? "avx512" : s == Simd::kAvx2 ? "avx2" : "scalar"; }
bool using_simd() { return simd_level() != Simd::kScalar; }

const char* gemv_kernel(const PackedWeight& w) {
  const bool simd = using_simd();
  if (detail::uses_integer_dot(w, simd)) return "integer dot (AVX-512 VNNI)";
  if (detail::uses_integer_dot_avx2(w, simd)) return "integer dot (AVX2)";
  if (w.format == WeightFormat::F32 && simd_level() == Simd::kAvx512) return "AVX-512";
  return simd ? "AVX2" : "scalar";
}

size_t PackedWeight::weight_bytes() const {
  const size_t viewed = f32_view ? static_cast<size_t>(K * N) : 0;
  return (f32.size() + viewed) * 4 + q8.size() + q4.size() + scales.size() * 4 + zeros.size() * 4;
}

PackedWeight view_f32_nk(const float* w, int64_t K, int64_t N, std::shared_ptr<const void> keep) {
  check_dims(K, N, 1);
  PackedWeight p;
  p.K = K;
  p.N = N;
  p.f32_view = w;
  p.keep = std::move(keep);
  return p;
}

PackedWeight view_f32_kn(const float* w, int64_t K, int64_t N, std::shared_ptr<const void> keep) {
  PackedWeight p = view_f32_nk(w, K, N, std::move(keep));
  p.view_kn = true;
  return p;
}

PackedWeight pack_f32(const float* w, int64_t K, int64_t N, bool w_is_nk) {
  check_dims(K, N, 1);
  PackedWeight p;
  p.K = K;
  p.N = N;
  p.f32.resize(static_cast<size_t>(K * N));
  if (w_is_nk) {
    std::copy(w, w + K * N, p.f32.begin());
    return p;
  }
  constexpr int64_t T = 64;  // cache-blocked transpose [K, N] -> [N, K]
  for (int64_t n0 = 0; n0 < N; n0 += T)
    for (int64_t k0 = 0; k0 < K; k0 += T)
      for (int64_t n = n0; n < std::min(N, n0 + T); ++n)
        for (int64_t k = k0; k < std::min(K, k0 + T); ++k) p.f32[n * K + k] = w[k * N + n];
  return p;
}

PackedWeight quantize_int8(const float* w, int64_t K, int64_t N, int64_t block_size, bool w_is_nk) {
  return quantize_sym(WeightFormat::Int8, w, K, N, block_size > 0 ? block_size : K, w_is_nk);
}

PackedWeight quantize_int4(const float* w, int64_t K, int64_t N, int64_t block_size, bool w_is_nk) {
  return quantize_sym(WeightFormat::Int4, w, K, N, block_size > 0 ? block_size : K, w_is_nk);
}

PackedWeight quantize_with(const float* w, int64_t K, int64_t N, int bits, int64_t block_size, const float* scales,
                           const float* zeros, bool w_is_nk) {
  if (bits < 2 || bits > 8) throw KernelError("linear: weight bit width " + std::to_string(bits) + " not in 2..8");
  check_dims(K, N, block_size);
  PackedWeight p = layout(bits <= 4 ? WeightFormat::Int4 : WeightFormat::Int8, K, N, block_size);
  const int qmin = -(1 << (bits - 1)), qmax = (1 << (bits - 1)) - 1;
  bool any_zero = false;
  std::vector<float> z(p.scales.size(), 0.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      size_t i = static_cast<size_t>(n * p.n_blocks + b);
      float scale = scales[i], zero = zeros ? zeros[i] : 0.f;
      if (!(scale > 0)) throw KernelError("linear: non-positive quantization scale");
      p.scales[i] = scale;
      z[i] = zero;
      any_zero |= zero != 0;
      int64_t k0 = b * p.block_size, k1 = std::min(K, k0 + p.block_size);
      for (int64_t k = k0; k < k1; ++k) {
        float q = std::nearbyint(at(w, K, N, w_is_nk, n, k) / scale) - zero;
        store(p, n, k, static_cast<int>(std::clamp(q, float(qmin), float(qmax))));
      }
    }
  if (any_zero) p.zeros = std::move(z);
  return p;
}

std::vector<float> dequantize(const PackedWeight& p) {
  std::vector<float> w(static_cast<size_t>(p.K * p.N));
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t k = 0; k < p.K; ++k) {
      float v;
      if (p.view_kn) v = p.f32_view[k * p.N + n];
      else if (p.format == WeightFormat::F32) v = p.f32_rows()[n * p.K + k];
      else {
        size_t i = static_cast<size_t>(n * p.n_blocks + k / p.block_size);
        v = (static_cast<float>(load(p, n, k)) + (p.zeros.empty() ? 0.f : p.zeros[i])) * p.scales[i];
      }
      w[k * p.N + n] = v;
    }
  return w;
}

// Column blocks of a streamed [K, N] weight; weights up to 4 blocks are read in place (a
// layer's weights go with their calibration segment), the copying is for the LM head.
constexpr int64_t kStreamBlockBytes = int64_t{64} << 20;
// A streamed weight's rows are handed back (release_rows) in runs of about this many bytes.
constexpr int64_t kReleaseBytes = int64_t{32} << 20;

// A streamed weight stored [K, N] (an untied LM head as exporters write it): multiplied by
// blocks of ~64 MiB of output columns, each copied out row by row. Reading the block in place
// would leave every row of the weight resident: the kernel maps a file's page cache a large
// folio (~1 MB, about two rows of a 128k-vocabulary head) per fault, so a 16 KB stretch of each
// row maps the whole table. Copying lets each group of rows go as soon as it is read. The
// product is the one sgemm computes on the whole matrix, bit for bit (columns are independent).
void linear_kn_streamed(const float* x, int64_t M, const PackedWeight& w, float* y) {
  const int64_t K = w.K, N = w.N;
  const int64_t cols = std::min(N, std::max<int64_t>(256, kStreamBlockBytes / (K * 4)));
  const int64_t rows_per_release = std::max<int64_t>(1, kReleaseBytes / (N * 4));
  std::vector<float> block(static_cast<size_t>(K * cols));
  for (int64_t n0 = 0; n0 < N; n0 += cols) {
    const int64_t nt = std::min(cols, N - n0);
    for (int64_t k0 = 0; k0 < K; k0 += rows_per_release) {
      const int64_t k1 = std::min(K, k0 + rows_per_release);
      for (int64_t k = k0; k < k1; ++k)
        std::copy_n(w.f32_view + k * N + n0, nt, block.data() + k * nt);
      w.release_rows(static_cast<size_t>(k0 * N) * 4, static_cast<size_t>((k1 - k0) * N) * 4);
    }
    // A fault near a group's start maps the end of the group before it again: let all go.
    w.release_rows(0, static_cast<size_t>(K * N) * 4);
    sgemm_block(x, block.data(), y + n0, M, nt, K, false, nt, N);
  }
}

void linear(const float* x, int64_t M, const PackedWeight& w, const float* bias, float* y, int threads) {
  const int64_t K = w.K, N = w.N;
  if (M <= 0) return;
  const bool simd = using_simd();
  if (w.view_kn) {
    if (w.release_rows && K * N * 4 > 4 * kStreamBlockBytes)
      linear_kn_streamed(x, M, w, y);
    else
      sgemm(x, w.f32_view, y, M, N, K, false);
    add_bias(y, M, N, bias);
    return;
  }
  // Decode and short batches: stream the weights once, rows of x reuse each weight row.
  constexpr int64_t kGemvMaxRows = 4;
  if (M <= kGemvMaxRows) {
    // Scratch reused across calls (no allocation per token).
    static thread_local detail::DotActivation xq;
    static thread_local detail::X16Activation x16;
    static thread_local std::vector<float> xsum;
    enum { kFloat, kDotVnni, kDotAvx2 } kernel = kFloat;
    if (detail::uses_integer_dot(w, simd)) {
      kernel = kDotVnni;
      detail::quantize_activation(x, M, w, xq);
    } else if (detail::uses_integer_dot_avx2(w, simd)) {
      kernel = kDotAvx2;
      detail::quantize_activation_x16(x, M, w, x16);
    } else if (!w.zeros.empty() || w.format == WeightFormat::Int4) {
      // Block sums of x: for zero points, and for int4's unsigned nibbles (q + 8).
      xsum.assign(static_cast<size_t>(M * w.n_blocks), 0.f);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t b = 0; b < w.n_blocks; ++b)
          for (int64_t k = b * w.block_size; k < std::min(K, (b + 1) * w.block_size); ++k)
            xsum[m * w.n_blocks + b] += x[m * K + k];
    }
    // thread_local: the workers read this thread's copies
    const float* xsum_p = xsum.data();
    const detail::DotActivation* xq_p = &xq;
    const detail::X16Activation* x16_p = &x16;
    // Split only matrices big enough that a thread's share (>= 64 KiB of weights) outweighs
    // waking it.
    const int64_t row_bytes = static_cast<int64_t>(w.weight_bytes() / static_cast<size_t>(N));
    const int64_t grain = std::max<int64_t>(16, (64 << 10) / std::max<int64_t>(row_bytes, 1));
    parallel_for(N, threads, grain, [&](int64_t n0, int64_t n1) {
      if (kernel == kDotVnni) return detail::gemv_integer_dot(*xq_p, M, w, bias, y, n0, n1);
      if (kernel == kDotAvx2) return detail::gemv_integer_dot_avx2(*x16_p, M, w, bias, y, n0, n1);
      switch (w.format) {
        case WeightFormat::F32: detail::gemv_f32(x, M, w, bias, y, n0, n1, simd); break;
        case WeightFormat::Int8: detail::gemv_int8(x, M, xsum_p, w, bias, y, n0, n1, simd); break;
        case WeightFormat::Int4: detail::gemv_int4(x, M, xsum_p, w, bias, y, n0, n1, simd); break;
      }
    });
    return;
  }
  // Prefill: GEMM against the packed [N, K] rows (gemm_nk.cpp), integer weights dequantized
  // as the GEMM reaches them; OpenBLAS without AVX2.
  const detail::GemmIsa isa = detail::gemm_nk_isa(simd);
  auto gemm_rows = [&](const float* rows, int64_t n0, int64_t nt) {
    if (isa != detail::GemmIsa::kNone)
      detail::gemm_nk(isa, x, M, K, {rows, nullptr}, nt, y + n0, N, threads);
    else
      sgemm_block(x, rows, y + n0, M, nt, K, true, K, N);
  };
  if (w.format == WeightFormat::F32 && w.release_rows) {
    // Row blocks of ~32 MiB, each let go once multiplied: a 1 GB viewed head stays a block.
    const int64_t rows = std::max<int64_t>(1, kReleaseBytes / (K * 4));
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
      const int64_t nt = std::min(rows, N - n0);
      gemm_rows(w.f32_view + n0 * K, n0, nt);
      w.release_rows(static_cast<size_t>(n0 * K) * 4, static_cast<size_t>(nt * K) * 4);
    }
  } else if (w.format == WeightFormat::F32) {
    gemm_rows(w.f32_rows(), 0, N);
  } else if (isa != detail::GemmIsa::kNone) {
    detail::GemmRows rows;
    rows.fill = [&w](int64_t n, int64_t count, int64_t k0, int64_t k1, float* out) {
      for (int64_t r = 0; r < count; ++r) dequant_row(w, n + r, k0, k1, out + r * (k1 - k0));
    };
    detail::gemm_nk(isa, x, M, K, rows, N, y, N, threads);
  } else {
    // Tiles of up to 512 output channels dequantized whole (at most 16 MiB of scratch).
    const int64_t tile = std::min(N, std::clamp<int64_t>((int64_t{16} << 20) / (K * 4), 64, 512));
    static thread_local std::vector<float> wt;  // reused across calls
    wt.resize(static_cast<size_t>(tile * K));
    for (int64_t n0 = 0; n0 < N; n0 += tile) {
      const int64_t nt = std::min(tile, N - n0);
      for (int64_t n = 0; n < nt; ++n) dequant_row(w, n0 + n, 0, K, wt.data() + n * K);
      gemm_rows(wt.data(), n0, nt);
    }
  }
  add_bias(y, M, N, bias);
}

Tensor linear(const Tensor& x, const PackedWeight& w, const float* bias, int threads) {
  if (x.dtype() != NF_DTYPE_FLOAT32) throw KernelError("MatMul: packed weights need a float32 input");
  if (x.rank() < 1 || x.dims().back() != w.K)
    throw KernelError("MatMul: input " + dims_str(x.dims()) + " does not match weight [" + std::to_string(w.K) + "," +
                      std::to_string(w.N) + "]");
  Dims out = x.dims();
  out.back() = w.N;
  Tensor y(NF_DTYPE_FLOAT32, out);
  linear(x.data<float>(), x.numel() / w.K, w, bias, y.mut<float>(), threads);
  return y;
}

}  // namespace nf::kernels
