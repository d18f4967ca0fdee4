// fp32 matrix products through OpenBLAS: ONNX MatMul (batched, broadcast, 1-D rules) and Gemm.
#pragma once

#include "npuforge/kernels/tensor.h"

namespace nf::kernels {

// ONNX MatMul on float32 (any numeric dtype through a plain loop). trans_b multiplies by b
// with its last two dims swapped, so a graph's Transpose -> MatMul needs no copy.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_b = false);
// ONNX Gemm: alpha * op(A) * op(B) + beta * C, C unidirectionally broadcast to [M, N].
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor* c, float alpha, float beta, bool trans_a, bool trans_b);
// Row-major C[M,N] = A[M,K] * op(B) with B stored [K,N] (trans_b false) or [N,K] (true).
void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_b);
// The same on a column block: B's and C's rows are ldb and ldc long, of which n are used
// (B stored [K,N]) or read (B stored [N,K]: ldb >= k).
void sgemm_block(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_b, int64_t ldb,
                 int64_t ldc);

}  // namespace nf::kernels
