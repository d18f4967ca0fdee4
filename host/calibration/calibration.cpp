#include "calibration/calibration.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "calibration/segments.h"
#include "common/files.h"
#include "common/util.h"
#include "manifest/schema.h"
#include "runner/runner.h"
#include "runtime/package.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// A regular file's bytes (not a device or a FIFO, which could be endless); `what` names it.
std::string read_calibration_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw std::runtime_error(what + " " + path + ": no such file");
  std::string text = read_regular_file(path, kTextMax, what);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw std::runtime_error(what + " " + path + ": the file is empty");
  return text;
}

// The `field` strings of a JSONL dataset, joined by blank lines as documents of a text.
std::string read_jsonl_text(const std::string& path, const std::string& field) {
  std::istringstream lines(read_calibration_file(path, "calibration dataset"));
  std::string line, text;
  size_t number = 0, documents = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "calibration dataset " + path + ":" + std::to_string(number) + ": ";
    nlohmann::json doc = nlohmann::json::parse(line, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) throw std::runtime_error(where + "not a JSON object");
    if (!doc.contains(field) || !doc[field].is_string())
      throw std::runtime_error(where + "no string field \"" + field + "\" (set [calibration] text_field)");
    if (documents++) text += "\n\n";
    text += doc[field].get<std::string>();
  }
  return text;
}

// Pre-tokenized calibration data: a JSON array of token ids, or an array of such arrays
// (documents, concatenated in order).
std::vector<int32_t> read_token_ids(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(read_calibration_file(path, "calibration ids"), nullptr, false);
  const std::string what = "calibration ids " + path + ": ";
  if (j.is_discarded() || !j.is_array()) throw std::runtime_error(what + "not a JSON array of token ids");
  std::vector<int32_t> ids;
  auto take = [&](const nlohmann::json& v, const std::string& at) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw std::runtime_error(what + "element " + at + " is not a token id (a non-negative integer)");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  };
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_array()) {
      take(j[i], "[" + std::to_string(i) + "]");
      continue;
    }
    for (size_t k = 0; k < j[i].size(); ++k) take(j[i][k], "[" + std::to_string(i) + "][" + std::to_string(k) + "]");
  }
  return ids;
}

TensorPtr int64_tensor(std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  auto t = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_INT64, std::move(dims)));
  std::copy(values.begin(), values.end(), t->tensor.mutable_as<int64_t>());
  return t;
}

}  // namespace

TextCalibration::TextCalibration(const manifest::Manifest::Calibration& config, const std::string& tokenizer_json,
                                 const PluginInfo& backend)
    : backend_(backend) {
  if (!config.ids.empty()) {
    batches_ = make_batches(read_token_ids(config.ids), config.num_samples, config.sequence_length,
                            "calibration ids " + config.ids);
    return;
  }
  if (tokenizer_json.empty())
    throw std::runtime_error("calibration text needs the model's tokenizer: set [model] tokenizer in the manifest, "
                             "or give pre-tokenized [calibration] ids");
  const bool dataset = !config.jsonl.empty();
  std::string text = dataset ? read_jsonl_text(config.jsonl, config.text_field)
                             : read_calibration_file(config.text, "calibration text");
  Tokenizer tok = Tokenizer::load(tokenizer_json);
  batches_ = make_batches(tok.encode(text, false), config.num_samples, config.sequence_length,
                          dataset ? "calibration dataset " + config.jsonl : "calibration text " + config.text);
}

std::vector<std::vector<int32_t>> TextCalibration::make_batches(const std::vector<int32_t>& ids, int num_samples,
                                                                int sequence_length, const std::string& what) {
  if (num_samples <= 0 || sequence_length <= 0)
    throw std::runtime_error(what + ": num_samples and sequence_length must be positive");
  const size_t len = static_cast<size_t>(sequence_length);
  const size_t holds = ids.size() / len;
  if (holds < static_cast<size_t>(num_samples))
    throw std::runtime_error(what + ": " + std::to_string(ids.size()) + " tokens hold " + std::to_string(holds) +
                             " samples of " + std::to_string(sequence_length) + " tokens, but num_samples = " +
                             std::to_string(num_samples));
  std::vector<std::vector<int32_t>> batches;
  for (size_t i = 0; i < static_cast<size_t>(num_samples); ++i)
    batches.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(i * len),
                         ids.begin() + static_cast<std::ptrdiff_t>((i + 1) * len));
  return batches;
}

