// The LPBQ formula (aimet_torch GroupedBlockQuantizeDequantize), standalone so tests can
// check it against hand-computed cases. For each output channel c and input block b:
//   s_blk = absmax(block) / (2^(bw-1) - 1)             blockwise symmetric scale at bw
//   s_ch  = max_b s_blk / 2^(dbw - bw)                 per-channel scale (dbw: decompressed bw)
//   i_blk = clamp(round(s_blk / s_ch), 1, 2^(dbw-bw))  small per-block integer
//   q     = clamp(round(w / (i_blk * s_ch)), -2^(bw-1), 2^(bw-1) - 1)
// so q * i_blk lies on the dbw-bit per-channel grid of scale s_ch. A channel of zeros gets
// s_ch = 1 and i_blk = 1 (every q is 0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace nf::quant {

struct LpbqResult {
  int64_t blocks = 0;                  // per channel: K / block_size
  std::vector<float> channel_scale;    // s_ch, [N]
  std::vector<int32_t> block_ints;     // i_blk, [N * blocks], channel-major
  std::vector<int32_t> q;              // [N * K], channel-major; empty unless asked for
};

// The decomposition from given block scales s_blk ([N * K/block_size], channel-major): what
// lpbq applies to the block ranges another recipe chose (seqmse's PER_BLOCK encodings).
// The codes q are filled only when `codes` (the encodings need the scales and integers).
inline LpbqResult lpbq_from_block_scales(const float* w, int64_t K, int64_t N, bool nk, int64_t block_size, int bw,
                                         int dbw, const std::vector<float>& s_blk, bool codes = true) {
  auto at = [&](int64_t k, int64_t n) { return nk ? w[n * K + k] : w[k * N + n]; };
  const float qmax = std::ldexp(1.f, bw - 1) - 1.f, qmin = -std::ldexp(1.f, bw - 1);
  const float int_max = std::ldexp(1.f, dbw - bw);
  LpbqResult r;
  r.blocks = K / block_size;
  r.channel_scale.resize(static_cast<size_t>(N));
  r.block_ints.resize(static_cast<size_t>(N * r.blocks));
  if (codes) r.q.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) {
    float s_max = 0.f;
    for (int64_t b = 0; b < r.blocks; ++b) s_max = std::max(s_max, s_blk[static_cast<size_t>(n * r.blocks + b)]);
    const float s_ch = s_max > 0.f ? s_max / int_max : 1.f;
    r.channel_scale[static_cast<size_t>(n)] = s_ch;
    for (int64_t b = 0; b < r.blocks; ++b) {
      float i_blk = std::clamp(std::nearbyint(s_blk[static_cast<size_t>(n * r.blocks + b)] / s_ch), 1.f, int_max);
      r.block_ints[static_cast<size_t>(n * r.blocks + b)] = static_cast<int32_t>(i_blk);
      if (!codes) continue;
      const float s_eff = s_ch * i_blk;
      for (int64_t k = b * block_size; k < (b + 1) * block_size; ++k)
        r.q[static_cast<size_t>(n * K + k)] = static_cast<int32_t>(std::clamp(std::nearbyint(at(k, n) / s_eff), qmin, qmax));
    }
  }
  return r;
}

// `w` is [K, N] (nk = false, MatMul B) or [N, K] (nk = true); K % block_size == 0. Reads
// `w` once in memory order (a [K, N] weight row by row).
inline LpbqResult lpbq_quantize(const float* w, int64_t K, int64_t N, bool nk, int64_t block_size, int bw, int dbw,
                                bool codes = true) {
  const float qmax = std::ldexp(1.f, bw - 1) - 1.f;
  const int64_t blocks = K / block_size;
  std::vector<float> absmax(static_cast<size_t>(N * blocks), 0.f);
  if (nk) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        float& m = absmax[static_cast<size_t>(n * blocks + k / block_size)];
        m = std::max(m, std::fabs(w[n * K + k]));
      }
  } else {
    std::vector<float> block_max(static_cast<size_t>(N));
    for (int64_t b = 0; b < blocks; ++b) {
      std::fill(block_max.begin(), block_max.end(), 0.f);
      for (int64_t k = b * block_size; k < (b + 1) * block_size; ++k) {
        const float* row = w + k * N;
        for (int64_t n = 0; n < N; ++n) block_max[static_cast<size_t>(n)] = std::max(block_max[static_cast<size_t>(n)], std::fabs(row[n]));
      }
      for (int64_t n = 0; n < N; ++n) absmax[static_cast<size_t>(n * blocks + b)] = block_max[static_cast<size_t>(n)];
    }
  }
  for (float& s : absmax) s /= qmax;
  return lpbq_from_block_scales(w, K, N, nk, block_size, bw, dbw, absmax, codes);
}

}  // namespace nf::quant
