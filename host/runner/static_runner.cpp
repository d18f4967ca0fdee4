#include "runner/static_runner.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph_roles.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>

namespace nf::host {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("static runner: " + what); }

int64_t int_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
    fail(std::string("metadata io needs a positive integer '") + key + "'");
  return j[key];
}


// Static dims of a spec entry; empty when the shape is missing or symbolic.
std::vector<int64_t> static_shape(const nlohmann::json& entry) {
  std::vector<int64_t> dims;
  for (const auto& d : entry.value("shape", nlohmann::json::array())) {
    if (!d.is_number_integer()) return {};
    dims.push_back(d);
  }
  return dims;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

StaticIO StaticIO::parse(const nlohmann::json& io, const nlohmann::json& graph_specs) {
  StaticIO s;
  std::string kv = io.value("kv_layout", "hf");
  if (kv != "hf" && kv != "htp") fail("unknown kv_layout '" + kv + "' (expected hf or htp)");
  s.htp = kv == "htp";
  if (io.contains("mask_value") && io["mask_value"].is_number()) s.mask_value = io["mask_value"].get<float>();
  s.layers = int_field(io, "layers");
  if (io.contains("first_layer")) {
    if (!io["first_layer"].is_number_integer() || io["first_layer"].get<int64_t>() < 0)
      fail("metadata io 'first_layer' must be a non-negative integer");
    s.first_layer = io["first_layer"];
  }
  s.kv_heads = int_field(io, "kv_heads");
  s.head_dim = int_field(io, "head_dim");
  if (io.contains("vocab") && io["vocab"].is_number_integer()) s.vocab = io["vocab"];
  if (io.contains("sliding_window") && io["sliding_window"].is_number_integer()) s.window = io["sliding_window"];
  if (io.contains("kv_prefix_rows")) {
    if (!io["kv_prefix_rows"].is_number_unsigned()) fail("metadata io 'kv_prefix_rows' must be a non-negative integer");
    s.prefix_rows = io["kv_prefix_rows"];
  }
  s.sliding.assign(static_cast<size_t>(s.layers), false);
  if (s.window > 0)
    for (const auto& l : io.value("sliding_layers", nlohmann::json::array())) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= s.layers)
        fail("sliding_layers lists " + l.dump() + ", not a layer of " + std::to_string(s.layers));
      s.sliding[l.get<size_t>()] = true;
    }

  std::map<std::string, const nlohmann::json*> specs;
  for (const auto& g : graph_specs) specs[g.at("name").get<std::string>()] = &g;
  if (!io.contains("variants") || !io["variants"].is_array() || io["variants"].empty())
    fail("metadata io lists no variants");

  for (const auto& vj : io["variants"]) {
    Variant v;
    v.name = vj.at("graph").get<std::string>();
    v.ar = vj.at("ar").get<int64_t>();
    v.cl = vj.at("cl").get<int64_t>();
    if (vj.contains("scl") && vj["scl"].is_number_integer()) v.scl = vj["scl"];
    if (v.ar <= 0 || v.cl <= v.ar + s.prefix_rows || (v.scl && v.scl <= v.ar + s.prefix_rows))
      fail("variant '" + v.name + "': needs 0 < AR and AR + kv_prefix_rows < CL (and < SCL)");
    int64_t splits = vj.contains("splits") && vj["splits"].is_number_integer() ? vj["splits"].get<int64_t>() : 1;
    // The split transform lists each variant's parts in run order; without that list the
    // parts follow the naming convention {graph}_{i}_of_{n}.
    std::vector<std::string> names;
    if (vj.contains("parts") && vj["parts"].is_array() && !vj["parts"].empty()) {
      for (const auto& part : vj["parts"]) {
        if (!part.is_object() || !part.contains("graph") || !part["graph"].is_string())
          fail("variant '" + v.name + "': each entry of 'parts' needs a string 'graph'");
        names.push_back(part["graph"]);
      }
      if (splits > 1 && static_cast<int64_t>(names.size()) != splits)
        fail("variant '" + v.name + "' has splits " + std::to_string(splits) + " but lists " +
             std::to_string(names.size()) + " parts");
    } else if (splits <= 1) {
      names.push_back(v.name);
    } else {
      for (int64_t i = 1; i <= splits; ++i)
        names.push_back(v.name + "_" + std::to_string(i) + "_of_" + std::to_string(splits));
    }

    // Inputs come from the runner or, chained by name, from earlier parts' outputs.
    std::set<std::string> produced, fed;
    std::map<std::string, const nlohmann::json*> input_spec;
    bool sliding_mask = false;
    for (const auto& n : names) {
      auto it = specs.find(n);
      if (it == specs.end()) fail("variant graph '" + n + "' is not among the package's graphs");
      Part p;
      p.graph = n;
      for (const auto& in : it->second->at("inputs")) {
        std::string name = in.at("name");
        p.inputs.push_back(name);
        p.dtypes[name] = in.value("dtype", "");
        bool runner_fed = name == decoder::kInputIds || name == decoder::kPositionIds || name == decoder::kAttentionMask ||
                          name == decoder::kSlidingAttentionMask || name == decoder::kKeyPositions ||
                          name == decoder::kSequenceLengths ||
                          decoder::is_past_kv(name);
        // A float [1, AR, width] input nothing else feeds is fed per row (a draft's features).
        if (auto d = static_shape(in); !runner_fed && !produced.count(name) && in.value("dtype", "") == "float32" &&
                                       d.size() == 3 && d[0] == 1 && d[1] == v.ar && d[2] > 0) {
          if (s.row_inputs.count(name) && s.row_inputs[name] != d[2])
            fail("per-row input '" + name + "' has different widths in different variants");
          s.row_inputs[name] = d[2];
          p.dtypes[name] = "float32";
          continue;
        }
        if (!runner_fed && !produced.count(name))
          fail("graph '" + n + "' input '" + name + "' is neither a runner input nor an earlier part's output");
        if (auto kv = decoder::parse_kv(name); kv && (kv->layer < s.first_layer || kv->layer >= s.first_layer + s.layers))
          fail("graph '" + n + "' input '" + name + "' is the cache of a layer the io does not list (layers " +
               std::to_string(s.first_layer) + " to " + std::to_string(s.first_layer + s.layers - 1) + ")");
        if (!runner_fed) v.chained.insert(name);
        if (runner_fed) {
          fed.insert(name);
          input_spec[name] = &in;
        }
        if (name == decoder::kSlidingAttentionMask) sliding_mask = true;
      }
      for (const auto& out : it->second->at("outputs")) {
        p.outputs.push_back(out.at("name"));
        produced.insert(out.at("name").get<std::string>());
        if (out.at("name") == decoder::kLogits && s.vocab == 0) {
          auto d = static_shape(out);
          if (d.size() == 3) s.vocab = d[2];
        }
      }
      v.parts.push_back(std::move(p));
    }
    // A value the source graph had as an output stays an output even when a later part reads it.
    if (vj.contains("parts") && vj["parts"].is_array())
      for (const auto& part : vj["parts"])
        for (const auto& o : part.value("outputs", nlohmann::json::array()))
          if (o.is_string()) v.chained.erase(o.get<std::string>());
    if (!fed.count(decoder::kInputIds) || !produced.count(decoder::kLogits))
      fail("variant '" + v.name + "' needs input_ids and logits");
    auto check_mask = [&](const std::string& name, int64_t cols) {
      if (!input_spec.count(name)) return;
      auto d = static_shape(*input_spec[name]);
      if (d != std::vector<int64_t>{1, 1, v.ar, cols})
        fail("variant '" + v.name + "': " + name + " is " + dims_str(d) + ", expected " +
             dims_str({1, 1, v.ar, cols}));
    };
    check_mask(decoder::kAttentionMask, v.cl);
    if (input_spec.count(decoder::kSequenceLengths) &&
        static_shape(*input_spec[decoder::kSequenceLengths]) != std::vector<int64_t>{1, v.ar})
      fail("variant '" + v.name + "': " + decoder::kSequenceLengths + " is " +
           dims_str(static_shape(*input_spec[decoder::kSequenceLengths])) + ", expected " + dims_str({1, v.ar}));
    if (input_spec.count(decoder::kKeyPositions) && static_shape(*input_spec[decoder::kKeyPositions]) != std::vector<int64_t>{1, v.cl})
      fail("variant '" + v.name + "': " + decoder::kKeyPositions + " is " +
           dims_str(static_shape(*input_spec[decoder::kKeyPositions])) + ", expected " + dims_str({1, v.cl}));
    check_mask(decoder::kSlidingAttentionMask, v.scl ? v.scl : v.cl);  // CL columns when no layer has a short cache

    for (int64_t l = 0; l < s.layers; ++l) {
      for (const auto& name : {s.past_key(l), s.past_value(l)})
        if (!fed.count(name)) fail("variant '" + v.name + "' has no input " + name);
      for (const auto& name : {s.present_key(l), s.present_value(l)})
        if (!produced.count(name)) fail("variant '" + v.name + "' has no output " + name);
      auto kd = static_shape(*input_spec[s.past_key(l)]);
      auto vd = static_shape(*input_spec[s.past_value(l)]);
      int64_t len = kd.size() == 4 ? (s.htp ? kd[3] : kd[2]) : -1;
      std::vector<int64_t> want_k = s.htp ? std::vector<int64_t>{s.kv_heads, 1, s.head_dim, len}
                                          : std::vector<int64_t>{1, s.kv_heads, len, s.head_dim};
      std::vector<int64_t> want_v = s.htp ? std::vector<int64_t>{s.kv_heads, 1, len, s.head_dim}
                                          : std::vector<int64_t>{1, s.kv_heads, len, s.head_dim};
      const int64_t P = s.prefix_rows;  // the graph holds those columns itself
      bool full = len == v.cl - v.ar - P, window = v.scl && len == v.scl - v.ar - P;
      if (kd != want_k || vd != want_v || !(full || window))
        fail("variant '" + v.name + "': " + s.past_key(l) + " " + dims_str(kd) + " / value " + dims_str(vd) +
             " do not match kv_layout " + kv + " with " + std::to_string(v.cl - v.ar - P) +
             (v.scl ? " or " + std::to_string(v.scl - v.ar - P) : std::string()) + " cache slots" +
             (P ? " (" + std::to_string(P) + " KV prefix rows in the graph)" : std::string()));
      if (window && !full && !s.sliding[static_cast<size_t>(l)])
        fail("variant '" + v.name + "': layer " + std::to_string(l) + " has a sliding cache but is not in sliding_layers");
      v.cache_len.push_back(len);
    }

    // The window must be applied exactly: a row at position p sees positions > p - window.
    bool any_sliding = std::find(s.sliding.begin(), s.sliding.end(), true) != s.sliding.end();
    if (any_sliding) {
      bool all_sliding = std::find(s.sliding.begin(), s.sliding.end(), false) == s.sliding.end();
      if (sliding_mask) {
        // Row 0 of a pass needs window-1 earlier positions in the sliding cache; fewer
        // slots are exact only while every committed position still fits.
        if (v.scl && v.scl - v.ar < s.window - 1) v.exact_until = v.scl - v.ar;
      } else if (all_sliding) {
        v.window_in_mask = true;
      } else if (v.cl > s.window) {
        fail("variant '" + v.name + "': layers slide (window " + std::to_string(s.window) +
             ") but the graph has no sliding_attention_mask");
      }
    }
    s.variants.push_back(std::move(v));
  }
  if (s.vocab <= 0) fail("metadata io has no vocab and the logits shape is not static");
  return s;
}

