#include "runner/runner.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph_roles.hpp>

#include <cstring>
#include <numeric>
#include <stdexcept>

namespace nf::host {
namespace {

std::vector<std::string> names_of(const nlohmann::json& list) {
  std::vector<std::string> r;
  for (const auto& v : list) r.push_back(v.at("name").get<std::string>());
  return r;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TensorPtr int64_tensor(std::vector<int64_t> dims, const std::function<int64_t(int64_t)>& value) {
  auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_INT64, std::move(dims)));
  int64_t* p = t->tensor.mutable_as<int64_t>();
  for (int64_t i = 0, n = t->tensor.numel(); i < n; ++i) p[i] = value(i);
  return t;
}

// Keeps the first `len` positions along axis 2 of a [b, h, T, d] cache tensor.
TensorPtr cut_time(const TensorPtr& t, int64_t len) {
  const auto& d = t->tensor.dims;
  if (d.size() != 4 || d[2] < len)
    throw std::runtime_error("runner: a present key/value output holds " +
                             std::to_string(d.size() == 4 ? d[2] : -1) + " positions, expected " + std::to_string(len) +
                             " (past + new tokens, shape [batch, kv_heads, positions, head_dim])");
  if (d[2] == len) return t;
  auto out = ir::make_tensor_ref(ir::Tensor::zeros(t->tensor.dtype, {d[0], d[1], len, d[3]}));
  size_t es = ir::dtype_size(t->tensor.dtype);
  size_t row = static_cast<size_t>(d[3]) * es;
  const uint8_t* src = static_cast<const uint8_t*>(t->tensor.data());
  uint8_t* dst = static_cast<uint8_t*>(out->tensor.mutable_data());
  for (int64_t bh = 0; bh < d[0] * d[1]; ++bh)
    std::memcpy(dst + static_cast<size_t>(bh * len) * row, src + static_cast<size_t>(bh * d[2]) * row,
                static_cast<size_t>(len) * row);
  return out;
}

// [1, h, a, d] ++ [1, h, b, d] along the positions axis.
TensorPtr concat_time(const TensorPtr& a, const TensorPtr& b) {
  const auto& da = a->tensor.dims;
  const auto& db = b->tensor.dims;
  if (da.size() != 4 || db.size() != 4 || da[1] != db[1] || da[3] != db[3] || a->tensor.dtype != b->tensor.dtype)
    throw std::runtime_error("runner: cannot join KV tensors of different shapes");
  auto out = ir::make_tensor_ref(ir::Tensor::zeros(a->tensor.dtype, {1, da[1], da[2] + db[2], da[3]}));
  const size_t row = static_cast<size_t>(da[3]) * ir::dtype_size(a->tensor.dtype);
  auto* dst = static_cast<uint8_t*>(out->tensor.mutable_data());
  for (int64_t h = 0; h < da[1]; ++h) {
    std::memcpy(dst, static_cast<const uint8_t*>(a->tensor.data()) + static_cast<size_t>(h * da[2]) * row,
                static_cast<size_t>(da[2]) * row);
    dst += static_cast<size_t>(da[2]) * row;
    std::memcpy(dst, static_cast<const uint8_t*>(b->tensor.data()) + static_cast<size_t>(h * db[2]) * row,
                static_cast<size_t>(db[2]) * row);
    dst += static_cast<size_t>(db[2]) * row;
  }
  return out;
}

}  // namespace

