#include "draft_model.h"

#include <npuforge/plugin.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace eaglet {
namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void rms_norm(const float* x, const float* w, float eps, int64_t n, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * scale);
}

}  // namespace

DraftFile read_draft_file(const std::string& dir) {
  DraftFile f;
  f.path = dir + "/draft.json";
  const std::string& json_path = f.path;
  std::ifstream jf(json_path);
  if (!jf) throw nf::Error("eaglet: no draft at '" + json_path + "' (train one with tools/speculative/train_eaglet.py)");
  f.meta = nlohmann::json::parse(jf, nullptr, false);
  const nlohmann::json& meta = f.meta;
  if (meta.is_discarded() || meta.value("format", "") != "npuforge-eaglet-draft" || meta.value("version", 0) != 1)
    throw nf::Error("eaglet: '" + json_path + "' is not an npuforge-eaglet-draft version 1 file");
  DraftConfig& k = f.config;
  try {
    const auto& c = meta.at("config");
    k.vocab = c.at("vocab_size");
    k.hidden = c.at("hidden_size");
    k.inter = c.at("intermediate_size");
    k.heads = c.at("num_attention_heads");
    k.kv_heads = c.at("num_key_value_heads");
    k.head_dim = c.at("head_dim");
    k.eps = c.at("rms_norm_eps");
    k.theta = c.at("rope_theta");
    k.confidence_scale = meta.value("confidence_scale", 1.f);
  } catch (const std::exception& e) {
    throw nf::Error("eaglet: '" + json_path + "' config: " + e.what());
  }
  if (k.vocab <= 0 || k.hidden <= 0 || k.inter <= 0 || k.heads <= 0 || k.kv_heads <= 0 || k.head_dim <= 0 ||
      k.heads % k.kv_heads != 0 || k.head_dim % 2 != 0 || !(k.confidence_scale > 0.f) ||
      !std::isfinite(k.confidence_scale))
    throw nf::Error("eaglet: '" + json_path + "' has an inconsistent config");
  return f;
}

std::vector<int32_t> head_tokens(const DraftFile& f, int64_t n, int64_t vocab) {
  if (n <= 0 || n >= vocab) return {};
  const std::string& json_path = f.path;
  const nlohmann::json map = f.meta.value("token_map", nlohmann::json());
  if (!map.is_array() || static_cast<int64_t>(map.size()) != vocab)
    throw nf::Error("eaglet: draft_vocab needs the draft's token_map (" + json_path +
                    "; add it with train_eaglet.py --token-map-only)");
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) {
    const nlohmann::json& t = map[static_cast<size_t>(i)];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw nf::Error("eaglet: token_map of '" + json_path + "' holds " + t.dump() + ", not a token id");
    tokens.push_back(t.get<int32_t>());
  }
  return tokens;
}

std::vector<std::array<int64_t, 2>> Draft::linear_shapes() const {
  const DraftConfig& k = cfg_;
  const int64_t H = k.hidden, Q = k.heads * k.head_dim, KV = k.kv_heads * k.head_dim;
  return {{2 * H, H}, {H, Q}, {H, KV}, {H, KV}, {Q, H}, {H, k.inter}, {H, k.inter}, {k.inter, H}, {H, head_size()}};
}

int64_t Draft::macs_per_row() const {
  int64_t m = 0;
  for (const auto& [K, N] : linear_shapes()) m += K * N;
  return m;
}

size_t Draft::weight_bytes_per_pass() const { return static_cast<size_t>(macs_per_row()) * sizeof(float); }