// What the calibration has computed of one batch: the values `carried` into segment
// `next` (graph inputs included), computed with the segments' weights named by `keys`.
struct BatchState {
  size_t next = 0;
  std::vector<std::string> keys;
  std::map<std::string, TensorPtr> values;
};

// The model set cut into segments, the states each batch reached and the one open segment
// session. `structure` says which graph the cut belongs to.
struct TextCalibration::Stream {
  std::string structure;
  GraphSegments cut;
  std::vector<std::vector<BatchState>> states;  // [batch]: the last boundaries reached (up to 4)
  std::string open_key;                         // segment key + outputs of the open session
  size_t open_segment = 0;
  std::unique_ptr<ir::ModelSet> copy;
  std::unique_ptr<BackendSession> session;
};

// The draft's session of the last request: kept while the draft's nodes, its weights (by
// identity) and the values asked stay the same, as they do batch after batch of a recipe.
struct TextCalibration::DraftRun {
  std::string graph_key;  // structure and weights
  std::unique_ptr<ir::ModelSet> set;
  DecoderIO io;
  std::vector<std::string> outputs;  // what `session` computes
  std::unique_ptr<BackendSession> session;
};

TextCalibration::~TextCalibration() = default;

namespace {

// The graph's structure (nodes, inputs): what the cut depends on.
std::string structure_key(const ir::Graph& g) {
  std::ostringstream k;
  k << g.name << '|';
  for (const auto& n : g.nodes) {
    k << n->op_type << '(';
    for (const auto& i : n->inputs) k << i << ',';
    k << ')';
    for (const auto& o : n->outputs) k << o << ',';
    k << ';';
  }
  for (const auto& i : g.inputs) k << i << ',';
  return k.str();
}

// Whether calibration runs weights that carry an encoding on its grid: model-set metadata
// "calibration_weights" = "encoded" (seqmse sets it while it freezes layer after layer).
bool encoded_weights(const ir::ModelSet& ms) {
  auto it = ms.metadata.find("calibration_weights");
  return it != ms.metadata.end() && it->second == "\"encoded\"";
}

// A segment's weights by identity (recipes replace a weight with a new tensor, never
// write into one); with encoded weights, each weight's encoding by its generation.
std::string segment_key(const ir::ModelSet& ms, const GraphSegment& seg) {
  const ir::Graph& g = *ms.graphs[0];
  const bool encoded = encoded_weights(ms);
  std::ostringstream k;
  k << (encoded ? "encoded|" : "float|");
  for (const auto& name : seg.initializers) {
    k << name << '@' << g.initializers.at(name)->id;
    if (auto e = ms.encodings.find(name); encoded && e != ms.encodings.end()) k << '#' << e->second.generation;
    k << ',';
  }
  return k.str();
}

// A one-graph model set running `seg` of `ms`'s graph: its nodes, the initializers they
// read (shared, not copied), their encodings when calibration runs encoded weights, and
// `outputs`.
std::unique_ptr<ir::ModelSet> segment_model(const ir::ModelSet& ms, const GraphSegment& seg, size_t index,
                                            const std::vector<std::string>& outputs) {
  const ir::Graph& src = *ms.graphs[0];
  auto g = std::make_unique<ir::Graph>();
  g->name = src.name + ".segment" + std::to_string(index);
  g->opsets = src.opsets;
  g->ir_version = src.ir_version;
  for (size_t i : seg.nodes) g->nodes.push_back(std::make_unique<ir::Node>(*src.nodes[i]));
  g->inputs = seg.inputs;
  g->outputs = outputs;
  for (const auto& name : seg.initializers) g->initializers[name] = src.initializers.at(name);
  for (const auto* names : {&seg.inputs, &outputs})
    for (const auto& v : *names)
      if (auto t = src.types.find(v); t != src.types.end()) g->types[v] = t->second;
  auto copy = std::make_unique<ir::ModelSet>();
  copy->graphs.push_back(std::move(g));
  if (encoded_weights(ms))
    for (const auto& name : seg.initializers)
      if (auto e = ms.encodings.find(name); e != ms.encodings.end()) copy->encodings[name] = e->second;
  return copy;
}

// The value the target's LM head reads (its features after the final norm): the first input
// of the MatMul/Gemm by a weight (or its transpose) that makes the logits; "" when none.
std::string lm_head_input(const ir::Graph& g) {
  auto first_input = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    return n && !n->inputs.empty() ? n->inputs[0] : std::string();
  };
  auto is_head = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    if (!n || (n->op_type != "MatMul" && n->op_type != "Gemm") || n->inputs.size() < 2) return false;
    const ir::Node* b = g.producer(n->inputs[1]);
    return g.initializers.count(n->inputs[1]) > 0 || (b && b->op_type == "Transpose" && !b->inputs.empty() &&
                                                      g.initializers.count(b->inputs[0]) > 0);
  };
  auto inputs_of = [&](const std::string& v) {
    const ir::Node* n = g.producer(v);
    return n ? n->inputs : std::vector<std::string>{};
  };
  const std::string head = decoder::lm_head_output(inputs_of, is_head);
  return head.empty() ? head : first_input(head);
}