DecoderIO DecoderIO::from_spec(const nlohmann::json& spec) {
  DecoderIO io;
  io.graph = spec.at("name");
  auto inputs = names_of(spec.at("inputs"));
  auto outputs = names_of(spec.at("outputs"));
  auto need = [&](const std::vector<std::string>& list, const std::string& name, const char* what) {
    if (!contains(list, name))
      throw std::runtime_error("graph '" + io.graph + "' has no " + what + " '" + name +
                               "' (expected the optimum decoder layout: input_ids, attention_mask, "
                               "past_key_values.N.key|value -> logits, present.N.key|value)");
    return name;
  };
  io.input_ids = need(inputs, decoder::kInputIds, "input");
  io.attention_mask = need(inputs, decoder::kAttentionMask, "input");
  io.position_ids = contains(inputs, decoder::kPositionIds) ? decoder::kPositionIds : "";
  io.logits = need(outputs, decoder::kLogits, "output");
  // Layers in order of their number: a graph of another role may number its layers after
  // the target's (a draft's past_key_values.4.* beside a 4-layer target).
  std::vector<int64_t> layers;
  for (const auto& in : inputs)
    if (auto kv = decoder::parse_kv(in); kv && !kv->present && kv->part == decoder::KvPart::Key) layers.push_back(kv->layer);
  std::sort(layers.begin(), layers.end());
  for (int64_t l : layers) {
    io.past_keys.push_back(decoder::past_key(l));
    io.past_values.push_back(need(inputs, decoder::past_value(l), "input"));
    io.present_keys.push_back(need(outputs, decoder::present_key(l), "output"));
    io.present_values.push_back(need(outputs, decoder::present_value(l), "output"));
  }
  if (io.past_keys.empty()) need(inputs, decoder::past_key(0), "input");
  // Any other input is fed per row (a draft's target_hidden_states): float [batch, seq, width].
  for (const auto& in : spec.at("inputs")) {
    const std::string name = in.at("name");
    if (name == io.input_ids || name == io.attention_mask || name == io.position_ids || decoder::is_past_kv(name)) continue;
    const auto& shape = in.value("shape", nlohmann::json::array());
    if (in.value("dtype", "") != "float32" || shape.size() != 3 || !shape[2].is_number_integer() || shape[2].get<int64_t>() <= 0)
      throw std::runtime_error("graph '" + io.graph + "': input '" + name +
                               "' is not a decoder input; other inputs must be per-row float32 [batch, sequence, width]");
    io.row_inputs.push_back({name, shape[2].get<int64_t>()});
  }
  for (const auto& in : spec.at("inputs")) {
    if (in.at("name") != io.past_keys[0]) continue;
    const auto& shape = in.value("shape", nlohmann::json::array());
    if (shape.size() != 4 || !shape[1].is_number_integer() || !shape[3].is_number_integer())
      throw std::runtime_error("graph '" + io.graph + "': " + io.past_keys[0] +
                               " needs a static [batch, kv_heads, past, head_dim] shape");
    io.kv_heads = shape[1];
    io.head_dim = shape[3];
  }
  for (const auto& out : spec.at("outputs"))
    if (out.at("name") == io.logits) {
      const auto& shape = out.value("shape", nlohmann::json::array());
      if (shape.size() == 3 && shape[2].is_number_integer() && shape[2].get<int64_t>() > 0) io.vocab = shape[2];
    }
  if (contains(outputs, decoder::kLastRowLogits)) io.last_row_logits = decoder::kLastRowLogits;
  for (const auto& o : outputs)
    if (o != io.logits && o != io.last_row_logits && !decoder::is_present_kv(o)) io.extra_outputs.push_back(o);
  return io;
}

DynamicRunner::DynamicRunner(BackendSession& session, DecoderIO io)
    : session_(session), io_(std::move(io)), vocab_(io_.vocab) {
  reset();
}

void DynamicRunner::reset() {
  n_past_ = 0;
  keys_.clear();
  values_.clear();
  auto empty = [&] { return ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, io_.kv_heads, 0, io_.head_dim})); };
  for (size_t i = 0; i < io_.past_keys.size(); ++i) {
    keys_.push_back(empty());
    values_.push_back(empty());
  }
  row_paths_.clear();
  row_pass_.clear();
  row_flags_.clear();
  if (!graph_prefix_) {
    prefix_k_.clear();
    prefix_v_.clear();
  }
}

DynamicRunner::Pass DynamicRunner::run(std::span<const int32_t> tokens, bool all_rows, std::span<const int32_t> rows) {
  return run_after(keys_, values_, n_past_, n_past_, tokens, all_rows, rows);
}

