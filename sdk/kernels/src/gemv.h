// Internal: the streaming GEMV kernels behind linear(). Each computes y[m, n] for all
// m < M and n in [n0, n1) and adds bias when given. `xsum` holds per-block sums of x
// ([M, n_blocks]) when the weight has zeros.
#pragma once

#include "npuforge/kernels/linear.h"

namespace nf::kernels::detail {

bool cpu_has_avx512();  // avx512f + bw + vl

void gemv_f32(const float* x, int64_t M, const PackedWeight& w, const float* bias, float* y, int64_t n0, int64_t n1,
              bool simd);
void gemv_int8(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd);
// xp: x reordered by permute_x_int4 (per row of x) when int4_uses_permuted_x, else null.
void gemv_int4(const float* x, int64_t M, const float* xsum, const PackedWeight& w, const float* bias, float* y,
               int64_t n0, int64_t n1, bool simd, const float* xp);
bool int4_uses_permuted_x(const PackedWeight& w, bool simd);
void permute_x_int4(const float* x, int64_t K, float* xp);

}  // namespace nf::kernels::detail
