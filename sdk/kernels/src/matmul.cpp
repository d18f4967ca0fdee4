// ONNX MatMul and Gemm in fp32 over OpenBLAS; other dtypes through a plain triple loop.
#include "npuforge/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <utility>

#include "npuforge/kernels/elementwise.h"
#include "npuforge/kernels/parallel.h"

namespace nf::kernels {

void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_b) {
  sgemm_block(a, b, c, m, n, k, trans_b, trans_b ? k : n, n);
}

namespace {

// Products below this many multiply-adds run on the calling thread alone.
constexpr int64_t kSplitMacs = int64_t{1} << 18;

void sgemm_one_thread(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_b,
                      int64_t ldb, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.f, a, static_cast<int>(k), b, static_cast<int>(ldb), 0.f, c,
              static_cast<int>(ldc));
}

}  // namespace

void sgemm_block(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_b, int64_t ldb,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
    return;
  }
  const int threads = blas_threads();
  if (threads <= 1 || m * n * k < kSplitMacs) return sgemm_one_thread(a, b, c, m, n, k, trans_b, ldb, ldc);
  // Split the longer side of C over the pool, each part one single-threaded OpenBLAS call.
  if (n >= m)
    parallel_for(n, threads, 64, [&](int64_t j0, int64_t j1) {
      sgemm_one_thread(a, trans_b ? b + j0 * ldb : b + j0, c + j0, m, j1 - j0, k, trans_b, ldb, ldc);
    });
  else
    parallel_for(m, threads, 16, [&](int64_t i0, int64_t i1) {
      sgemm_one_thread(a + i0 * k, b, c + i0 * ldc, i1 - i0, n, k, trans_b, ldb, ldc);
    });
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool trans_b) {
  if (a_in.dtype() != b_in.dtype()) throw KernelError("MatMul: input dtypes differ");
  if (a_in.rank() == 0 || b_in.rank() == 0) throw KernelError("MatMul: scalar input");
  // 1-D operands: promote, multiply, then drop the added axis (numpy rules).
  bool a_vec = a_in.rank() == 1, b_vec = b_in.rank() == 1;
  if (trans_b && b_vec) throw KernelError("MatMul: transposed 1-D operand");
  Tensor a = a_vec ? a_in.reshaped({1, a_in.dim(0)}) : a_in;
  Tensor b = b_vec ? b_in.reshaped({b_in.dim(0), 1}) : b_in;
  const Dims &da = a.dims(), &db = b.dims();
  int64_t M = da[da.size() - 2], K = da.back(), N = trans_b ? db[db.size() - 2] : db.back();
  if ((trans_b ? db.back() : db[db.size() - 2]) != K)
    throw KernelError("MatMul: shapes " + dims_str(a_in.dims()) + " and " + dims_str(b_in.dims()) + " do not match");
  Dims ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
  Dims batch = broadcast_shape(ba, bb, "MatMul");
  Dims out = batch;
  out.push_back(M);
  out.push_back(N);
  auto sa = broadcast_strides(ba, batch), sb = broadcast_strides(bb, batch);
  int64_t nbatch = numel(batch);
  Tensor y(a.dtype(), out);
  Dims final_dims = batch;  // without the axes 1-D operands gained
  if (!a_vec) final_dims.push_back(M);
  if (!b_vec) final_dims.push_back(N);
  // Offsets of batch entry i's operands (their batch dims broadcast to `batch`).
  auto operands = [&](int64_t i) {
    int64_t ia = 0, ib = 0;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      const int64_t at = i % batch[d];
      i /= batch[d];
      ia += at * sa[d], ib += at * sb[d];
    }
    return std::pair{ia * M * K, ib * K * N};
  };
  if (a.dtype() == NF_DTYPE_FLOAT32) {
    // Many small products (attention heads) split over the pool by batch entry, one
    // single-threaded call each; a large one splits itself in sgemm_block.
    const int64_t macs = std::max<int64_t>(M * N * K, 1);
    const int64_t grain = macs >= kSplitMacs ? nbatch : (kSplitMacs + macs - 1) / macs;
    parallel_for(nbatch, blas_threads(), grain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const auto [oa, ob] = operands(i);
        sgemm(a.data<float>() + oa, b.data<float>() + ob, y.mut<float>() + i * M * N, M, N, K, trans_b);
      }
    });
    return y.reshaped(final_dims);
  }
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < nbatch; ++i) {
      const auto [oa, ob] = operands(i);
      const T* pa = a.data<T>() + oa;
      const T* pb = b.data<T>() + ob;
      T* py = y.mut<T>() + i * M * N;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          T s{};
          for (int64_t k = 0; k < K; ++k) s = static_cast<T>(s + pa[m * K + k] * pb[trans_b ? n * K + k : k * N + n]);
          py[m * N + n] = s;
        }
    }
  });
  return y.reshaped(final_dims);
}

Tensor gemm(const Tensor& a, const Tensor& b, const Tensor* c, float alpha, float beta, bool trans_a, bool trans_b) {
  if (a.dtype() != NF_DTYPE_FLOAT32 || b.dtype() != NF_DTYPE_FLOAT32) throw KernelError("Gemm: only float32 is supported");
  if (a.rank() != 2 || b.rank() != 2) throw KernelError("Gemm: inputs must be 2-D");
  int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  int64_t Kb = trans_b ? b.dim(1) : b.dim(0), N = trans_b ? b.dim(0) : b.dim(1);
  if (K != Kb) throw KernelError("Gemm: shapes " + dims_str(a.dims()) + " and " + dims_str(b.dims()) + " do not match");
  Tensor y = Tensor::zeros(NF_DTYPE_FLOAT32, {M, N});
  float* py = y.mut<float>();
  if (c && beta != 0.f) {
    Tensor cf = cast(*c, NF_DTYPE_FLOAT32);
    Dims bc = broadcast_shape(cf.dims(), {M, N}, "Gemm");
    if (bc != Dims{M, N}) throw KernelError("Gemm: C " + dims_str(c->dims()) + " does not broadcast to the output");
    auto st = broadcast_strides(cf.dims(), {M, N});
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) py[m * N + n] = beta * cf.data<float>()[m * st[0] + n * st[1]];
  }
  if (M && N && K)
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, a.data<float>(),
                static_cast<int>(a.dim(1)), b.data<float>(), static_cast<int>(b.dim(1)), 1.f, py, static_cast<int>(N));
  return y;
}

}  // namespace nf::kernels