DynamicRunner::Pass DynamicRunner::run_after(const std::vector<TensorPtr>& past_k, const std::vector<TensorPtr>& past_v,
                                             int64_t past_len, int64_t first_pos, std::span<const int32_t> tokens,
                                             bool all_rows, std::span<const int32_t> rows) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::runtime_error("runner: no tokens to run");
  std::vector<NamedTensor> in;
  in.push_back({io_.input_ids, int64_tensor({1, n}, [&](int64_t i) { return tokens[static_cast<size_t>(i)]; })});
  in.push_back({io_.attention_mask, int64_tensor({1, past_len + n}, [](int64_t) { return 1; })});
  if (!io_.position_ids.empty())
    in.push_back({io_.position_ids, int64_tensor({1, n}, [&](int64_t i) { return first_pos + i; })});
  for (size_t l = 0; l < past_k.size(); ++l) {
    in.push_back({io_.past_keys[l], past_k[l]});
    in.push_back({io_.past_values[l], past_v[l]});
  }
  for (size_t i = 0; i < io_.row_inputs.size(); ++i) {
    const auto& [name, width] = io_.row_inputs[i];
    if (rows.size() != tokens.size() || i >= row_inputs_.size() || row_inputs_[i].empty())
      throw std::runtime_error("runner: graph '" + io_.graph + "' needs its per-row input '" + name +
                               "' for every forward (runner_set_row_input)");
    auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, n, width}));
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(t->tensor.mutable_as<float>() + r * width,
                  row_inputs_[i].data() + static_cast<size_t>(rows[static_cast<size_t>(r)] * width),
                  static_cast<size_t>(width) * sizeof(float));
    in.push_back({name, t});
  }
  // One row's logits are all a prefill needs: the head then runs on that row alone.
  const bool last_row_only = !all_rows && n > 1 && !io_.last_row_logits.empty();
  std::vector<std::string> out{last_row_only ? io_.last_row_logits : io_.logits};
  for (size_t l = 0; l < keys_.size(); ++l) {
    out.push_back(io_.present_keys[l]);
    out.push_back(io_.present_values[l]);
  }
  for (const auto& e : io_.extra_outputs) out.push_back(e);

  auto result = session_.run(io_.graph, in, out);
  ++passes_;
  const ir::Tensor& logits = result[0]->tensor;
  const int64_t out_rows = last_row_only ? 1 : n;
  if (logits.dtype != NF_DTYPE_FLOAT32 || logits.dims.size() != 3 || logits.dims[1] != out_rows)
    throw std::runtime_error("runner: " + out[0] + " of graph '" + io_.graph + "' is not float32 [1, " +
                             std::to_string(out_rows) + ", vocab]");
  vocab_ = logits.dims[2];
  Pass p;
  const float* lp = logits.as<float>();
  if (all_rows)
    p.logits.assign(lp, lp + n * vocab_);
  else
    p.logits.assign(lp + (out_rows - 1) * vocab_, lp + out_rows * vocab_);
  for (size_t l = 0; l < keys_.size(); ++l) {
    p.keys.push_back(result[1 + 2 * l]);
    p.values.push_back(result[2 + 2 * l]);
  }
  for (size_t e = 0; e < io_.extra_outputs.size(); ++e) p.extras.push_back(result[1 + 2 * keys_.size() + e]);
  return p;
}

void DynamicRunner::adopt(Pass& p, int64_t new_len) {
  for (size_t l = 0; l < keys_.size(); ++l) {
    keys_[l] = cut_time(p.keys[l], new_len);
    values_[l] = cut_time(p.values[l], new_len);
  }
  extras_ = p.extras;
  n_past_ = new_len;
}

std::vector<float> DynamicRunner::append(std::span<const int32_t> tokens, bool all_rows) {
  std::vector<int32_t> rows(tokens.size());
  std::iota(rows.begin(), rows.end(), 0);
  Pass p = run(tokens, all_rows, rows);
  row_inputs_.clear();
  adopt(p, n_past_ + static_cast<int64_t>(tokens.size()));
  row_paths_.clear();
  row_pass_.clear();
  return std::move(p.logits);
}