StaticRunner::StaticRunner(BackendSession& session, StaticIO io) : session_(session), io_(std::move(io)) {
  for (const auto& v : io_.variants) {
    max_ar_ = std::max(max_ar_, v.ar);
    max_cl_ = std::max(max_cl_, v.cl);
  }
  reset();
}

void StaticRunner::clear_prefix() {
  prefix_len_ = io_.prefix_rows;  // the graphs' own prefix stays
  prefix_k_.clear();
  prefix_v_.clear();
}

void StaticRunner::reset() {
  // A shared cache empties for every runner sharing it.
  kv_->n_past = 0;
  kv_->capacity = std::max(kv_->capacity, max_cl_);
  size_t per_layer = static_cast<size_t>(io_.kv_heads * kv_->capacity * io_.head_dim);
  kv_->keys.assign(static_cast<size_t>(io_.layers), std::vector<float>(per_layer, 0.f));
  kv_->values.assign(static_cast<size_t>(io_.layers), std::vector<float>(per_layer, 0.f));
  extras_.clear();
  row_pass_.reset();
  row_parents_.clear();
  row_flags_.clear();
  clear_prefix();
  clear_scratch();
}

void StaticRunner::share_cache(StaticRunner& other) {
  if (other.io_.layers != io_.layers || other.io_.first_layer != io_.first_layer || other.io_.kv_heads != io_.kv_heads ||
      other.io_.head_dim != io_.head_dim || other.io_.window || io_.window || other.io_.prefix_rows || io_.prefix_rows)
    fail("graphs that share a KV cache must have the same layers and KV geometry (and no sliding window or prefix)");
  if (other.kv_->capacity < max_cl_)  // a draft's tree graph holds a shorter context than the draft
    fail("a shared KV cache of " + std::to_string(other.kv_->capacity) + " slots is shorter than this runner's context " +
         std::to_string(max_cl_));
  kv_ = other.kv_;
  clear_scratch();
  row_pass_.reset();
  row_parents_.clear();
}

