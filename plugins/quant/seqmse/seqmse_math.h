// The SeqMSE search for one linear layer (aimet seq_mse), standalone so tests can check it
// on constructed layers. For every output channel (per_channel) or every (channel, input
// block) segment (per_block):
//   candidate c in [0, C): clip = absmax(segment) * (c + 1) / C, scale = clip / (2^(bw-1) - 1)
//   wq = clamp(round(w / scale), -2^(bw-1), 2^(bw-1) - 1) * scale
//   loss = the layer's output reconstruction loss on the segment over the calibration rows,
//          err_t = x_ref_t . w - x_q_t . wq   (the segment's partial output)
//   mse: sum err^2; l1: sum |err|; sqnr: sum err^2 / sum (x_ref . w)^2 (noise over signal)
// and the candidate of least loss wins. Blocks are scored on their own partial outputs, so
// the choice is separable per block (as AIMET does for blockwise quantizers).
// x_ref = x_q for 'symqt' and 'symfp' (the caller passes the inputs it captured); 'asym'
// passes float-model inputs as x_ref and quantized-model inputs as x_q.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "npuforge/kernels/parallel.h"

namespace nf::quant {

enum class SeqMseLoss { mse, l1, sqnr };

inline SeqMseLoss seqmse_loss_from_name(const std::string& s) {
  if (s == "mse") return SeqMseLoss::mse;
  if (s == "l1") return SeqMseLoss::l1;
  if (s == "sqnr") return SeqMseLoss::sqnr;
  throw std::invalid_argument("seqmse: loss_fn must be mse, l1 or sqnr (got '" + s + "')");
}

struct SeqMseLayer {
  const float* w = nullptr;  // [K, N] (nk = false, MatMul B) or [N, K] (nk = true)
  int64_t K = 0, N = 0;
  bool nk = false;
  int bw = 4;
  int64_t block_size = 0;  // 0: per channel
  int candidates = 20;
  SeqMseLoss loss = SeqMseLoss::mse;
  const float* x_q = nullptr;    // [T, K] inputs the quantized layer sees
  const float* x_ref = nullptr;  // [T, K] inputs of the reference output (may equal x_q)
  int64_t T = 0;
  // LPBQ refinement (per block only): candidates are i * lpbq_channel_scale[n], i in
  // 1..lpbq_levels, instead of clips of the block's absmax; segments flagged in
  // lpbq_keep_top keep i = lpbq_levels (they define the channel scale).
  const float* lpbq_channel_scale = nullptr;
  int lpbq_levels = 0;
  const std::vector<char>* lpbq_keep_top = nullptr;
};

struct SeqMseResult {
  int64_t blocks = 1;            // segments per channel
  std::vector<float> scale;      // [N * blocks], channel-major
  std::vector<int> candidate;    // chosen candidate index per segment
};

// clamp(nearbyint(w / scale)) * scale. Clamping first gives the same integer (qmin and
// qmax are integers and rounding is monotonic) and bounds the value, so the round-to-
// nearest-even of the default FP mode can use the 1.5 * 2^23 trick and the loops below
// vectorize (no libm call).
inline float seqmse_fake_quant(float w, float scale, float qmin, float qmax) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const float q = std::min(std::max(w / scale, qmin), qmax);
  return ((q + kRound) - kRound) * scale;
}

// OpenBLAS runs single-threaded inside the search's own threads (its pool would otherwise
// serialize or oversubscribe them); the previous count is restored.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : previous_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~SingleThreadedBlas() { openblas_set_num_threads(previous_); }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_;
};