void DynamicRunner::forward(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) {
  row_flags_.clear();
  if (n_rows == 0) throw std::runtime_error("runner: forward with no rows");
  if (n_rows > max_rows()) throw std::runtime_error("runner: " + std::to_string(n_rows) + " rows exceed the limit of " +
                                                    std::to_string(max_rows()));
  std::vector<std::vector<int32_t>> paths(n_rows);
  std::vector<bool> has_child(n_rows, false);
  for (size_t r = 0; r < n_rows; ++r) {
    int32_t p = parents[r];
    if (p >= static_cast<int32_t>(r) || p < -1)
      throw std::runtime_error("runner: row " + std::to_string(r) + " has parent " + std::to_string(p) +
                               " (a parent must be an earlier row or -1)");
    if (p >= 0) {
      paths[r] = paths[static_cast<size_t>(p)];
      has_child[static_cast<size_t>(p)] = true;
    }
    paths[r].push_back(static_cast<int32_t>(r));
  }
  row_pass_.assign(n_rows, nullptr);
  for (size_t leaf = 0; leaf < n_rows; ++leaf) {
    if (has_child[leaf]) continue;
    std::vector<int32_t> toks;
    for (int32_t r : paths[leaf]) toks.push_back(tokens[r]);
    auto pass = std::make_shared<Pass>(run(toks, true, paths[leaf]));
    for (size_t d = 0; d < paths[leaf].size(); ++d) {
      size_t r = static_cast<size_t>(paths[leaf][d]);
      std::memcpy(logits + r * static_cast<size_t>(vocab_), pass->logits.data() + d * static_cast<size_t>(vocab_),
                  static_cast<size_t>(vocab_) * sizeof(float));
      if (!row_pass_[r]) row_pass_[r] = pass;
    }
  }
  // Extra outputs per row, in row order, as the static runner gives them: [1, n_rows, ...].
  extras_.clear();
  for (size_t e = 0; e < io_.extra_outputs.size(); ++e) extras_.push_back(gather_rows(e, paths));
  row_paths_ = std::move(paths);
  row_inputs_.clear();
}

void DynamicRunner::set_row_input(const char* name, const float* data, size_t n_rows, size_t width) {
  for (size_t i = 0; i < io_.row_inputs.size(); ++i) {
    if (io_.row_inputs[i].first != name) continue;
    if (static_cast<int64_t>(width) != io_.row_inputs[i].second)
      throw std::runtime_error("runner: per-row input '" + std::string(name) + "' of graph '" + io_.graph + "' is " +
                               std::to_string(io_.row_inputs[i].second) + " wide, given " + std::to_string(width));
    row_inputs_.resize(io_.row_inputs.size());
    row_inputs_[i].assign(data, data + n_rows * width);
    return;
  }
  Runner::set_row_input(name, data, n_rows, width);
}

TensorPtr DynamicRunner::gather_rows(size_t e, const std::vector<std::vector<int32_t>>& paths) const {
  const ir::Tensor& first = row_pass_[0]->extras[e]->tensor;
  if (first.dims.size() < 2 || first.dims[0] != 1) return row_pass_.back()->extras[e];  // not per row
  std::vector<int64_t> dims = first.dims;
  dims[1] = static_cast<int64_t>(paths.size());
  auto out = ir::make_tensor_ref(ir::Tensor::zeros(first.dtype, dims));
  size_t row_bytes = ir::dtype_size(first.dtype);
  for (size_t d = 2; d < dims.size(); ++d) row_bytes *= static_cast<size_t>(dims[d]);
  auto* dst = static_cast<uint8_t*>(out->tensor.mutable_data());
  for (size_t r = 0; r < paths.size(); ++r) {
    const ir::Tensor& src = row_pass_[r]->extras[e]->tensor;
    size_t depth = paths[r].size() - 1;
    if (src.dims.size() != dims.size() || src.dims[1] <= static_cast<int64_t>(depth))
      throw std::runtime_error("runner: extra output '" + io_.extra_outputs[e] + "' has no row per token");
    std::memcpy(dst + r * row_bytes, static_cast<const uint8_t*>(src.data()) + depth * row_bytes, row_bytes);
  }
  return out;
}

void DynamicRunner::commit(const int32_t* rows, size_t n) {
  if (n == 0) return;
  for (size_t i = 0; i < n; ++i) {
    size_t r = static_cast<size_t>(rows[i]);
    if (rows[i] < 0 || r >= row_paths_.size())
      throw std::runtime_error("runner: commit of row " + std::to_string(rows[i]) + " that the last forward did not score");
    if (row_paths_[r].size() != i + 1 || (i > 0 && row_paths_[r][i - 1] != rows[i - 1]))
      throw std::runtime_error("runner: committed rows must form a path from a root, in order");
    if (r < row_flags_.size() && row_flags_[r])
      throw std::runtime_error("runner: row " + std::to_string(r) + " is a flagged (scratch) row and cannot be committed");
  }
  // The pass of the last row holds its whole path as a prefix. Extra outputs stay the
  // last forward's, per row.
  auto extras = std::move(extras_);
  adopt(*row_pass_[static_cast<size_t>(rows[n - 1])], n_past_ + static_cast<int64_t>(n));
  extras_ = std::move(extras);
  row_paths_.clear();
  row_pass_.clear();
}