bool holds_value(const ir::Graph& g, const std::string& name) {
  return g.producer(name) || g.initializers.count(name) ||
         std::find(g.inputs.begin(), g.inputs.end(), name) != g.inputs.end();
}

void drop_weight_pages(const ir::Graph& g, const GraphSegment& seg) {
  for (const auto& name : seg.initializers) g.initializers.at(name)->tensor.drop_pages();
}

}  // namespace

// Runs segment `s` of `src` on `state` (which must be at its start), advances the state
// past it and adds the `wanted` values it computes to `found`.
void TextCalibration::run_segment(const ir::ModelSet& ms, size_t s, BatchState& state,
                                  const std::vector<std::string>& wanted, std::map<std::string, TensorPtr>& found) {
  Stream& st = *stream_;
  const ir::Graph& src = *ms.graphs[0];
  const GraphSegment& seg = st.cut.segments[s];
  std::vector<std::string> outputs;
  for (const auto& v : seg.carried)
    if (auto p = st.cut.segment_of.find(v); p != st.cut.segment_of.end() && p->second == s) outputs.push_back(v);
  for (const auto& v : wanted)
    if (st.cut.segment_of.at(v) == s && std::find(outputs.begin(), outputs.end(), v) == outputs.end()) outputs.push_back(v);
  const std::string key = segment_key(ms, seg) + '|' + std::to_string(s) + '|' + nlohmann::json(outputs).dump();
  if (!st.session || st.open_key != key) {
    if (st.session) {  // one segment's weights at a time
      st.session.reset();
      drop_weight_pages(src, st.cut.segments[st.open_segment]);
    }
    st.copy = segment_model(ms, seg, s, outputs);
    // One pass per batch: a tied LM head streams its table by row blocks (see cpu's README).
    nlohmann::json options = {{"use_encodings", encoded_weights(ms)}, {"stream_weights", true}};
    auto errors = manifest::validate_json(backend_.schema, options);
    if (!errors.empty())
      throw std::runtime_error("calibration: backend " + backend_.name + " does not take the calibration options: " +
                               errors[0].message);
    st.session = BackendSession::open_model_set(backend_, options, *st.copy);
    st.open_key = key;
    st.open_segment = s;
    ++sessions_opened_;
  }
  std::vector<NamedTensor> inputs;
  for (const auto& v : seg.inputs) {
    auto it = state.values.find(v);
    if (it == state.values.end())
      throw std::runtime_error("calibration: graph '" + src.name + "' reads input '" + v +
                               "', which calibration does not feed");
    inputs.push_back({v, it->second});
  }
  std::vector<TensorPtr> computed = st.session->run(st.copy->graphs[0]->name, inputs, outputs);
  ++segments_run_;
  std::map<std::string, TensorPtr> next;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (std::find(wanted.begin(), wanted.end(), outputs[i]) != wanted.end()) found[outputs[i]] = computed[i];
    next[outputs[i]] = computed[i];
  }
  for (const auto& v : seg.carried)
    if (!next.count(v)) next[v] = state.values.at(v);
  for (auto it = next.begin(); it != next.end();)  // only what a later segment reads
    it = std::binary_search(seg.carried.begin(), seg.carried.end(), it->first) ? std::next(it) : next.erase(it);
  state.values = std::move(next);
  state.keys.push_back(segment_key(ms, seg));
  state.next = s + 1;
}