inline SeqMseResult seqmse_search(const SeqMseLayer& L) {
  if (L.lpbq_channel_scale && (L.block_size <= 0 || L.lpbq_levels < 1 || !L.lpbq_keep_top))
    throw std::invalid_argument("seqmse: the LPBQ refinement needs per-block segments, levels and the top blocks");
  if (L.candidates < 1) throw std::invalid_argument("seqmse: num_candidates must be >= 1");
  const int64_t seg = L.block_size > 0 ? L.block_size : L.K;
  if (L.K % seg != 0) throw std::invalid_argument("seqmse: block_size does not divide the input channels");
  const float qmax = std::ldexp(1.f, L.bw - 1) - 1.f, qmin = -std::ldexp(1.f, L.bw - 1);
  const bool same_inputs = L.x_ref == L.x_q;
  // A Gram matrix per segment (K_seg^2 per candidate) beats the direct product (T * K_seg)
  // when the segment is shorter than the number of rows; it only serves quadratic losses
  // over one set of inputs.
  const bool gram = same_inputs && L.loss != SeqMseLoss::l1 && seg < L.T;

  SeqMseResult r;
  r.blocks = L.K / seg;
  // A segment of zeros keeps a tiny positive scale: every weight is exactly 0 on it, and
  // it never becomes a channel's largest block scale (LPBQ).
  r.scale.assign(static_cast<size_t>(L.N * r.blocks), 1e-30f);
  r.candidate.assign(r.scale.size(), 0);

  auto at = [&](int64_t k, int64_t n) { return L.nk ? L.w[n * L.K + k] : L.w[k * L.N + n]; };
  const bool lpbq = L.lpbq_channel_scale != nullptr;
  const int c_end = lpbq ? L.lpbq_levels : L.candidates;
  auto first_candidate = [&](size_t out) { return lpbq && (*L.lpbq_keep_top)[out] ? c_end - 1 : 0; };
  auto candidate_scale = [&](int64_t n, float absmax, int c) {
    return lpbq ? static_cast<float>(c + 1) * L.lpbq_channel_scale[n]
                : absmax * static_cast<float>(c + 1) / static_cast<float>(L.candidates) / qmax;
  };
  // Keeps candidate c of segment `out` when its loss is lower (strict: a tie keeps the
  // smaller clip). Threads own disjoint channels, so they write disjoint entries.
  auto choose = [&](size_t out, int64_t n, float absmax, int c, double loss, double signal, double& best) {
    if (L.loss == SeqMseLoss::sqnr) loss = signal > 0 ? loss / signal : loss;
    if (loss < best) {
      best = loss;
      r.scale[out] = candidate_scale(n, absmax, c);
      r.candidate[out] = c;
    }
  };
  // Segment b of channel n into w; returns its absmax.
  auto load_segment = [&](int64_t b, int64_t n, float* w) {
    float a = 0.f;
    for (int64_t i = 0; i < seg; ++i) {
      w[i] = at(b * seg + i, n);
      a = std::max(a, std::fabs(w[i]));
    }
    return a;
  };
  // Channels are independent: the search splits them over the cores, each thread with its
  // own buffers and a single-threaded BLAS.
  const int64_t grain = std::max<int64_t>(1, L.N / (4 * kernels::hardware_threads()));
  SingleThreadedBlas single_threaded_blas;

  if (gram) {
    // Every candidate of a chunk of channels at once: rows of E are w - q(w) per (channel,
    // candidate) and w itself (for the signal); the losses are the row products of E G
    // with E, one dgemm per block and chunk.
    std::vector<double> grams(static_cast<size_t>(r.blocks * seg * seg));
    {
      std::vector<double> X(static_cast<size_t>(L.T * seg));
      for (int64_t b = 0; b < r.blocks; ++b) {
        double* G = &grams[static_cast<size_t>(b * seg * seg)];
        for (int64_t t = 0; t < L.T; ++t)
          for (int64_t i = 0; i < seg; ++i) X[static_cast<size_t>(t * seg + i)] = L.x_q[t * L.K + b * seg + i];
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(seg), static_cast<int>(L.T), 1.0, X.data(),
                    static_cast<int>(seg), 0.0, G, static_cast<int>(seg));
        for (int64_t i = 0; i < seg; ++i)
          for (int64_t j = 0; j < i; ++j) G[i * seg + j] = G[j * seg + i];
      }
    }
    const int64_t rows_per_channel = c_end + 1;
    // E and E G of a chunk stay within a core's L2 (256 KiB each).
    const int64_t chunk = std::max<int64_t>(1, (1 << 15) / (rows_per_channel * seg));
    kernels::parallel_for(L.N, 0, grain, [&](int64_t n_begin, int64_t n_end) {
      std::vector<float> w(static_cast<size_t>(chunk * seg)), absmax(static_cast<size_t>(chunk));
      std::vector<double> E(static_cast<size_t>(chunk * rows_per_channel * seg)), M(E.size());
      for (int64_t b = 0; b < r.blocks; ++b) {
        const double* G = &grams[static_cast<size_t>(b * seg * seg)];
        for (int64_t n0 = n_begin; n0 < n_end; n0 += chunk) {
          const int64_t count = std::min(chunk, n_end - n0);
          for (int64_t j = 0; j < count; ++j) {
            float* wj = &w[static_cast<size_t>(j * seg)];
            const float a = absmax[static_cast<size_t>(j)] = load_segment(b, n0 + j, wj);
            double* rows = &E[static_cast<size_t>(j * rows_per_channel * seg)];
            for (int c = 0; c < c_end; ++c) {
              const float scale = a > 0.f ? candidate_scale(n0 + j, a, c) : 1.f;
              double* row = rows + c * seg;
              for (int64_t i = 0; i < seg; ++i)
                row[i] = wj[i] - seqmse_fake_quant(wj[i], scale, qmin, qmax);
            }
            for (int64_t i = 0; i < seg; ++i) rows[c_end * seg + i] = wj[i];
          }
          const int64_t rows = count * rows_per_channel;
          cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(seg),
                      static_cast<int>(seg), 1.0, E.data(), static_cast<int>(seg), G, static_cast<int>(seg), 0.0,
                      M.data(), static_cast<int>(seg));
          auto row_loss = [&](int64_t row) {
            const double* m = &M[static_cast<size_t>(row * seg)];
            const double* x = &E[static_cast<size_t>(row * seg)];
            double acc = 0;
            for (int64_t i = 0; i < seg; ++i) acc += m[i] * x[i];
            return acc;
          };
          for (int64_t j = 0; j < count; ++j) {
            const int64_t n = n0 + j;
            const float a = absmax[static_cast<size_t>(j)];
            if (a == 0.f) continue;
            const size_t out = static_cast<size_t>(n * r.blocks + b);
            const double signal = row_loss(j * rows_per_channel + c_end);
            double best = INFINITY;
            for (int c = first_candidate(out); c < c_end; ++c)
              choose(out, n, a, c, row_loss(j * rows_per_channel + c), signal, best);
          }
        }
      }
    });
    return r;
  }

  kernels::parallel_for(L.N, 0, grain, [&](int64_t n_begin, int64_t n_end) {
    std::vector<float> w(static_cast<size_t>(seg)), e(static_cast<size_t>(seg)), y_ref(static_cast<size_t>(L.T));
    for (int64_t b = 0; b < r.blocks; ++b) {
      const int64_t k0 = b * seg;
      for (int64_t n = n_begin; n < n_end; ++n) {
        const float absmax = load_segment(b, n, w.data());
        const size_t out = static_cast<size_t>(n * r.blocks + b);
        if (absmax == 0.f) continue;
        double signal = 0;  // sum (x_ref . w)^2, for sqnr
        for (int64_t t = 0; t < L.T; ++t) {
          const float* x = L.x_ref + t * L.K + k0;
          double acc = 0;
          for (int64_t i = 0; i < seg; ++i) acc += static_cast<double>(x[i]) * w[static_cast<size_t>(i)];
          y_ref[static_cast<size_t>(t)] = static_cast<float>(acc);
          signal += acc * acc;
        }
        double best = INFINITY;
        for (int c = first_candidate(out); c < c_end; ++c) {
          const float scale = candidate_scale(n, absmax, c);
          for (int64_t i = 0; i < seg; ++i)
            e[static_cast<size_t>(i)] = seqmse_fake_quant(w[static_cast<size_t>(i)], scale, qmin, qmax);
          double loss = 0;
          for (int64_t t = 0; t < L.T; ++t) {
            const float* x = L.x_q + t * L.K + k0;
            double acc = 0;
            for (int64_t i = 0; i < seg; ++i) acc += static_cast<double>(x[i]) * e[static_cast<size_t>(i)];
            const double err = y_ref[static_cast<size_t>(t)] - acc;
            loss += L.loss == SeqMseLoss::l1 ? std::fabs(err) : err * err;
          }
          choose(out, n, absmax, c, loss, signal, best);
        }
      }
    }
  });
  return r;
}

}  // namespace nf::quant