nf_tensor* DynamicRunner::last_output(const char* name) {
  for (size_t e = 0; e < io_.extra_outputs.size() && e < extras_.size(); ++e)
    if (io_.extra_outputs[e] == name) return handle(extras_[e].get());
  return nullptr;
}

void check_row_flags(const int32_t* parents, const uint32_t* flags, size_t n_rows, size_t prefix_rows) {
  if (!flags) return;
  for (size_t r = 0; r < n_rows; ++r) {
    if (flags[r] & ~NF_ROW_SEES_PREFIX)
      throw std::runtime_error("runner: row " + std::to_string(r) + " has unknown flags " + std::to_string(flags[r]));
    if ((flags[r] & NF_ROW_SEES_PREFIX) && prefix_rows == 0)
      throw std::runtime_error("runner: row " + std::to_string(r) +
                               " is flagged to see the prefix KV, but the graphs hold none (role kv_prefix) and none is set");
    if (parents[r] >= 0 && parents[r] < static_cast<int32_t>(r) && flags[parents[r]] && !flags[r])
      throw std::runtime_error("runner: row " + std::to_string(r) + " is plain under flagged row " +
                               std::to_string(parents[r]) + " (a flagged row's children must be flagged)");
  }
}

// Prefix KV as [1, kv_heads, n, head_dim] per layer, from [layers][kv_heads][n][head_dim].
void DynamicRunner::set_prefix_kv(size_t layers, size_t kv_heads, size_t n, size_t head_dim, const float* keys,
                                  const float* values) {
  if (graph_prefix_)
    throw std::runtime_error("runner: the model's graphs hold their own KV prefix (role kv_prefix); the host cannot set one");
  if (n > 0 && (layers != io_.past_keys.size() || static_cast<int64_t>(kv_heads) != io_.kv_heads ||
                static_cast<int64_t>(head_dim) != io_.head_dim))
    throw std::runtime_error("runner: prefix KV is [" + std::to_string(layers) + " layers, " + std::to_string(kv_heads) +
                             " kv heads, head_dim " + std::to_string(head_dim) + "], the model's cache is [" +
                             std::to_string(io_.past_keys.size()) + ", " + std::to_string(io_.kv_heads) + ", " +
                             std::to_string(io_.head_dim) + "]");
  if (n > 0 && io_.position_ids.empty())
    throw std::runtime_error("runner: graph '" + io_.graph + "' has no position_ids input; prefix KV rows need explicit positions");
  prefix_k_.clear();
  prefix_v_.clear();
  const size_t per_layer = kv_heads * n * head_dim;
  for (size_t l = 0; n > 0 && l < layers; ++l)
    for (bool key : {true, false}) {
      auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, io_.kv_heads, static_cast<int64_t>(n), io_.head_dim}));
      const float* src = (key ? keys : values) + l * per_layer;
      std::copy(src, src + per_layer, t->tensor.mutable_as<float>());
      (key ? prefix_k_ : prefix_v_).push_back(std::move(t));
    }
}

void DynamicRunner::hold_graph_prefix(const std::string& graph, int64_t rows) {
  if (io_.position_ids.empty())
    throw std::runtime_error("runner: graph '" + io_.graph + "' has no position_ids input; prefix KV rows need explicit positions");
  std::vector<std::string> names;
  for (size_t l = 0; l < io_.past_keys.size(); ++l)
    for (bool key : {true, false}) names.push_back(roles::kv_prefix_output(static_cast<int64_t>(l), key));
  std::vector<TensorPtr> out = session_.run(graph, {}, names);
  const std::vector<int64_t> want{1, io_.kv_heads, rows, io_.head_dim};
  prefix_k_.clear();
  prefix_v_.clear();
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i]->tensor.dtype != NF_DTYPE_FLOAT32 || out[i]->tensor.dims != want)
      throw std::runtime_error("runner: KV prefix graph '" + graph + "' output " + names[i] +
                               " is not float32 [1, " + std::to_string(io_.kv_heads) + ", " + std::to_string(rows) +
                               ", " + std::to_string(io_.head_dim) + "]");
    (i % 2 ? prefix_v_ : prefix_k_).push_back(out[i]);
  }
  graph_prefix_ = true;
}

