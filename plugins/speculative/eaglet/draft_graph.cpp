// eaglet's build hook: the draft (draft.onnx, exported by tools/speculative/export_eaglet_onnx.py)
// becomes graph "eaglet_draft" of the model set, role "draft", so the device package holds it
// and the backend session runs it beside the target.
//
// In the set its names must not meet the target's: encodings are keyed by name across the
// set. Its layers are numbered after the target's (past_key_values.L.*, L = the target's layer
// count), every internal value gets the prefix "eaglet_draft/", and only the IO a runner
// feeds keeps its name. Its embedding table and LM head are the target's when they hold the
// same numbers (the draft was trained on the frozen target's; draft.bin keeps float16
// copies): the draft then reads the target's tensors, one copy in the package; a tied
// target's head is the table transposed, and so becomes the draft's.
#include "draft_graph.h"

#include <npuforge/decoder_graph.hpp>
#include <npuforge/graph_roles.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "draft.h"

namespace eaglet {
namespace {

[[noreturn]] void fail(const std::string& what) { throw nf::Error("eaglet: " + what); }

int64_t layer_count(const nf::Graph& g) {
  int64_t layers = 0;
  for (const std::string& in : g.inputs())
    if (auto kv = nf::decoder::parse_kv(in); kv && !kv->present) layers = std::max(layers, kv->layer + 1);
  return layers;
}

// b to float16 precision (draft.bin keeps float16 copies of the target's tensors).
bool fp16_close(float a, float b) { return std::fabs(a - b) <= std::ldexp(std::fabs(b), -10) + 1e-7f; }

// Same shape and the same numbers to float16 precision (draft.bin's copies of the target's).
bool same_weights(const nf::Tensor& a, const nf::Tensor& b) {
  if (a.dtype() != NF_DTYPE_FLOAT32 || b.dtype() != NF_DTYPE_FLOAT32 || a.dims() != b.dims()) return false;
  const float *x = a.data_as<float>(), *y = b.data_as<float>();
  const size_t n = a.nbytes() / sizeof(float);
  for (size_t i = 0; i < n; ++i)
    if (!fp16_close(x[i], y[i])) return false;
  return true;
}

// w [H, V] holds e [V, H] transposed, to float16 precision.
bool same_transposed(const nf::Tensor& w, const nf::Tensor& e) {
  const std::vector<int64_t> wd = w.dims(), ed = e.dims();
  if (w.dtype() != NF_DTYPE_FLOAT32 || e.dtype() != NF_DTYPE_FLOAT32 || wd.size() != 2 || ed.size() != 2 ||
      wd[0] != ed[1] || wd[1] != ed[0])
    return false;
  const float *x = w.data_as<float>(), *y = e.data_as<float>();
  const int64_t H = wd[0], V = wd[1];
  for (int64_t h = 0; h < H; ++h)
    for (int64_t v = 0; v < V; ++v)
      if (!fp16_close(x[h * V + v], y[v * H + h])) return false;
  return true;
}

// A tied target's LM head is its embedding table transposed. A draft head holding a shared
// table's numbers transposed becomes a Transpose of that table (as the host ties a target's
// folded copy), so the package keeps one table. Returns the table, "" when untied.
std::string tie_head(nf::Graph draft, const std::set<std::string>& shared) {
  std::optional<nf::Node> head = nf::decoder::head_matmul(draft);
  if (!head) return "";
  const std::string w = head->input(1);
  if (shared.count(w)) return "";
  const nf::Tensor weight = draft.initializer(w);
  const std::vector<int64_t> dims = weight.dims();
  for (const std::string& table : shared) {
    if (!same_transposed(weight, draft.initializer(table))) continue;
    draft.remove_initializer(w);
    draft.add_node("Transpose", {table}, {w}, std::string(kDraftGraph) + "/lm_head/tied_transpose");
    draft.set_value_type(w, NF_DTYPE_FLOAT32, dims);
    draft.sort();
    return table;
  }
  return "";
}

}  // namespace

void add_draft_graph(const std::string& dir, int64_t draft_vocab, const TreeShape& tree, nf::ModelSet ms) {
  namespace fs = std::filesystem;
  const std::string onnx = dir + "/draft.onnx";
  if (!fs::is_regular_file(onnx))
    fail("no draft graph '" + onnx + "' (export it with tools/speculative/export_eaglet_onnx.py)");
  if (nf::host().model_set_find_graph(ms.get(), kDraftGraph)) fail("the model set already holds a graph '" + std::string(kDraftGraph) + "'");
  const nlohmann::json roles = ms.metadata(nf::roles::kMetadataKey);
  std::vector<nf::Graph> targets;
  for (nf::Graph g : ms.graphs())
    if (nf::roles::is_target(roles, g.name())) targets.push_back(g);
  if (targets.size() != 1) fail("the build hook needs the one source graph of the target, found " + std::to_string(targets.size()));
  nf::Graph target = targets[0];

  // Checked on the imported copy; a refusal removes it, leaving the set as it was.
  nf::Graph draft = ms.import_graph(kDraftGraph, onnx);
  try {
    const std::vector<std::string> ins = draft.inputs(), outs = draft.outputs();
    auto has = [](const std::vector<std::string>& list, const std::string& v) {
      return std::find(list.begin(), list.end(), v) != list.end();
    };
    for (const char* in : {nf::decoder::kInputIds, kFeatureInput, nf::decoder::kAttentionMask, nf::decoder::kPositionIds})
      if (!has(ins, in)) fail(onnx + ": the draft has no input '" + std::string(in) + "'");
    for (const char* out : {nf::decoder::kLogits, kFeatureOutput})
      if (!has(outs, out)) fail(onnx + ": the draft has no output '" + std::string(out) + "'");
    const int64_t draft_layers = layer_count(draft), first = layer_count(target);
    if (draft_layers == 0) fail(onnx + ": the draft has no past_key_values inputs");
    nf::ValueType feature;
    if (!draft.value_type(kFeatureInput, &feature) || feature.dtype != NF_DTYPE_FLOAT32 || feature.dims.size() != 3 ||
        feature.dims[2] <= 0)
      fail(onnx + ": '" + std::string(kFeatureInput) + "' should be float32 [batch, sequence, hidden]");
    const nlohmann::json config = ms.metadata("config");
    if (config.is_object() && config.contains("hidden_size") && config["hidden_size"] != feature.dims[2])
      fail(onnx + ": the draft reads features of width " + std::to_string(feature.dims[2]) + ", the target's hidden size is " +
           config["hidden_size"].dump());

    // The target's embedding table and LM head, when the draft's hold the same numbers.
    std::map<std::string, std::string> renames;
    std::set<std::string> shared;
    auto share = [&](std::optional<nf::Node> mine, std::optional<nf::Node> theirs, size_t input) {
      if (!mine || !theirs) return;
      const std::string a = mine->input(input), b = theirs->input(input);
      if (!same_weights(draft.initializer(a), target.initializer(b))) return;
      renames[a] = b;
      shared.insert(b);
    };
    // A head cut to draft_vocab rows is the draft's own.
    const std::vector<int32_t> head_tokens = draft_vocab > 0 ? keep_head_rows(dir, draft_vocab, draft) : std::vector<int32_t>{};
    share(nf::decoder::embedding_gather(draft), nf::decoder::embedding_gather(target), 0);
    if (head_tokens.empty()) share(nf::decoder::head_matmul(draft), nf::decoder::head_matmul(target), 1);

    // The runner's IO keeps its names; the draft's features are renamed with the rest
    // (kFeatureOutputInSet), apart from the target's hidden_states.
    const std::set<std::string> keep{nf::decoder::kInputIds, nf::decoder::kAttentionMask, nf::decoder::kPositionIds,
                                     nf::decoder::kLogits, kFeatureInput};
    std::set<std::string> values(ins.begin(), ins.end());
    values.insert(outs.begin(), outs.end());
    for (const std::string& w : draft.initializer_names()) values.insert(w);
    for (nf::Node n : draft.nodes())
      for (const std::string& o : n.outputs()) values.insert(o);
    for (const std::string& v : values) {
      if (v.empty() || keep.count(v) || renames.count(v)) continue;
      if (auto kv = nf::decoder::parse_kv(v)) {
        kv->layer += first;
        renames[v] = kv->present ? nf::decoder::present_of(*kv) : nf::decoder::past_of(*kv);
      } else {
        renames[v] = std::string(kDraftGraph) + "/" + v;
      }
    }
    draft.rename_values(renames);
    for (const std::string& w : shared) draft.set_initializer(w, target.initializer(w));
    const std::string tied = head_tokens.empty() ? tie_head(draft, shared) : std::string();

    nlohmann::json role{{"graphs", {kDraftGraph}}, {"decoder", "eaglet"}, {"first_layer", first}, {"layers", draft_layers},
                        {"shares", std::vector<std::string>(shared.begin(), shared.end())},
                        {"replaces", {"draft.bin"}}};  // the host's float draft: a compiled package runs the graph
    if (!head_tokens.empty()) role["head_tokens"] = head_tokens;
    if (!tied.empty()) role["head_is_transposed"] = tied;
    if (tree.depth > 0)  // arcl builds the depth loop into one graph a step (graph_roles.hpp draft_tree)
      role["tree"] = {{"depth", tree.depth}, {"branches", tree.branches},
                      {"logit_scale", read_draft_file(dir).config.confidence_scale},
                      {"feature_input", kFeatureInput}, {"feature_output", kFeatureOutputInSet}};
    nlohmann::json all = roles.is_object() ? roles : nlohmann::json::object();
    all[nf::roles::kDraft] = role;
    ms.set_metadata(nf::roles::kMetadataKey, all);
  } catch (...) {
    ms.remove_graph(kDraftGraph);
    throw;
  }
}

// The draft scores only the first `rows` tokens of its token map: its LM head keeps those
// columns (in place of the whole head), so a draft pass streams a smaller head. Returns the
// token of each logits column, none when `rows` covers the vocabulary.
std::vector<int32_t> keep_head_rows(const std::string& dir, int64_t rows, nf::Graph draft) {
  std::optional<nf::Node> head = nf::decoder::head_matmul(draft);
  if (!head) fail("the draft's LM head (a MatMul by a [hidden, vocab] weight before its logits) was not found");
  const nf::Tensor w = draft.initializer(head->input(1));
  const std::vector<int64_t> dims = w.dims();
  if (w.dtype() != NF_DTYPE_FLOAT32 || dims.size() != 2) fail("the draft's LM head is not a float32 matrix");
  const int64_t H = dims[0], V = dims[1];
  const std::vector<int32_t> tokens = head_tokens(read_draft_file(dir), rows, V);
  if (tokens.empty()) return tokens;
  const std::vector<int64_t> kept_dims{H, rows};
  nf::Tensor kept = nf::Tensor::create(NF_DTYPE_FLOAT32, kept_dims);
  const float* src = w.data_as<float>();
  float* dst = static_cast<float*>(kept.mutable_data());
  for (int64_t c = 0; c < rows; ++c)
    for (int64_t h = 0; h < H; ++h) dst[h * rows + c] = src[h * V + tokens[static_cast<size_t>(c)]];
  const std::string full = head->input(1), name = "lm_head.kept_rows";  // prefixed with the draft's other names
  draft.set_initializer(name, kept);
  head->set_input(1, name);
  draft.remove_initializer(full);
  nf::ValueType logits;
  if (draft.value_type(nf::decoder::kLogits, &logits) && logits.dims.size() == 3) {
    logits.dims[2] = rows;
    logits.dim_params.resize(3);
    logits.dim_params[2] = "";
    draft.set_value_type(nf::decoder::kLogits, logits.dtype, logits.dims, logits.dim_params);
  }
  return tokens;
}

}  // namespace eaglet