void StaticRunner::clear_scratch() {
  scratch_pos_.clear();
  scratch_parent_.clear();
}

size_t StaticRunner::pick(int64_t rows, bool partial) const {
  auto better = [](const StaticIO::Variant& a, const StaticIO::Variant& b, bool small_ar) {
    if (a.ar != b.ar) return small_ar ? a.ar < b.ar : a.ar > b.ar;
    if (a.cl != b.cl) return a.cl < b.cl;
    return a.scl < b.scl;
  };
  const size_t none = io_.variants.size();
  size_t cover = none, part = none;
  bool short_window = false;
  for (size_t i = 0; i < io_.variants.size(); ++i) {
    const auto& v = io_.variants[i];
    if (held() + v.ar + prefix_len_ > v.cl) continue;  // the prefix KV takes cache slots
    if (held() > v.exact_until - prefix_len_) {
      short_window |= v.ar >= rows || partial;
      continue;
    }
    if (v.ar >= rows) {
      if (cover == none || better(v, io_.variants[cover], true)) cover = i;
    } else if (part == none || better(v, io_.variants[part], false)) {
      part = i;
    }
  }
  if (cover != none) return cover;
  if (partial && part != none) return part;
  if (short_window)
    throw std::runtime_error("runner: no variant runs " + std::to_string(rows) + " rows exactly after " +
                             std::to_string(kv_->n_past) + " tokens: their sliding caches hold fewer than the " +
                             std::to_string(io_.window - 1) + " positions the window needs");
  throw std::runtime_error("runner: context full: " + std::to_string(max_cl_) + " tokens (" + std::to_string(kv_->n_past) +
                           " in the cache, " + (scratch_pos_.empty() ? "" : std::to_string(scratch_pos_.size()) + " scratch rows, ") +
                           (prefix_len_ ? std::to_string(prefix_len_) + " prefix KV rows, " : "") +
                           std::to_string(rows) + " more requested)");
}

size_t StaticRunner::rows_available() const {
  int64_t most = 0;
  for (const auto& v : io_.variants)
    if (held() + v.ar + prefix_len_ <= v.cl && held() <= v.exact_until - prefix_len_) most = std::max(most, v.ar);
  return static_cast<size_t>(most);
}

