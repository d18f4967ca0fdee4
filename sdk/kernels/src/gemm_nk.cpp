// The prefill GEMM of linear(): y[m, n] = dot(x[m, :], w[n, :]) on the packed [N, K] rows as
// they are, so nothing is repacked per call. OpenBLAS copies B into panels on every call, and
// Debian's 0.3.21 runs its Haswell kernels on a Zen 5: 61-80 GFLOP/s for 32 rows of x there
// against 115-157 here (bench/linear_bench --tokens 32). A tile of MR rows of x by NR rows of w keeps MR * NR vector
// accumulators over a chunk of K and reduces each to one number at the end of the chunk.
// Blocking: chunks of kChunkK inputs, so a tile's w rows stay in L1 while the rows of x
// stream past them from L2; x in blocks of kBlockM rows; threads split the w rows. Integer
// weights are dequantized a tile of rows and a chunk at a time, into L1, as they are reached.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <vector>

#include "gemv.h"
#include "hsum.h"
#include "npuforge/kernels/parallel.h"

namespace nf::kernels::detail {
namespace {

constexpr int64_t kChunkK = 1024;
constexpr int64_t kBlockM = 64;
constexpr int kMaxM = 4, kMaxN = 6;  // the widest tile: rows of x, rows of w

// `next`: the next tile's w rows, prefetched while this tile runs (null: none).
using TileFn = void (*)(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
                        bool accumulate, const float* next);

// One step of 16 inputs (fewer under `mask`) of an MR x NR tile.
template <int MR, int NR>
__attribute__((target("avx512f"), always_inline)) inline void step_avx512(__m512 (&acc)[MR][NR], const float* x,
                                                                         int64_t ldx, const float* w, int64_t ldw,
                                                                         __mmask16 mask, const float* next) {
  if (next)
#pragma GCC unroll 8
    for (int j = 0; j < kMaxN; ++j) _mm_prefetch(reinterpret_cast<const char*>(next + j * ldw), _MM_HINT_T0);
  __m512 wv[NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(mask, w + j * ldw);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
  }
}

// 4 x 6 tile: 24 accumulators, 6 w vectors and 1 x vector of the 32 zmm registers.
template <int MR, int NR>
__attribute__((target("avx512f"))) void tile_avx512(const float* x, int64_t ldx, const float* w, int64_t ldw,
                                                    int64_t k, float* y, int64_t ldy, bool accumulate,
                                                    const float* next) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) step_avx512<MR, NR>(acc, x + p, ldx, w + p, ldw, 0xffff, next ? next + p : nullptr);
  if (p < k) {
    const auto tail = static_cast<__mmask16>((1u << (k - p)) - 1);
    step_avx512<MR, NR>(acc, x + p, ldx, w + p, ldw, tail, next ? next + p : nullptr);
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const float s = hsum(acc[i][j]);
      y[i * ldy + j] = accumulate ? y[i * ldy + j] + s : s;
    }
}

// 4 x 3 tile: 12 accumulators, 3 w vectors and 1 x vector of the 16 ymm registers.
template <int MR, int NR>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, int64_t ldx, const float* w, int64_t ldw,
                                                   int64_t k, float* y, int64_t ldy, bool accumulate, const float*) {
  __m256 acc[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    __m256 wv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(w + j * ldw + p);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t t = p; t < k; ++t) s += x[i * ldx + t] * w[j * ldw + t];  // the last k % 8 inputs
      y[i * ldy + j] = accumulate ? y[i * ldy + j] + s : s;
    }
}

using TileTable = std::array<std::array<TileFn, kMaxN + 1>, kMaxM + 1>;  // [rows of x][rows of w]

template <template <int, int> class Tile, int MR, int... NR>
constexpr std::array<TileFn, kMaxN + 1> tile_row(std::integer_sequence<int, NR...>) {
  return {nullptr, Tile<MR, NR + 1>::fn...};
}
template <int MR, int NR>
struct Avx512Tile {
  static constexpr TileFn fn = tile_avx512<MR, NR>;
};
template <int MR, int NR>
struct Avx2Tile {
  static constexpr TileFn fn = tile_avx2<MR, NR>;  // only NR <= 3 is called
};
template <template <int, int> class Tile>
constexpr TileTable tile_table() {
  constexpr auto n = std::make_integer_sequence<int, kMaxN>();
  return {{{}, tile_row<Tile, 1>(n), tile_row<Tile, 2>(n), tile_row<Tile, 3>(n), tile_row<Tile, 4>(n)}};
}
constexpr TileTable kAvx512Tiles = tile_table<Avx512Tile>();
constexpr TileTable kAvx2Tiles = tile_table<Avx2Tile>();

}  // namespace

GemmIsa gemm_nk_isa(bool simd) {
  if (!simd) return GemmIsa::kNone;
  return simd_level() == Simd::kAvx512 ? GemmIsa::kAvx512 : GemmIsa::kAvx2;
}

void gemm_nk(GemmIsa isa, const float* x, int64_t M, int64_t K, const GemmRows& w, int64_t N, float* y, int64_t ldy,
             int threads) {
  const TileTable& tiles = isa == GemmIsa::kAvx512 ? kAvx512Tiles : kAvx2Tiles;
  const int64_t nr = isa == GemmIsa::kAvx512 ? 6 : 3;
  const int64_t n_tiles = (N + nr - 1) / nr;
  for (int64_t k0 = 0; k0 < K; k0 += kChunkK) {
    const int64_t kc = std::min(kChunkK, K - k0);
    for (int64_t m0 = 0; m0 < M; m0 += kBlockM) {
      const int64_t mb = std::min(kBlockM, M - m0);
      // A thread's share is at least 8 tiles of w rows, so waking it pays.
      parallel_for(n_tiles, threads, 8, [&](int64_t t0, int64_t t1) {
        static thread_local std::vector<float> made;  // rows made by w.fill, in L1
        if (!w.rows) made.resize(static_cast<size_t>(nr * kc));
        for (int64_t n = t0 * nr; n < std::min(N, t1 * nr); n += nr) {
          const int64_t nt = std::min(nr, N - n);
          const float* rows = w.rows ? w.rows + n * K + k0 : made.data();
          const int64_t ld = w.rows ? K : kc;
          if (!w.rows) w.fill(n, nt, k0, k0 + kc, made.data());
          for (int64_t m = m0; m < m0 + mb; m += kMaxM) {
            const int64_t mt = std::min<int64_t>(kMaxM, m0 + mb - m);
            const float* next = w.rows && m == m0 && n + nr + kMaxN <= N ? w.rows + (n + nr) * K + k0 : nullptr;
            tiles[mt][nt](x + m * K + k0, K, rows, ld, kc, y + m * ldy + n, ldy, k0 > 0, next);
          }
        }
      });
    }
  }
}

}  // namespace nf::kernels::detail