DraftModel::DraftModel(const std::string& dir, int64_t head_vocab) {
  const DraftFile file = read_draft_file(dir);
  cfg_ = file.config;
  const nlohmann::json& meta = file.meta;
  const std::string bin_path = dir + "/draft.bin";
  std::ifstream bf(bin_path, std::ios::binary);
  if (!bf) throw nf::Error("eaglet: missing '" + bin_path + "' next to draft.json");
  std::string blob((std::istreambuf_iterator<char>(bf)), std::istreambuf_iterator<char>());
  const DraftConfig& k = cfg_;
  auto load = [&](const char* name, std::vector<int64_t> shape) {
    const auto& tensors = meta.value("tensors", nlohmann::json::object());
    if (!tensors.contains(name)) throw nf::Error("eaglet: '" + file.path + "' has no tensor '" + name + "'");
    const auto& t = tensors[name];
    if (t.value("dtype", "") != "float16" || t.value("shape", std::vector<int64_t>{}) != shape) {
      std::ostringstream want;
      for (int64_t d : shape) want << (want.tellp() > 0 ? "x" : "") << d;
      throw nf::Error("eaglet: tensor '" + std::string(name) + "' of '" + file.path + "' should be float16 " +
                      want.str() + " (the draft's config)");
    }
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    const size_t off = t.value("offset", static_cast<size_t>(0));
    if (off + 2 * n > blob.size())
      throw nf::Error("eaglet: tensor '" + std::string(name) + "' lies past the end of '" + bin_path + "'");
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, blob.data() + off + 2 * i, 2);
      out[i] = half_to_float(h);
    }
    return out;
  };
  const int64_t H = k.hidden, Q = k.heads * k.head_dim, KV = k.kv_heads * k.head_dim;
  // torch Linear weights are [out, in]: the packed layout's [N, K].
  auto linear = [&](const char* name, int64_t out, int64_t in) {
    return nf::kernels::pack_f32(load(name, {out, in}).data(), in, out, true);
  };
  embed_ = load("embed", {k.vocab, H});
  head_tokens_ = head_tokens(file, head_vocab, k.vocab);
  if (!head_tokens_.empty()) {
    std::vector<float> full = load("lm_head", {k.vocab, H}), rows(head_tokens_.size() * static_cast<size_t>(H));
    for (size_t i = 0; i < head_tokens_.size(); ++i)
      std::copy(full.begin() + head_tokens_[i] * H, full.begin() + (head_tokens_[i] + 1) * H, rows.begin() + static_cast<long>(i) * H);
    lm_head_ = nf::kernels::pack_f32(rows.data(), H, static_cast<int64_t>(head_tokens_.size()), true);
  } else {
    lm_head_ = linear("lm_head", k.vocab, H);
  }
  fc_ = linear("fc.weight", H, 2 * H);
  fc_bias_ = load("fc.bias", {H});
  input_norm_ = load("input_norm", {H});
  q_ = linear("q_proj", Q, H);
  k_ = linear("k_proj", KV, H);
  v_ = linear("v_proj", KV, H);
  o_ = linear("o_proj", H, Q);
  post_norm_ = load("post_norm", {H});
  gate_ = linear("gate_proj", k.inter, H);
  up_ = linear("up_proj", k.inter, H);
  down_ = linear("down_proj", H, k.inter);
  final_norm_ = load("final_norm", {H});
  for (int64_t i = 0; i < k.head_dim / 2; ++i)
    inv_freq_.push_back(1.f / std::pow(k.theta, static_cast<float>(2 * i) / static_cast<float>(k.head_dim)));
}

void DraftModel::rope(float* x, int64_t n_heads, int64_t position) const {
  const int64_t half = cfg_.head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * cfg_.head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = static_cast<float>(position) * inv_freq_[static_cast<size_t>(i)];
      const float c = std::cos(a), s = std::sin(a), x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c - x2 * s;
      v[i + half] = x2 * c + x1 * s;
    }
  }
}

template <class Visible, class Store>
void DraftModel::forward(std::span<const Row> rows, Visible visible, Store store, float* features, float* logits) {
  count_pass(rows.size());
  const DraftConfig& k = cfg_;
  const int64_t M = static_cast<int64_t>(rows.size()), H = k.hidden, Q = k.heads * k.head_dim,
                KV = k.kv_heads * k.head_dim, hd = k.head_dim;
  std::vector<float> in(static_cast<size_t>(M * 2 * H)), x(static_cast<size_t>(M * H)), n(static_cast<size_t>(M * H));
  for (int64_t r = 0; r < M; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    std::memcpy(&in[static_cast<size_t>(r * 2 * H)], embedding(row.token), static_cast<size_t>(H) * sizeof(float));
    std::memcpy(&in[static_cast<size_t>(r * 2 * H + H)], row.feature, static_cast<size_t>(H) * sizeof(float));
  }
  nf::kernels::linear(in.data(), M, fc_, fc_bias_.data(), x.data(), 1);
  for (int64_t r = 0; r < M; ++r) rms_norm(&x[static_cast<size_t>(r * H)], input_norm_.data(), k.eps, H, &n[static_cast<size_t>(r * H)]);
  std::vector<float> q(static_cast<size_t>(M * Q)), kk(static_cast<size_t>(M * KV)), vv(static_cast<size_t>(M * KV));
  nf::kernels::linear(n.data(), M, q_, nullptr, q.data(), 1);
  nf::kernels::linear(n.data(), M, k_, nullptr, kk.data(), 1);
  nf::kernels::linear(n.data(), M, v_, nullptr, vv.data(), 1);
  for (int64_t r = 0; r < M; ++r) {
    rope(&q[static_cast<size_t>(r * Q)], k.heads, rows[static_cast<size_t>(r)].position);
    rope(&kk[static_cast<size_t>(r * KV)], k.kv_heads, rows[static_cast<size_t>(r)].position);
  }
  // Store every row's K/V first: a row's own entry is among what it sees.
  std::vector<std::vector<std::pair<const float*, const float*>>> seen(static_cast<size_t>(M));
  for (int64_t r = 0; r < M; ++r) store(static_cast<size_t>(r), &kk[static_cast<size_t>(r * KV)], &vv[static_cast<size_t>(r * KV)]);
  for (int64_t r = 0; r < M; ++r) seen[static_cast<size_t>(r)] = visible(static_cast<size_t>(r));

  std::vector<float> att(static_cast<size_t>(M * Q), 0.f), scores;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t group = k.heads / k.kv_heads;
  for (int64_t r = 0; r < M; ++r) {
    const auto& kv = seen[static_cast<size_t>(r)];
    scores.resize(kv.size());
    for (int64_t h = 0; h < k.heads; ++h) {
      const float* qh = &q[static_cast<size_t>(r * Q + h * hd)];
      const int64_t g = h / group;
      float mx = -INFINITY;
      for (size_t j = 0; j < kv.size(); ++j) {
        const float* kh = kv[j].first + g * hd;
        float s = 0;
        for (int64_t d = 0; d < hd; ++d) s += qh[d] * kh[d];
        scores[j] = s * scale;
        mx = std::max(mx, scores[j]);
      }
      float sum = 0;
      for (float& s : scores) sum += (s = std::exp(s - mx));
      float* out = &att[static_cast<size_t>(r * Q + h * hd)];
      for (size_t j = 0; j < kv.size(); ++j) {
        const float* vh = kv[j].second + g * hd;
        const float p = scores[j] / sum;
        for (int64_t d = 0; d < hd; ++d) out[d] += p * vh[d];
      }
    }
  }
  nf::kernels::linear(att.data(), M, o_, nullptr, n.data(), 1);
  for (size_t i = 0; i < x.size(); ++i) x[i] += n[i];
  for (int64_t r = 0; r < M; ++r) rms_norm(&x[static_cast<size_t>(r * H)], post_norm_.data(), k.eps, H, &n[static_cast<size_t>(r * H)]);
  std::vector<float> gate(static_cast<size_t>(M * k.inter)), up(static_cast<size_t>(M * k.inter));
  nf::kernels::linear(n.data(), M, gate_, nullptr, gate.data(), 1);
  nf::kernels::linear(n.data(), M, up_, nullptr, up.data(), 1);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
  nf::kernels::linear(gate.data(), M, down_, nullptr, n.data(), 1);
  for (size_t i = 0; i < x.size(); ++i) x[i] += n[i];
  for (int64_t r = 0; r < M; ++r) rms_norm(&x[static_cast<size_t>(r * H)], final_norm_.data(), k.eps, H, features + r * H);
  nf::kernels::linear(features, M, lm_head_, nullptr, logits, 1);
}