StaticRunner::Pass StaticRunner::run(size_t vi, std::span<const int32_t> tokens, std::span<const int32_t> parents,
                                     std::span<const int64_t> positions, std::span<const uint32_t> flags,
                                     std::span<const uint8_t> scratch_sees, int64_t prompt_end) {
  const StaticIO::Variant& v = io_.variants[vi];
  const int64_t ar = v.ar, rows = static_cast<int64_t>(tokens.size());
  const int64_t kvh = io_.kv_heads, hd = io_.head_dim;
  const size_t cap = static_cast<size_t>(kv_->capacity);
  const float masked = io_.mask_value;

  // Padding rows sit after the real ones at the next positions; they see only themselves.
  std::vector<int64_t> pos(static_cast<size_t>(ar));
  for (int64_t i = 0; i < ar; ++i) pos[i] = i < rows ? positions[i] : kv_->n_past + i;
  // sees[i * ar + j]: new row j is row i or one of its ancestors.
  std::vector<bool> sees(static_cast<size_t>(ar * ar), false);
  for (int64_t i = 0; i < ar; ++i)
    for (int64_t j = i; j >= 0; j = i < rows ? parents[j] : -1) sees[i * ar + j] = true;

  // Mask over `cols` columns: cache slot c holds store slot start + c (c < cols - AR - P):
  // committed positions, then the scratch rows, each seen by its descendants only; the last
  // P cache slots hold the prefix KV, seen by flagged rows only.
  auto sees_prefix = [&](int64_t i) { return i < rows && !flags.empty() && (flags[i] & NF_ROW_SEES_PREFIX); };
  const int64_t n_scratch = static_cast<int64_t>(scratch_pos_.size());
  auto sees_slot = [&](int64_t i, int64_t slot) {
    if (slot < kv_->n_past) return true;
    const int64_t s = slot - kv_->n_past;
    return s < n_scratch && !scratch_sees.empty() && scratch_sees[static_cast<size_t>(i * n_scratch + s)] != 0;
  };
  auto mask = [&](int64_t cols, bool windowed) {
    const int64_t slots = cols - ar - prefix_len_, start = std::max<int64_t>(0, held() - slots);
    auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, 1, ar, cols}));
    float* m = t->tensor.mutable_as<float>();
    for (int64_t i = 0; i < ar; ++i) {
      float* row = m + i * cols;
      auto near = [&](int64_t q) { return !windowed || q > pos[i] - io_.window; };
      for (int64_t c = 0; c < slots; ++c) row[c] = i < rows && sees_slot(i, start + c) && near(start + c) ? 0.f : masked;
      for (int64_t c = slots; c < slots + prefix_len_; ++c) row[c] = sees_prefix(i) ? 0.f : masked;
      row += prefix_len_;
      for (int64_t j = 0; j < ar; ++j) row[slots + j] = sees[i * ar + j] && near(pos[j]) ? 0.f : masked;
    }
    return t;
  };
  // Each key column's absolute position (ALiBi graphs): the cache slots as the mask lays them
  // out (committed, then scratch rows; empty and prefix slots 0, they are masked), the rows.
  auto key_positions = [&]() {
    const int64_t cols = v.cl, slots = cols - ar - prefix_len_, start = std::max<int64_t>(0, held() - slots);
    auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_INT64, {1, cols}));
    int64_t* kp = t->tensor.mutable_as<int64_t>();
    for (int64_t c = 0; c < slots; ++c) {
      const int64_t slot = start + c, s = slot - kv_->n_past;
      kp[c] = slot < kv_->n_past ? slot : s < n_scratch ? scratch_pos_[static_cast<size_t>(s)] : 0;
    }
    for (int64_t j = 0; j < ar; ++j) kp[slots + prefix_len_ + j] = pos[j];
    return t;
  };
  auto ids = [&](const std::string& dtype, const std::function<int64_t(int64_t)>& value) {
    bool i32 = dtype == "int32";
    auto t = ir::make_tensor_ref(ir::Tensor::zeros(i32 ? NF_DTYPE_INT32 : NF_DTYPE_INT64, {1, ar}));
    for (int64_t i = 0; i < ar; ++i) {
      if (i32)
        t->tensor.mutable_as<int32_t>()[i] = static_cast<int32_t>(value(i));
      else
        t->tensor.mutable_as<int64_t>()[i] = value(i);
    }
    return t;
  };
  // Layer l's store as a cache input of `len` slots (the last len-P slots held, then the P
  // prefix rows the host gave; a graph holding its prefix takes `len` held slots).
  const int64_t host_prefix = static_cast<int64_t>(prefix_k_.empty() ? 0 : prefix_len_);
  auto cache = [&](size_t l, bool key, int64_t len) {
    const int64_t committed = len - host_prefix;
    const int64_t start = std::max<int64_t>(0, held() - committed), n = held() - start;
    const bool transposed = key && io_.htp;
    std::vector<int64_t> dims = io_.htp ? (key ? std::vector<int64_t>{kvh, 1, hd, len} : std::vector<int64_t>{kvh, 1, len, hd})
                                        : std::vector<int64_t>{1, kvh, len, hd};
    auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, dims));
    float* dst = t->tensor.mutable_as<float>();
    const float* src = (key ? kv_->keys : kv_->values)[l].data();
    for (int64_t h = 0; h < kvh; ++h)
      for (int64_t c = 0; c < n; ++c) {
        const float* s = src + (static_cast<size_t>(h) * cap + static_cast<size_t>(start + c)) * static_cast<size_t>(hd);
        if (transposed)
          for (int64_t d = 0; d < hd; ++d) dst[(h * hd + d) * len + c] = s[d];
        else
          std::memcpy(dst + (h * len + c) * hd, s, static_cast<size_t>(hd) * sizeof(float));
      }
    const float* pre = host_prefix ? (key ? prefix_k_ : prefix_v_)[l].data() : nullptr;  // [kvh][P][hd]
    for (int64_t h = 0; h < kvh; ++h)
      for (int64_t c = 0; c < host_prefix; ++c) {
        const float* s = pre + (h * host_prefix + c) * hd;
        if (transposed)
          for (int64_t d = 0; d < hd; ++d) dst[(h * hd + d) * len + committed + c] = s[d];
        else
          std::memcpy(dst + (h * len + committed + c) * hd, s, static_cast<size_t>(hd) * sizeof(float));
      }
    return t;
  };

  TensorPtr main_mask, sliding_mask, column_positions;  // made once, read by every part that takes them
  std::map<std::string, TensorPtr> env;  // outputs of earlier parts, by name
  for (const auto& part : v.parts) {
    std::vector<NamedTensor> in;
    for (const auto& name : part.inputs) {
      const std::string& dtype = part.dtypes.at(name);
      TensorPtr t;
      if (name == decoder::kInputIds) {
        t = ids(dtype, [&](int64_t i) { return i < rows ? tokens[i] : 0; });
      } else if (name == decoder::kPositionIds) {
        t = ids(dtype, [&](int64_t i) { return pos[i]; });
      } else if (name == decoder::kSequenceLengths) {  // padding rows: their position + 1
        t = ids(dtype, [&](int64_t i) { return i < rows && prompt_end > 0 ? prompt_end : pos[i] + 1; });
      } else if (name == decoder::kAttentionMask) {
        if (!main_mask) main_mask = mask(v.cl, v.window_in_mask);
        t = main_mask;
      } else if (name == decoder::kKeyPositions) {
        if (!column_positions) column_positions = key_positions();
        t = column_positions;
      } else if (name == decoder::kSlidingAttentionMask) {
        // CL columns when no layer has a short cache (a window longer than the context).
        if (!sliding_mask) sliding_mask = mask(v.scl ? v.scl : v.cl, true);
        t = sliding_mask;
      } else if (auto kv = decoder::parse_kv(name); kv && !kv->present) {
        const auto l = static_cast<size_t>(kv->layer - io_.first_layer);
        t = cache(l, kv->part == decoder::KvPart::Key, v.cache_len[l]);
      } else if (auto w = io_.row_inputs.find(name); w != io_.row_inputs.end()) {
        auto given = row_inputs_.find(name);
        if (given == row_inputs_.end() || given->second.size() != static_cast<size_t>(rows * w->second))
          fail("graph '" + part.graph + "' needs its per-row input '" + name + "' for each of the pass's " +
               std::to_string(rows) + " rows (runner_set_row_input)");
        t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, ar, w->second}));  // padding rows: zeros
        std::copy(given->second.begin(), given->second.end(), t->tensor.mutable_as<float>());
      } else {
        t = env.at(name);
      }
      in.push_back({name, std::move(t)});
    }
    auto out = session_.run(part.graph, in, part.outputs);
    for (size_t i = 0; i < out.size(); ++i) env[part.outputs[i]] = out[i];
  }
  ++passes_;
  last_variant_ = v.name;

  Pass p;
  p.variant = vi;
  p.rows = rows;
  const ir::Tensor& logits = env.at(decoder::kLogits)->tensor;
  if (logits.dtype != NF_DTYPE_FLOAT32 || logits.dims != std::vector<int64_t>{1, ar, io_.vocab})
    fail("logits of '" + v.name + "' are " + dims_str(logits.dims) + ", expected float32 " +
         dims_str({1, ar, io_.vocab}));
  p.logits.assign(logits.as<float>(), logits.as<float>() + rows * io_.vocab);
  for (int64_t l = 0; l < io_.layers; ++l) {
    for (bool key : {true, false}) {
      TensorPtr t = env.at(key ? io_.present_key(l) : io_.present_value(l));
      if (t->tensor.dtype != NF_DTYPE_FLOAT32 || t->tensor.numel() != kvh * ar * hd)
        fail("'" + v.name + "' output " + (key ? io_.present_key(l) : io_.present_value(l)) + " is " +
             dims_str(t->tensor.dims) + ", expected this pass's " + std::to_string(ar) + " rows");
      (key ? p.keys : p.values).push_back(std::move(t));
    }
  }
  for (auto& [name, t] : env)
    if (name != decoder::kLogits && !decoder::is_present_kv(name) && !v.chained.count(name)) p.extras[name] = t;
  return p;
}

