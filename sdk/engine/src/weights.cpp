#include "weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace nf::engine {
namespace {

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  throw Error("cpu backend: encoding of weight '" + name + "': " + why);
}

}  // namespace

// AIMET's real = (q_u + offset) * scale with q_u unsigned gives zero = offset + 2^(bits-1);
// symmetric encodings are the signed grid around 0 (zero = 0) in either convention.
WeightGrid weight_grid(const std::string& name, int64_t K, int64_t N, bool nk, const nf_encoding& e) {
  const int out_axis = nk ? 0 : 1, k_axis = 1 - out_axis;
  WeightGrid g;
  g.bits = e.enc_type == NF_ENC_LPBQ ? e.compressed_bw : e.bw;
  g.block = K;
  size_t need = 1;
  if (e.enc_type != NF_ENC_PER_TENSOR) {
    if (e.axis != out_axis)
      bad(name, "channel axis " + std::to_string(e.axis) + " is not the output axis " + std::to_string(out_axis));
    need = static_cast<size_t>(N);
  }
  if (e.enc_type == NF_ENC_PER_BLOCK || e.enc_type == NF_ENC_LPBQ) {
    if (e.block_axis != k_axis) bad(name, "block axis " + std::to_string(e.block_axis) + " is not the input axis");
    g.block = e.block_size;
    if (g.block <= 0) bad(name, "block size must be positive");
  }
  const int64_t nb = g.blocks = (K + g.block - 1) / g.block;
  if (e.enc_type == NF_ENC_PER_BLOCK) need *= static_cast<size_t>(nb);
  if (e.num_scales != need) bad(name, std::to_string(e.num_scales) + " scales, expected " + std::to_string(need));
  if (e.enc_type == NF_ENC_LPBQ && e.num_block_ints != static_cast<size_t>(N * nb))
    bad(name, std::to_string(e.num_block_ints) + " per-block int scales, expected " + std::to_string(N * nb));

  g.scale.resize(static_cast<size_t>(N * nb));
  g.zero.resize(g.scale.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      size_t i = static_cast<size_t>(n * nb + b);
      size_t src = e.enc_type == NF_ENC_PER_TENSOR ? 0 : e.enc_type == NF_ENC_PER_BLOCK ? i : static_cast<size_t>(n);
      float s = e.scale[src];
      if (e.enc_type == NF_ENC_LPBQ) s *= static_cast<float>(e.per_block_int_scale[i]);
      g.scale[i] = s;
      g.zero[i] = e.is_sym ? 0.f : static_cast<float>(e.offset[src] + (1 << (g.bits - 1)));
    }
  return g;
}

namespace {

k::PackedWeight from_encoding(const std::string& name, const k::Tensor& w, bool nk, const nf_encoding& e) {
  const int64_t K = nk ? w.dim(1) : w.dim(0), N = nk ? w.dim(0) : w.dim(1);
  const WeightGrid grid = weight_grid(name, K, N, nk, e);
  const int bits = grid.bits;
  const int64_t block = grid.block, nb = grid.blocks;
  const std::vector<float>& scales = grid.scale;
  const std::vector<float>& zeros = grid.zero;
  if (bits <= 8) return k::quantize_with(w.data<float>(), K, N, bits, block, scales.data(), zeros.data(), nk);
  // Wider than the integer kernels: same grid, applied to fp32 weights.
  std::vector<float> fq(static_cast<size_t>(K * N));
  const float qmin = -std::ldexp(1.f, bits - 1), qmax = std::ldexp(1.f, bits - 1) - 1;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t kk = 0; kk < K; ++kk) {
      size_t i = static_cast<size_t>(n * nb + kk / block);
      float v = nk ? w.data<float>()[n * K + kk] : w.data<float>()[kk * N + n];
      float q = std::clamp(std::nearbyint(v / scales[i]) - zeros[i], qmin, qmax);
      fq[n * K + kk] = (q + zeros[i]) * scales[i];
    }
  return k::pack_f32(fq.data(), K, N, true);
}

}  // namespace

k::PackedWeight pack_weight(const std::string& name, const k::Tensor& w, bool nk, const nf_encoding* enc,
                            const SessionOptions& opts) {
  const int64_t K = nk ? w.dim(1) : w.dim(0), N = nk ? w.dim(0) : w.dim(1);
  if (enc && opts.use_encodings && !enc->is_float) return from_encoding(name, w, nk, *enc);
  if (opts.weight_dtype == "int8") return k::quantize_int8(w.data<float>(), K, N, 0, nk);
  if (opts.weight_dtype == "int4") return k::quantize_int4(w.data<float>(), K, N, opts.block_size, nk);
  // One-pass sessions multiply fp32 weights where they are stored. Others copy every weight,
  // [N, K] ones too (a tied LM head read through its Transpose): a first pass reading a
  // mapped file's pages ran at a quarter of the rate it has on the copy (llama100m's 98 MB
  // head: 71 ms of a 150 ms prefill, on a Zen 5 VM), and the copy costs no memory, since the
  // mapped pages go once packed.
  if (opts.stream_weights) {
    auto keep = std::make_shared<k::Tensor>(w);
    return nk ? k::view_f32_nk(w.data<float>(), K, N, keep) : k::view_f32_kn(w.data<float>(), K, N, keep);
  }
  return k::pack_f32(w.data<float>(), K, N, nk);
}

}  // namespace nf::engine