namespace nf::quant {

// SeqMSE for an LPBQ target: the per-block search above, then the channel scale
// s_ch = max_b s_blk / 2^(dbw - bw) is fixed and every other block re-searches its integer
// i_blk in 1..2^(dbw-bw) on the real LPBQ grid (i_blk * s_ch) instead of having its clip
// rounded to the nearest one. The returned block scales are exactly i_blk * s_ch, which
// lpbq's decomposition reproduces.
inline SeqMseResult seqmse_search_lpbq(SeqMseLayer L, int dbw) {
  SeqMseResult first = seqmse_search(L);
  const int levels = 1 << (dbw - L.bw);
  std::vector<float> s_ch(static_cast<size_t>(L.N));
  std::vector<char> top(first.scale.size(), 0);
  for (int64_t n = 0; n < L.N; ++n) {
    float m = 0.f;
    int64_t arg = 0;
    for (int64_t b = 0; b < first.blocks; ++b)
      if (first.scale[static_cast<size_t>(n * first.blocks + b)] > m) {
        m = first.scale[static_cast<size_t>(n * first.blocks + b)];
        arg = b;
      }
    s_ch[static_cast<size_t>(n)] = m / static_cast<float>(levels);
    top[static_cast<size_t>(n * first.blocks + arg)] = 1;
  }
  L.lpbq_channel_scale = s_ch.data();
  L.lpbq_levels = levels;
  L.lpbq_keep_top = &top;
  return seqmse_search(L);
}

}  // namespace nf::quant