void StaticRunner::keep(const Pass& p, std::span<const int32_t> rows) {
  store(p, rows, kv_->n_past);
  kv_->n_past += static_cast<int64_t>(rows.size());
}

void StaticRunner::store(const Pass& p, std::span<const int32_t> rows, int64_t at) {
  const int64_t ar = io_.variants[p.variant].ar, kvh = io_.kv_heads, hd = io_.head_dim;
  const size_t cap = static_cast<size_t>(kv_->capacity);
  if (at + static_cast<int64_t>(rows.size()) > kv_->capacity) fail("KV store overflow");
  for (size_t l = 0; l < static_cast<size_t>(io_.layers); ++l)
    for (bool key : {true, false}) {
      const float* src = (key ? p.keys : p.values)[l]->tensor.as<float>();
      float* dst = (key ? kv_->keys : kv_->values)[l].data();
      const bool transposed = key && io_.htp;  // [n_kv, 1, head_dim, AR]
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t r = rows[i];
        for (int64_t h = 0; h < kvh; ++h) {
          float* d = dst + (static_cast<size_t>(h) * cap + static_cast<size_t>(at) + i) * static_cast<size_t>(hd);
          for (int64_t k = 0; k < hd; ++k) d[k] = transposed ? src[(h * hd + k) * ar + r] : src[(h * ar + r) * hd + k];
        }
      }
    }
}