// A draft (a graph of another role, draft.onnx's layout) over one batch as it is trained:
// position i reads the next token x[i+1] and the target's features f[i], from an empty cache.
// Runs the whole graph (one decoder layer) on a session of its own, with float weights.
std::map<std::string, TensorPtr> TextCalibration::run_draft(const ir::Graph& draft, const std::vector<int32_t>& ids,
                                                             const TensorPtr& features, const std::vector<std::string>& names) {
  std::string graph_key = structure_key(draft);
  for (const auto& [name, w] : draft.initializers) graph_key += name + '@' + std::to_string(w->id) + ',';
  if (!draft_ || draft_->graph_key != graph_key) {
    draft_.reset();  // release the previous session first
    auto run = std::make_unique<DraftRun>();
    run->graph_key = std::move(graph_key);
    run->set = std::make_unique<ir::ModelSet>();
    run->set->graphs.push_back(draft.clone());
    run->io = DecoderIO::from_spec(graph_specs(*run->set)[0]);
    draft_ = std::move(run);
  }
  DraftRun& d = *draft_;
  const DecoderIO& io = d.io;
  const ir::Tensor& f = features->tensor;
  const int64_t T = static_cast<int64_t>(ids.size()) - 1;
  if (io.row_inputs.size() != 1 || f.dtype != NF_DTYPE_FLOAT32 || f.dims.size() != 3 || f.dims[1] < T + 1 ||
      f.dims[2] != io.row_inputs[0].second)
    throw std::runtime_error("calibration: graph '" + draft.name + "' should read the target's features (float32 [1, " +
                             "sequence, " + std::to_string(f.dims.empty() ? 0 : f.dims.back()) + "]) as its one per-row input");
  if (T < 1) return {};
  std::vector<int64_t> next(ids.begin() + 1, ids.end()), ones(static_cast<size_t>(T), 1), positions(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = i;
  const int64_t H = f.dims[2];
  auto rows = ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, T, H}));
  std::copy(f.as<float>(), f.as<float>() + T * H, rows->tensor.mutable_as<float>());
  std::vector<NamedTensor> inputs{{io.input_ids, int64_tensor({1, T}, next)},
                                  {io.attention_mask, int64_tensor({1, T}, ones)},
                                  {io.row_inputs[0].first, rows}};
  if (!io.position_ids.empty()) inputs.push_back({io.position_ids, int64_tensor({1, T}, positions)});
  for (size_t l = 0; l < io.past_keys.size(); ++l)
    for (const auto& past : {io.past_keys[l], io.past_values[l]})
      inputs.push_back({past, ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, io.kv_heads, 0, io.head_dim}))});
  std::map<std::string, TensorPtr> out;
  std::vector<std::string> computed;
  for (const auto& name : names) {
    auto in = std::find_if(inputs.begin(), inputs.end(), [&](const NamedTensor& t) { return t.name == name; });
    if (in != inputs.end()) out[name] = in->tensor;
    else if (auto w = draft.initializers.find(name); w != draft.initializers.end()) out[name] = w->second;
    else computed.push_back(name);
  }
  if (computed.empty()) return out;
  if (!d.session || d.outputs != computed) {
    d.session.reset();
    d.set->graphs[0]->outputs = computed;
    nlohmann::json options = {{"use_encodings", false}};
    d.session = BackendSession::open_model_set(backend_, options, *d.set);
    d.outputs = computed;
    ++sessions_opened_;
  }
  std::vector<TensorPtr> values = d.session->run(d.set->graphs[0]->name, inputs, computed);
  for (size_t i = 0; i < computed.size(); ++i) out[computed[i]] = values[i];
  return out;
}

