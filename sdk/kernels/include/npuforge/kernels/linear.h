// Linear layers with pre-packed constant weights: y[M,N] = x[M,K] * W[K,N] (+ bias).
// Weights are stored transposed ([N, K]: one output channel a row) so decode (M = 1) is a
// GEMV that streams every weight byte exactly once. Formats:
//   F32   plain floats;
//   Int8  signed 8-bit values, one scale (and optional zero) per block of `block_size`
//         inputs — per-channel is block_size = K;
//   Int4  signed 4-bit values packed two per byte, blockwise scales along K.
// Dequantized weight: w = (q + zero) * scale. Weight-only quantization: the GEMV (decode)
// kernels for Int8/Int4 take x as 16-bit integers per group of 32 inputs (integer dot
// products on AVX-512 VNNI or AVX2; relative error 2^-16 of each group's largest |x|) when
// K and the blocks are multiples of 32 (64 for VNNI), else as fp32; prefill multiplies
// dequantized tiles in fp32. Results equal fp32 math over the dequantized weights up to
// that rounding.
#pragma once

#include "npuforge/kernels/tensor.h"

#include <functional>
#include <memory>
#include <new>
#include <vector>

namespace nf::kernels {

enum class WeightFormat { F32, Int8, Int4 };

// std::allocator with 64-byte (cache line / AVX-512) aligned storage.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = ::operator new(n * sizeof(T), std::align_val_t(64));
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const { return true; }
};
template <class T>
using aligned_vector = std::vector<T, AlignedAllocator<T>>;

struct PackedWeight {
  WeightFormat format = WeightFormat::F32;
  int64_t K = 0, N = 0;
  int64_t block_size = 0;  // along K (Int8/Int4); K for per-channel
  int64_t n_blocks = 0;    // ceil(K / block_size)
  aligned_vector<float> f32;   // F32: [N, K], 64-byte aligned
  const float* f32_view = nullptr;  // F32 rows borrowed instead (view_f32_nk), f32 empty
  bool view_kn = false;             // f32_view is [K, N] as stored (view_f32_kn): GEMM only
  std::shared_ptr<const void> keep;  // keeps f32_view's owner alive
  // When set, a product reads f32_view in blocks of output channels and hands each finished
  // byte range here (a one-pass session lets a mapped weight's pages go as it streams them).
  std::function<void(size_t byte_offset, size_t bytes)> release_rows;
  aligned_vector<int8_t> q8;   // Int8: [N, K]
  // Int4: [N, row_bytes]. Each 16-element chunk of a row is 8 bytes: byte j holds element
  // j in its low nibble and element 8 + j in its high nibble, as q + 8, so one zero-extending
  // load of 8 bytes and a mask / shift give 16 weights. A partial last chunk is padded
  // with q = 0.
  aligned_vector<uint8_t> q4;
  int64_t row_bytes = 0;
  std::vector<float> scales;   // [N, n_blocks]
  std::vector<float> zeros;    // [N, n_blocks]; empty when every zero is 0 (symmetric)

  size_t weight_bytes() const;  // bytes a GEMV streams (values + scales)
  const float* f32_rows() const { return f32_view ? f32_view : f32.data(); }
};

// W is row-major [K, N] (ONNX MatMul's B) unless `w_is_nk` (Gemm with transB): [N, K].
PackedWeight pack_f32(const float* w, int64_t K, int64_t N, bool w_is_nk = false);
// An [N, K] fp32 weight is already in the packed layout: viewed in place, no copy (a tied
// LM head's 1 GB embedding stays in the file mapping). `keep` owns `w`.
PackedWeight view_f32_nk(const float* w, int64_t K, int64_t N, std::shared_ptr<const void> keep);
// A [K, N] fp32 weight (ONNX MatMul's B) used as stored, no copy, multiplied by sgemm
// without a transpose: for one-pass runs (calibration), where packing a copy costs more
// memory and time than the slower decode GEMV it would buy.
PackedWeight view_f32_kn(const float* w, int64_t K, int64_t N, std::shared_ptr<const void> keep);
// Symmetric weight-only quantization: int8 per channel (block_size 0) or blockwise, int4
// blockwise; scale = max|w| / qmax of each block.
PackedWeight quantize_int8(const float* w, int64_t K, int64_t N, int64_t block_size = 0, bool w_is_nk = false);
PackedWeight quantize_int4(const float* w, int64_t K, int64_t N, int64_t block_size = 32, bool w_is_nk = false);
// Quantizes with given scales/zeros ([N, n_blocks], zeros may be null): q = clamp(round(w /
// scale) - zero) to the signed `bits` range; bits <= 4 packs Int4, else Int8.
PackedWeight quantize_with(const float* w, int64_t K, int64_t N, int bits, int64_t block_size,
                           const float* scales, const float* zeros, bool w_is_nk = false);
// The fp32 [K, N] matrix the packed weight stands for.
std::vector<float> dequantize(const PackedWeight& w);

// y[M, N] = x[M, K] * W + bias (bias may be null). Small M runs the streaming GEMV kernels
// over `threads` threads; large M runs a GEMM on the packed rows (integer weights dequantized
// a tile of rows at a time).
void linear(const float* x, int64_t M, const PackedWeight& w, const float* bias, float* y, int threads);
// x [..., K] -> [..., N].
Tensor linear(const Tensor& x, const PackedWeight& w, const float* bias, int threads);

// The kernel a decode GEMV (M <= 4) of `w` runs on here: "integer dot (AVX-512 VNNI)",
// "integer dot (AVX2)", "AVX-512", "AVX2" or "scalar" (for tests and bench/linear_bench).
const char* gemv_kernel(const PackedWeight& w);

// Kernel selection: the widest of AVX-512 (f, bw, vl), AVX2 + FMA and portable scalar code
// that the CPU has. Tests and benches cap it to run the narrower kernels on the same CPU.
enum class Simd { kScalar, kAvx2, kAvx512 };
Simd simd_level();          // what the kernels use now
void limit_simd(Simd max);  // kAvx512: no cap
const char* simd_name(Simd s);
bool cpu_has_avx2();
bool using_simd();  // simd_level() != kScalar

}  // namespace nf::kernels