std::vector<float> StaticRunner::append(std::span<const int32_t> tokens, bool all_rows) {
  if (tokens.empty()) throw std::runtime_error("runner: no tokens to run");
  if (!io_.row_inputs.empty())
    fail("graphs with per-row input '" + io_.row_inputs.begin()->first + "' run row calls (runner_forward), not prompts");
  clear_scratch();
  row_pass_.reset();
  row_parents_.clear();
  std::vector<float> out;
  const int64_t prompt_end = kv_->n_past + static_cast<int64_t>(tokens.size());
  for (size_t done = 0; done < tokens.size();) {
    const int64_t left = static_cast<int64_t>(tokens.size() - done);
    size_t vi = pick(left, true);
    const size_t take = static_cast<size_t>(std::min(left, io_.variants[vi].ar));
    std::vector<int32_t> parents(take), rows(take);
    std::vector<int64_t> positions(take);
    for (size_t i = 0; i < take; ++i) {
      parents[i] = static_cast<int32_t>(i) - 1;  // a chunk is causal: each row sees the previous
      rows[i] = static_cast<int32_t>(i);
      positions[i] = kv_->n_past + static_cast<int64_t>(i);
    }
    Pass p = run(vi, tokens.subspan(done, take), parents, positions, {}, {}, prompt_end);
    keep(p, rows);
    append_extra_rows(p, take, done == 0);
    done += take;
    if (all_rows)
      out.insert(out.end(), p.logits.begin(), p.logits.end());
    else if (done == tokens.size())
      out.assign(p.logits.end() - io_.vocab, p.logits.end());
  }
  return out;
}

void StaticRunner::append_extra_rows(Pass& p, size_t rows, bool first_chunk) {
  // Per-row outputs ([1, AR, ...]) of every chunk, padding dropped: one row per appended token.
  auto real_rows = [&](const TensorPtr& t) {
    std::vector<int64_t> dims = t->tensor.dims;
    dims[1] = static_cast<int64_t>(rows);
    auto out = ir::make_tensor_ref(ir::Tensor::zeros(t->tensor.dtype, dims));
    std::memcpy(out->tensor.mutable_data(), t->tensor.data(), out->tensor.nbytes());
    return out;
  };
  const int64_t ar = io_.variants[p.variant].ar;
  std::map<std::string, TensorPtr> next;
  for (auto& [name, t] : p.extras) {
    const auto& d = t->tensor.dims;
    if (d.size() < 2 || d[0] != 1 || d[1] != ar) {
      next[name] = t;  // not per row: the last chunk's
      continue;
    }
    auto it = extras_.find(name);
    if (first_chunk || it == extras_.end() || it->second->tensor.dims.size() != d.size()) {
      next[name] = real_rows(t);
      continue;
    }
    const ir::Tensor& prev = it->second->tensor;
    std::vector<int64_t> dims = prev.dims;
    dims[1] += static_cast<int64_t>(rows);
    auto out = ir::make_tensor_ref(ir::Tensor::zeros(prev.dtype, dims));
    auto* dst = static_cast<uint8_t*>(out->tensor.mutable_data());
    std::memcpy(dst, prev.data(), prev.nbytes());
    std::memcpy(dst + prev.nbytes(), t->tensor.data(), out->tensor.nbytes() - prev.nbytes());
    next[name] = out;
  }
  extras_ = std::move(next);
}

void StaticRunner::forward(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) {
  forward_flags(tokens, parents, nullptr, n_rows, logits);
}

void StaticRunner::set_row_input(const char* name, const float* data, size_t n_rows, size_t width) {
  auto w = io_.row_inputs.find(name);
  if (w == io_.row_inputs.end()) return Runner::set_row_input(name, data, n_rows, width);
  if (static_cast<int64_t>(width) != w->second)
    fail("per-row input '" + std::string(name) + "' is " + std::to_string(w->second) + " wide, given " + std::to_string(width));
  row_inputs_[name].assign(data, data + n_rows * width);
}

