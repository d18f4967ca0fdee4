#include "calibration/calibration.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "manifest/schema.h"
#include "pipeline/pipeline.h"
#include "pipeline/session.h"
#include "pipeline/util.h"
#include "runner/runner.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {

// A regular file's bytes (not a device or a FIFO, which could be endless); `what` names it.
std::string read_calibration_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw std::runtime_error(what + " " + path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(what + " " + path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
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
                                 const PluginInfo& cpu)
    : cpu_(cpu) {
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

// A float copy of the model set whose graph also outputs the values a recipe asks for,
// with its cpu session. `key` says what it was made from; the copy shares (and so holds)
// every initializer buffer, so no pointer in the key can be freed and reused while it lives.
struct TextCalibration::Prepared {
  std::string key;
  std::unique_ptr<ir::ModelSet> copy;
  std::unique_ptr<BackendSession> session;
};

TextCalibration::~TextCalibration() = default;

namespace {

// What a prepared copy depends on: the graph's structure, its initializer buffers (by
// identity: recipes replace a weight with a new tensor, never write into one) and the
// computed values requested.
std::string prepared_key(const ir::Graph& g, const std::vector<std::string>& run_names) {
  std::ostringstream k;
  k << g.name << '|' << static_cast<const void*>(&g) << '|';
  for (const auto& n : g.nodes) {
    k << n->op_type << '(';
    for (const auto& i : n->inputs) k << i << ',';
    k << ')';
    for (const auto& o : n->outputs) k << o << ',';
    k << ';';
  }
  for (const auto& i : g.inputs) k << i << ',';
  k << '|';
  for (const auto& [name, t] : g.initializers) k << name << '@' << static_cast<const void*>(t.get()) << ',';
  k << '|';
  for (const auto& r : run_names) k << r << ',';
  return k.str();
}

}  // namespace

void TextCalibration::run(ir::ModelSet& ms, size_t index, const char* const* names, size_t n, nf_tensor** out) {
  if (index >= batches_.size())
    throw std::runtime_error("calibration batch " + std::to_string(index) + " out of range (" +
                             std::to_string(batches_.size()) + " batches)");
  if (ms.graphs.empty()) throw std::runtime_error("calibration: the model set has no graph");
  if (ms.graphs.size() != 1)
    throw std::runtime_error("calibration runs the source decoder graph: run quant recipes before the transforms (" +
                             std::to_string(ms.graphs.size()) + " graphs in the model set)");
  std::vector<std::string> wanted(names, names + n);
  const ir::Graph& src = *ms.graphs[0];
  std::vector<std::string> run_names;  // values the session computes
  for (const auto& name : wanted) {
    if (name.empty()) throw std::runtime_error("calibration: empty tensor name requested");
    bool is_input = std::find(src.inputs.begin(), src.inputs.end(), name) != src.inputs.end();
    if (is_input || src.initializers.count(name)) continue;
    if (!src.producer(name))
      throw std::runtime_error("calibration: graph '" + src.name + "' has no value named '" + name + "'");
    if (std::find(run_names.begin(), run_names.end(), name) == run_names.end()) run_names.push_back(name);
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

  std::vector<TensorPtr> computed;
  if (!run_names.empty()) {
    std::string key = prepared_key(src, run_names);
    if (!prepared_ || prepared_->key != key) {
      prepared_.reset();  // release the previous copy and session first
      auto p = std::make_unique<Prepared>();
      p->key = std::move(key);
      p->copy = ms.clone();
      p->copy->encodings.clear();  // float model: the cpu backend would otherwise run encoded weights
      ir::Graph& g = *p->copy->graphs[0];
      for (const auto& name : run_names)
        if (std::find(g.outputs.begin(), g.outputs.end(), name) == g.outputs.end()) g.outputs.push_back(name);
      nlohmann::json options = {{"use_encodings", false}};
      auto errors = manifest::validate_json(cpu_.schema, options);
      if (!errors.empty()) throw std::runtime_error("calibration: cpu backend options: " + errors[0].message);
      p->session = BackendSession::open_model_set(cpu_, options, *p->copy);
      ++sessions_opened_;
      prepared_ = std::move(p);
    }
    computed = prepared_->session->run(src.name, inputs, run_names);
  }

  std::vector<nf_tensor*> result;
  for (const auto& name : wanted) {
    const ir::Tensor* t = nullptr;
    for (const auto& in : inputs)
      if (in.name == name) t = &in.tensor->tensor;
    if (auto it = src.initializers.find(name); it != src.initializers.end()) t = &it->second->tensor;
    for (size_t i = 0; i < run_names.size(); ++i)
      if (run_names[i] == name) t = &computed[i]->tensor;
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
  const PluginInfo* cpu = registry.find(NF_KIND_BACKEND, "cpu");
  if (!cpu) throw std::runtime_error("calibration runs the model on the cpu backend, which is not installed");
  return std::make_unique<TextCalibration>(*m.calibration, tokenizer_of(m), *cpu);
}

}  // namespace nf::host