void TextCalibration::run(ir::ModelSet& ms, size_t index, const char* const* names, size_t n, nf_tensor** out) {
  if (index >= batches_.size())
    throw std::runtime_error("calibration batch " + std::to_string(index) + " out of range (" +
                             std::to_string(batches_.size()) + " batches)");
  if (ms.graphs.empty()) throw std::runtime_error("calibration: the model set has no graph");
  if (ms.targets().size() != 1 || ms.targets()[0] != ms.graphs[0].get())
    throw std::runtime_error("calibration runs the source decoder graph: run quant recipes before the transforms (" +
                             std::to_string(ms.targets().size()) + " target graphs in the model set)");
  std::vector<std::string> wanted(names, names + n);
  const ir::Graph& src = *ms.graphs[0];
  std::vector<std::string> run_names;  // values the segments compute
  // Values of a graph of another role (a draft) run that graph on the target's features.
  std::map<const ir::Graph*, std::vector<std::string>> role_names;
  auto add_run_name = [&](const std::string& name) {
    if (std::find(run_names.begin(), run_names.end(), name) == run_names.end()) run_names.push_back(name);
  };
  for (const auto& name : wanted) {
    if (name.empty()) throw std::runtime_error("calibration: empty tensor name requested");
    bool is_input = std::find(src.inputs.begin(), src.inputs.end(), name) != src.inputs.end();
    if (is_input || src.initializers.count(name)) continue;
    if (src.producer(name)) {
      add_run_name(name);
      continue;
    }
    const ir::Graph* holder = nullptr;
    for (const auto& g : ms.graphs)
      if (g.get() != &src && holds_value(*g, name)) holder = g.get();
    if (!holder) throw std::runtime_error("calibration: graph '" + src.name + "' has no value named '" + name + "'");
    role_names[holder].push_back(name);
  }
  const std::string features = role_names.empty() ? std::string() : lm_head_input(src);
  if (!role_names.empty()) {
    if (features.empty() || !src.producer(features))
      throw std::runtime_error("calibration: the draft runs on the target's features, but graph '" + src.name +
                               "' has no LM head (MatMul by a weight before its logits) to take them from");
    add_run_name(features);
  }

  DecoderIO io = DecoderIO::from_spec(graph_specs(ms)[0]);
  const auto& ids = batches_[index];
  const int64_t T = static_cast<int64_t>(ids.size());
  std::vector<int64_t> tokens(ids.begin(), ids.end()), ones(ids.size(), 1), positions(ids.size());
  for (int64_t i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = i;
  std::vector<NamedTensor> inputs;
  inputs.push_back({io.input_ids, int64_tensor({1, T}, tokens)});
  inputs.push_back({io.attention_mask, int64_tensor({1, T}, ones)});
  if (!io.position_ids.empty()) inputs.push_back({io.position_ids, int64_tensor({1, T}, positions)});
  for (size_t l = 0; l < io.past_keys.size(); ++l) {
    for (const auto& past : {io.past_keys[l], io.past_values[l]})
      inputs.push_back({past, ir::make_tensor_ref(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1, io.kv_heads, 0, io.head_dim}))});
  }

  std::map<std::string, TensorPtr> found;
  if (!run_names.empty()) {
    std::string structure = structure_key(src);
    if (!stream_ || stream_->structure != structure) {
      stream_.reset();  // release the previous session first
      stream_ = std::make_unique<Stream>();
      stream_->structure = std::move(structure);
      stream_->cut = cut_into_segments(src);
      stream_->states.resize(batches_.size());
    }
    Stream& st = *stream_;
    size_t lowest = SIZE_MAX, highest = 0;
    for (const auto& v : run_names) {
      lowest = std::min(lowest, st.cut.segment_of.at(v));
      highest = std::max(highest, st.cut.segment_of.at(v));
    }
    // Start from the latest state at or before the first segment needed that was computed
    // with today's weights; else from the graph inputs.
    std::vector<std::string> keys;
    for (size_t s = 0; s < lowest; ++s) keys.push_back(segment_key(ms, st.cut.segments[s]));
    BatchState state;
    for (const BatchState& c : st.states[index])
      if (c.next <= lowest && c.next >= state.next && std::equal(c.keys.begin(), c.keys.end(), keys.begin()))
        state = c;
    if (state.next == 0) {
      state.values.clear();
      for (const auto& in : inputs) state.values[in.name] = in.tensor;
    }
    BatchState start_of_last;
    for (size_t s = state.next; s <= highest; ++s) {
      if (s == highest) start_of_last = state;
      run_segment(ms, s, state, run_names, found);
    }
    // Keep the start and the end of the last segment run: the next request usually reads
    // the same segment (after a recipe replaced some of its weights) or the one after. The
    // two before stay too, for a recipe alternating float and encoded weights.
    auto& kept = st.states[index];
    kept.push_back(std::move(start_of_last));
    kept.push_back(std::move(state));
    if (kept.size() > 4) kept.erase(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(kept.size() - 4));
  }

  for (const auto& [graph, values] : role_names)
    for (auto& [name, value] : run_draft(*graph, ids, found.at(features), values)) found[name] = value;

  std::vector<nf_tensor*> result;
  for (const auto& name : wanted) {
    const ir::Tensor* t = nullptr;
    for (const auto& in : inputs)
      if (in.name == name) t = &in.tensor->tensor;
    if (auto it = src.initializers.find(name); it != src.initializers.end()) t = &it->second->tensor;
    if (auto it = found.find(name); it != found.end()) t = &it->second->tensor;
    if (!t) {
      for (nf_tensor* r : result) host_api()->tensor_release(r);
      throw std::runtime_error("calibration: no value for '" + name + "' (a graph input the calibration does not feed)");
    }
    result.push_back(new_tensor_handle(*t));
  }
  std::copy(result.begin(), result.end(), out);
}

