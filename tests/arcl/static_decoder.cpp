#include "static_decoder.h"

#include <algorithm>
#include <stdexcept>

namespace arcl_test {
namespace {

constexpr float kMasked = -65504.f;

nf::host::TensorPtr make_tensor(nf_dtype dtype, std::vector<int64_t> dims, const void* data) {
  nf::ir::Tensor t = nf::ir::Tensor::zeros(dtype, std::move(dims));
  std::copy_n(static_cast<const uint8_t*>(data), t.nbytes(), static_cast<uint8_t*>(t.mutable_data()));
  return nf::ir::make_tensor_ref(std::move(t));
}

}  // namespace

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

StaticDecoder::StaticDecoder(nf::host::BackendSession& session, const nlohmann::json& io)
    : session_(session), io_(io) {
  htp_ = io.at("kv_layout") == "htp";
  layers_ = io.at("layers");
  kv_heads_ = io.at("kv_heads");
  head_dim_ = io.at("head_dim");
  vocab_ = io.at("vocab");
  window_ = io.at("sliding_window").is_null() ? 0 : io.at("sliding_window").get<int64_t>();
  sliding_.assign(layers_, false);
  for (int64_t l : io.at("sliding_layers")) sliding_[l] = true;
  keys_.resize(layers_);
  values_.resize(layers_);
}

std::vector<float> StaticDecoder::mask(int64_t ar, int64_t columns, int64_t n_rows, int64_t cached,
                                       int64_t window) const {
  const int64_t slots = columns - ar;
  std::vector<float> m(ar * columns, kMasked);
  for (int64_t i = 0; i < ar; ++i) {
    float* row = &m[i * columns];
    if (i >= n_rows) {  // padding row: sees itself only
      row[slots + i] = 0.f;
      continue;
    }
    const int64_t p = n_past_ + i;
    auto visible = [&](int64_t q) { return q <= p && (window == 0 || p - q < window); };
    for (int64_t s = 0; s < cached; ++s)
      if (visible(n_past_ - cached + s)) row[s] = 0.f;
    for (int64_t k = 0; k <= i; ++k)
      if (visible(n_past_ + k)) row[slots + k] = 0.f;
  }
  return m;
}

std::vector<float> StaticDecoder::step(const VariantIO& v, std::span<const int32_t> tokens) {
  const int64_t ar = v.ar, n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n > ar) throw std::invalid_argument("step: 1..AR tokens");
  std::vector<nf::host::NamedTensor> in;
  std::vector<int64_t> ids(ar, 0), pos(ar);
  for (int64_t i = 0; i < n; ++i) ids[i] = tokens[i];
  for (int64_t i = 0; i < ar; ++i) pos[i] = n_past_ + i;
  in.push_back({"input_ids", make_tensor(NF_DTYPE_INT64, {1, ar}, ids.data())});
  in.push_back({"position_ids", make_tensor(NF_DTYPE_INT64, {1, ar}, pos.data())});

  // attention_mask carries the window unless the sliding layers have their own mask.
  bool sliding_mask = false;
  for (int64_t l = 0; l < layers_; ++l) sliding_mask |= sliding_[l] && (v.scl || !std::all_of(sliding_.begin(), sliding_.end(), [](bool b) { return b; }));
  const int64_t full_slots = v.cl - ar;
  const int64_t full_window = sliding_mask ? 0 : window_;
  auto full = mask(ar, v.cl, n, std::min(n_past_, full_slots), full_window);
  in.push_back({"attention_mask", make_tensor(NF_DTYPE_FLOAT32, {1, 1, ar, v.cl}, full.data())});
  const int64_t sliding_columns = v.scl.value_or(v.cl);
  if (sliding_mask) {
    auto sm = mask(ar, sliding_columns, n, std::min(n_past_, sliding_columns - ar), window_);
    in.push_back({"sliding_attention_mask", make_tensor(NF_DTYPE_FLOAT32, {1, 1, ar, sliding_columns}, sm.data())});
  }

  const int64_t hd = kv_heads_ * head_dim_;
  for (int64_t l = 0; l < layers_; ++l) {
    const int64_t slots = (v.scl && sliding_[l] ? *v.scl : v.cl) - ar;
    const int64_t cached = std::min(n_past_, slots);
    std::vector<float> k(hd * slots, 0.f), val(hd * slots, 0.f);
    for (int64_t s = 0; s < cached; ++s) {
      const auto& krow = keys_[l][n_past_ - cached + s];
      const auto& vrow = values_[l][n_past_ - cached + s];
      for (int64_t h = 0; h < kv_heads_; ++h)
        for (int64_t j = 0; j < head_dim_; ++j) {
          // hf key/value [1, h, slot, d]; htp key [h, 1, d, slot], value [h, 1, slot, d]
          int64_t kidx = htp_ ? (h * head_dim_ + j) * slots + s : (h * slots + s) * head_dim_ + j;
          k[kidx] = krow[h * head_dim_ + j];
          val[(h * slots + s) * head_dim_ + j] = vrow[h * head_dim_ + j];
        }
    }
    std::vector<int64_t> kd = htp_ ? std::vector<int64_t>{kv_heads_, 1, head_dim_, slots}
                                   : std::vector<int64_t>{1, kv_heads_, slots, head_dim_};
    std::vector<int64_t> vd = htp_ ? std::vector<int64_t>{kv_heads_, 1, slots, head_dim_}
                                   : std::vector<int64_t>{1, kv_heads_, slots, head_dim_};
    in.push_back({"past_key_values." + std::to_string(l) + ".key", make_tensor(NF_DTYPE_FLOAT32, kd, k.data())});
    in.push_back({"past_key_values." + std::to_string(l) + ".value", make_tensor(NF_DTYPE_FLOAT32, vd, val.data())});
  }

  std::vector<std::string> outs{"logits"};
  for (int64_t l = 0; l < layers_; ++l) {
    outs.push_back("present." + std::to_string(l) + ".key");
    outs.push_back("present." + std::to_string(l) + ".value");
  }
  auto result = session_.run(v.graph, in, outs);

  // Commit the real rows' keys and values.
  for (int64_t l = 0; l < layers_; ++l) {
    const float* k = result[1 + 2 * l]->tensor.as<float>();
    const float* val = result[2 + 2 * l]->tensor.as<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> krow(hd), vrow(hd);
      for (int64_t h = 0; h < kv_heads_; ++h)
        for (int64_t j = 0; j < head_dim_; ++j) {
          int64_t kidx = htp_ ? (h * head_dim_ + j) * ar + i : (h * ar + i) * head_dim_ + j;
          krow[h * head_dim_ + j] = k[kidx];
          vrow[h * head_dim_ + j] = val[(h * ar + i) * head_dim_ + j];
        }
      keys_[l].push_back(std::move(krow));
      values_[l].push_back(std::move(vrow));
    }
  }
  n_past_ += n;
  const float* logits = result[0]->tensor.as<float>();
  return std::vector<float>(logits + (n - 1) * vocab_, logits + n * vocab_);
}

std::vector<float> StaticDecoder::prefill(const VariantIO& v, std::span<const int32_t> tokens) {
  std::vector<float> logits;
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(v.ar))
    logits = step(v, tokens.subspan(at, std::min<size_t>(v.ar, tokens.size() - at)));
  return logits;
}

}  // namespace arcl_test