void DynamicRunner::forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                                  float* logits) {
  bool any = false;
  for (size_t r = 0; flags && r < n_rows; ++r) any |= flags[r] != 0;
  if (!any) return forward(tokens, parents, n_rows, logits);
  if (!io_.row_inputs.empty()) throw std::runtime_error("runner: flagged rows with per-row inputs are not supported");
  if (n_rows > max_rows()) throw std::runtime_error("runner: " + std::to_string(n_rows) + " rows exceed the limit of " +
                                                    std::to_string(max_rows()));
  const size_t P = prefix_k_.empty() ? 0 : static_cast<size_t>(prefix_k_[0]->tensor.dims[2]);
  check_row_flags(parents, flags, n_rows, P);
  std::vector<std::vector<int32_t>> paths(n_rows);
  std::vector<bool> has_child(n_rows, false), has_plain_child(n_rows, false);
  for (size_t r = 0; r < n_rows; ++r) {
    int32_t p = parents[r];
    if (p >= static_cast<int32_t>(r) || p < -1)
      throw std::runtime_error("runner: row " + std::to_string(r) + " has parent " + std::to_string(p) +
                               " (a parent must be an earlier row or -1)");
    if (p >= 0) {
      paths[r] = paths[static_cast<size_t>(p)];
      has_child[static_cast<size_t>(p)] = true;
      if (!flags[r]) has_plain_child[static_cast<size_t>(p)] = true;
    }
    paths[r].push_back(static_cast<int32_t>(r));
  }
  auto take_logits = [&](const Pass& pass, const std::vector<int32_t>& rows, size_t from) {
    const size_t V = static_cast<size_t>(vocab_);
    for (size_t d = from; d < rows.size(); ++d)
      std::memcpy(logits + static_cast<size_t>(rows[d]) * V, pass.logits.data() + (d - from) * V, V * sizeof(float));
  };
  // Plain rows: one pass per plain path end, after the committed cache.
  row_pass_.assign(n_rows, nullptr);
  for (size_t end = 0; end < n_rows; ++end) {
    if (flags[end] || has_plain_child[end]) continue;
    std::vector<int32_t> toks;
    for (int32_t r : paths[end]) toks.push_back(tokens[r]);
    auto pass = std::make_shared<Pass>(run(toks, true, paths[end]));
    take_logits(*pass, paths[end], 0);
    for (int32_t r : paths[end])
      if (!row_pass_[static_cast<size_t>(r)]) row_pass_[static_cast<size_t>(r)] = pass;
  }
  // Flagged tails: one pass per flagged leaf after [prefix | committed | its plain rows].
  for (size_t leaf = 0; leaf < n_rows; ++leaf) {
    if (!flags[leaf] || has_child[leaf]) continue;
    const auto& path = paths[leaf];
    size_t d0 = 0;
    while (!flags[static_cast<size_t>(path[d0])]) ++d0;
    std::vector<TensorPtr> pk, pv;
    for (size_t l = 0; l < keys_.size(); ++l) {
      TensorPtr bk = keys_[l], bv = values_[l];
      if (d0 > 0) {
        const Pass& base = *row_pass_[static_cast<size_t>(path[d0 - 1])];
        bk = cut_time(base.keys[l], n_past_ + static_cast<int64_t>(d0));
        bv = cut_time(base.values[l], n_past_ + static_cast<int64_t>(d0));
      }
      pk.push_back(concat_time(prefix_k_[l], bk));
      pv.push_back(concat_time(prefix_v_[l], bv));
    }
    std::vector<int32_t> toks;
    for (size_t d = d0; d < path.size(); ++d) toks.push_back(tokens[path[d]]);
    Pass pass = run_after(pk, pv, static_cast<int64_t>(P) + n_past_ + static_cast<int64_t>(d0),
                          n_past_ + static_cast<int64_t>(d0), toks, true, {});
    take_logits(pass, path, d0);
  }
  extras_.clear();  // per-row extra outputs are not gathered for flagged calls
  row_paths_ = std::move(paths);
  row_flags_.assign(flags, flags + n_rows);
}

}  // namespace nf::host