namespace {
std::string tokenizer_of(const manifest::Manifest& m) {
  std::string tokenizer = m.model_tokenizer;
  if (tokenizer.empty()) {
    fs::path beside = fs::path(m.model_onnx).parent_path() / "tokenizer.json";
    if (fs::is_regular_file(beside)) tokenizer = beside.string();
  }
  return tokenizer;
}

std::string content_hash(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return "missing";
  try {
    return hash_string(read_text_file(path));
  } catch (const std::exception&) {
    return "unreadable";
  }
}
}  // namespace

nlohmann::json calibration_cache_key(const manifest::Manifest& m) {
  if (!m.calibration) return nullptr;
  const auto& c = *m.calibration;
  nlohmann::json key = {{"num_samples", c.num_samples}, {"sequence_length", c.sequence_length}};
  // Another backend computes other activations (the default keeps the keys cpu always had).
  if (c.backend != "cpu") key["backend"] = c.backend;
  if (!c.ids.empty()) {
    key["ids"] = content_hash(c.ids);
    return key;
  }
  if (!c.jsonl.empty()) {
    key["jsonl"] = content_hash(c.jsonl);
    key["text_field"] = c.text_field;
  } else {
    key["text"] = content_hash(c.text);
  }
  key["tokenizer"] = content_hash(tokenizer_of(m));
  return key;
}

std::unique_ptr<TextCalibration> make_calibration(const manifest::Manifest& m, const Registry& registry) {
  if (!m.calibration) return nullptr;
  const std::string& name = m.calibration->backend;
  const PluginInfo* backend = registry.find(NF_KIND_BACKEND, name);
  if (!backend) throw std::runtime_error("calibration runs the model on the " + name + " backend, which is not installed");
  if (!backend->backend()->open_model_set)
    throw std::runtime_error("calibration backend " + name + " cannot run a model set in memory (no open_model_set)");
  return std::make_unique<TextCalibration>(*m.calibration, tokenizer_of(m), *backend);
}

}  // namespace nf::host