void StaticRunner::set_prefix_kv(size_t layers, size_t kv_heads, size_t n, size_t head_dim, const float* keys,
                                 const float* values) {
  if (io_.prefix_rows)
    throw std::runtime_error("runner: the graphs hold their own KV prefix (" + std::to_string(io_.prefix_rows) +
                             " rows, io kv_prefix_rows); a prefix given by the host has no slots");
  if (n > 0 && (static_cast<int64_t>(layers) != io_.layers || static_cast<int64_t>(kv_heads) != io_.kv_heads ||
                static_cast<int64_t>(head_dim) != io_.head_dim))
    throw std::runtime_error("runner: prefix KV is [" + std::to_string(layers) + " layers, " + std::to_string(kv_heads) +
                             " kv heads, head_dim " + std::to_string(head_dim) + "], the model's cache is [" +
                             std::to_string(io_.layers) + ", " + std::to_string(io_.kv_heads) + ", " +
                             std::to_string(io_.head_dim) + "]");
  prefix_len_ = static_cast<int64_t>(n);
  const size_t per_layer = kv_heads * n * head_dim;
  prefix_k_.assign(n ? layers : 0, {});
  prefix_v_.assign(n ? layers : 0, {});
  for (size_t l = 0; n > 0 && l < layers; ++l) {
    prefix_k_[l].assign(keys + l * per_layer, keys + (l + 1) * per_layer);
    prefix_v_[l].assign(values + l * per_layer, values + (l + 1) * per_layer);
  }
}

void StaticRunner::forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                                 float* logits) {
  clear_scratch();
  if (n_rows == 0) throw std::runtime_error("runner: forward with no rows");
  if (n_rows > max_rows())
    throw std::runtime_error("runner: " + std::to_string(n_rows) + " rows exceed the largest AR variant (" +
                             std::to_string(max_ar_) + " rows per pass)");
  std::vector<int64_t> positions(n_rows);
  for (size_t r = 0; r < n_rows; ++r) {
    int32_t p = parents[r];
    if (p >= static_cast<int32_t>(r) || p < -1)
      throw std::runtime_error("runner: row " + std::to_string(r) + " has parent " + std::to_string(p) +
                               " (a parent must be an earlier row or -1)");
    positions[r] = p < 0 ? kv_->n_past : positions[static_cast<size_t>(p)] + 1;  // n_past + depth
  }
  check_row_flags(parents, flags, n_rows, static_cast<size_t>(prefix_len_));
  row_flags_.assign(n_rows, 0);
  if (flags) row_flags_.assign(flags, flags + n_rows);
  size_t vi = pick(static_cast<int64_t>(n_rows), false);
  auto pass = std::make_shared<Pass>(run(vi, {tokens, n_rows}, {parents, n_rows}, positions, row_flags_));
  row_inputs_.clear();
  std::memcpy(logits, pass->logits.data(), pass->logits.size() * sizeof(float));
  extras_ = pass->extras;
  row_pass_ = std::move(pass);
  row_parents_.assign(parents, parents + n_rows);
}

void StaticRunner::forward_scratch(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) {
  if (n_rows == 0) throw std::runtime_error("runner: forward with no rows");
  if (n_rows > max_rows())
    throw std::runtime_error("runner: " + std::to_string(n_rows) + " rows exceed the largest AR variant (" +
                             std::to_string(max_ar_) + " rows per pass)");
  const auto kept = static_cast<int64_t>(scratch_pos_.size());
  const auto S = static_cast<size_t>(kept);
  std::vector<int64_t> positions(n_rows);
  std::vector<int32_t> local(n_rows, -1);        // parent among this call's rows
  std::vector<uint8_t> sees(n_rows * S, 0);      // row r sees kept scratch row s
  for (size_t r = 0; r < n_rows; ++r) {
    const int32_t p = parents[r];
    if (p < -1 || p >= kept + static_cast<int32_t>(r))
      throw std::runtime_error("runner: scratch row " + std::to_string(r) + " has parent " + std::to_string(p) +
                               " (a kept scratch row 0.." + std::to_string(kept - 1) + ", an earlier row of the call " +
                               std::to_string(kept) + ".." + std::to_string(kept + static_cast<int64_t>(r) - 1) + ", or -1)");
    if (p < 0) {
      positions[r] = kv_->n_past;
    } else if (p < kept) {
      positions[r] = scratch_pos_[static_cast<size_t>(p)] + 1;
      for (int32_t s = p; s >= 0; s = scratch_parent_[static_cast<size_t>(s)]) sees[r * S + static_cast<size_t>(s)] = 1;
    } else {
      const auto q = static_cast<size_t>(p - kept);
      local[r] = static_cast<int32_t>(q);
      positions[r] = positions[q] + 1;
      std::copy_n(sees.begin() + static_cast<std::ptrdiff_t>(q * S), S, sees.begin() + static_cast<std::ptrdiff_t>(r * S));
    }
  }
  row_pass_.reset();  // nothing of a scratch call is committed
  row_parents_.clear();
  row_flags_.assign(n_rows, 0);
  const size_t vi = pick(static_cast<int64_t>(n_rows), false);
  Pass pass = run(vi, {tokens, n_rows}, local, positions, {}, sees);
  row_inputs_.clear();
  std::memcpy(logits, pass.logits.data(), pass.logits.size() * sizeof(float));
  extras_ = pass.extras;
  std::vector<int32_t> all(n_rows);
  std::iota(all.begin(), all.end(), 0);
  store(pass, all, held());
  scratch_pos_.insert(scratch_pos_.end(), positions.begin(), positions.end());
  scratch_parent_.insert(scratch_parent_.end(), parents, parents + n_rows);
}