void DraftModel::run_committed(std::span<const Row> rows, float* features, float* logits) {
  const size_t KV = static_cast<size_t>(cfg_.kv_heads * cfg_.head_dim), base = cached_;
  cache_k_.resize((base + rows.size()) * KV);
  cache_v_.resize((base + rows.size()) * KV);
  auto store = [&](size_t r, const float* k, const float* v) {
    std::memcpy(&cache_k_[(base + r) * KV], k, KV * sizeof(float));
    std::memcpy(&cache_v_[(base + r) * KV], v, KV * sizeof(float));
  };
  auto visible = [&](size_t r) {
    std::vector<std::pair<const float*, const float*>> kv;
    for (size_t j = 0; j <= base + r; ++j) kv.emplace_back(&cache_k_[j * KV], &cache_v_[j * KV]);
    return kv;
  };
  forward(rows, visible, store, features, logits);
  cached_ = base + rows.size();
}

std::vector<int32_t> DraftModel::run_scratch(std::span<const Row> rows, float* features, float* logits) {
  const size_t KV = static_cast<size_t>(cfg_.kv_heads * cfg_.head_dim), base = scratch_parent_.size();
  scratch_k_.resize((base + rows.size()) * KV);
  scratch_v_.resize((base + rows.size()) * KV);
  std::vector<int32_t> ids;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].parent >= static_cast<int32_t>(base))
      throw nf::Error("eaglet: a draft row's parent must be an earlier scratch entry");
    scratch_parent_.push_back(rows[r].parent);
    ids.push_back(static_cast<int32_t>(base + r));
  }
  auto store = [&](size_t r, const float* k, const float* v) {
    std::memcpy(&scratch_k_[(base + r) * KV], k, KV * sizeof(float));
    std::memcpy(&scratch_v_[(base + r) * KV], v, KV * sizeof(float));
  };
  auto visible = [&](size_t r) {
    std::vector<std::pair<const float*, const float*>> kv;
    for (size_t j = 0; j < cached_; ++j) kv.emplace_back(&cache_k_[j * KV], &cache_v_[j * KV]);
    std::vector<size_t> chain;
    for (int32_t e = static_cast<int32_t>(base + r); e >= 0; e = scratch_parent_[static_cast<size_t>(e)])
      chain.push_back(static_cast<size_t>(e));
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) kv.emplace_back(&scratch_k_[*it * KV], &scratch_v_[*it * KV]);
    return kv;
  };
  forward(rows, visible, store, features, logits);
  return ids;
}

void DraftModel::clear_scratch() {
  scratch_k_.clear();
  scratch_v_.clear();
  scratch_parent_.clear();
}

void DraftModel::clear_cache() {
  clear_scratch();
  cache_k_.clear();
  cache_v_.clear();
  cached_ = 0;
}

}  // namespace eaglet