void StaticRunner::commit(const int32_t* rows, size_t n) {
  clear_scratch();
  if (n == 0) return;
  if (!row_pass_) throw std::runtime_error("runner: commit without a forward to commit from");
  for (size_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || static_cast<size_t>(rows[i]) >= row_parents_.size())
      throw std::runtime_error("runner: commit of row " + std::to_string(rows[i]) + " that the last forward did not score");
    if (row_parents_[static_cast<size_t>(rows[i])] != (i == 0 ? -1 : rows[i - 1]))
      throw std::runtime_error("runner: committed rows must form a path from a root, in order");
    if (row_flags_[static_cast<size_t>(rows[i])])
      throw std::runtime_error("runner: row " + std::to_string(rows[i]) + " is a flagged (scratch) row and cannot be committed");
  }
  keep(*row_pass_, {rows, n});
  row_pass_.reset();
  row_parents_.clear();
}

nf_tensor* StaticRunner::last_output(const char* name) {
  auto it = extras_.find(name);
  return it == extras_.end() ? nullptr : handle(it->second.get());
}

std::unique_ptr<Runner> make_runner(BackendSession& session, const nlohmann::json& graph_specs,
                                    const nlohmann::json& metadata, const std::string& role) {
  const nlohmann::json roles = metadata.is_object() ? metadata.value(roles::kMetadataKey, nlohmann::json()) : nlohmann::json();
  nlohmann::json specs = nlohmann::json::array();
  for (const auto& g : graph_specs)
    if (roles::role_of(roles, g.value("name", "")) == role) specs.push_back(g);
  const nlohmann::json& owner = role.empty() ? metadata : roles[role];
  const std::string what = role.empty() ? std::string() : " of role '" + role + "'";
  std::unique_ptr<Runner> r;
  // The KV prefix role (graph_roles.hpp): arcl built it into static graphs; a dynamic
  // runner runs its graph.
  const std::optional<roles::KvPrefixRole> prefix = role.empty() ? roles::kv_prefix_role(roles) : std::nullopt;
  if (owner.is_object() && owner.contains("io") && owner["io"].is_object() && owner["io"].value("layout", "") == "static") {
    if (prefix)
      throw std::runtime_error("the static graphs leave out the KV prefix of role kv_prefix (arcl builds it into them)");
    r = std::make_unique<StaticRunner>(session, StaticIO::parse(owner["io"], specs));
  } else if (specs.size() != 1) {
    throw std::runtime_error(std::to_string(specs.size()) + " graphs" + what +
                             " but no static-layout metadata (io.layout \"static\"); the dynamic runner needs exactly one graph");
  } else {
    auto dynamic = std::make_unique<DynamicRunner>(session, DecoderIO::from_spec(specs[0]));
    if (prefix) {
      bool held = false;
      for (const auto& g : graph_specs) held |= g.value("name", "") == prefix->graph;
      if (!held) throw std::runtime_error("metadata roles.kv_prefix names graph \"" + prefix->graph + "\", which the model lacks");
      dynamic->hold_graph_prefix(prefix->graph, prefix->rows);
    }
    r = std::move(dynamic);
  }
  // Extra embedding rows (e.g. ssd's forecast tokens) the build appended to the graphs.
  if (role.empty() && metadata.is_object() && metadata.contains("extra_embeddings")) {
    const auto& e = metadata["extra_embeddings"];
    if (!e.is_object() || !e.contains("rows") || !e["rows"].is_number_unsigned())
      throw std::runtime_error("metadata extra_embeddings needs an unsigned integer 'rows'");
    r->set_extra_input_tokens(e["rows"].get<size_t>());
  }
  r->set_model(session, graph_specs, metadata, role);
  return r;
}

void Runner::set_model(BackendSession& session, nlohmann::json graph_specs, nlohmann::json metadata, std::string role) {
  model_session_ = &session;
  model_specs_ = std::move(graph_specs);
  model_metadata_ = std::move(metadata);
  role_ = std::move(role);
}

nf_runner* Runner::open_role(const char* role) {
  if (!model_session_ || !role || !*role || !model_metadata_.is_object()) return nullptr;
  const auto& roles = model_metadata_.value(roles::kMetadataKey, nlohmann::json());
  if (!roles.is_object() || !roles.contains(role)) return nullptr;
  std::unique_ptr<Runner> r = make_runner(*model_session_, model_specs_, model_metadata_, role);
  if (!role_.empty() && roles[role].is_object() && roles[role].value("shares_cache_of", "") == role_) {
    auto *mine = dynamic_cast<StaticRunner*>(this), *theirs = dynamic_cast<StaticRunner*>(r.get());
    if (!mine || !theirs)
      throw std::runtime_error("role '" + std::string(role) + "' shares the KV cache of role '" + role_ +
                               "', but their graphs are not both static (arcl)");
    theirs->share_cache(*mine);
  }
  return r.release();
}

}  // namespace nf::host
