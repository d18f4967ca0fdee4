// hidden_states: exposes the decoder's last hidden state (the LM head's input, i.e. after
// the final norm) as an extra graph output, for drafts that read the target's features
// (eaglet). Numerics of the other outputs do not change: one Identity node is added.
#include <npuforge/decoder_io.hpp>
#include <npuforge/plugin.hpp>

#include <algorithm>
#include <map>

namespace {

constexpr const char* kSchema = R"json({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "output": {"type": "string", "default": "hidden_states",
               "description": "name of the new graph output"}
  }
})json";

void expose(nf::Graph g, const std::string& output) {
  using nf::decoder::kLogits;
  auto outputs = g.outputs();
  if (std::find(outputs.begin(), outputs.end(), output) != outputs.end()) return;  // already there
  if (std::find(outputs.begin(), outputs.end(), kLogits) == outputs.end())
    throw nf::Error("hidden_states: graph '" + g.name() + "' has no 'logits' output");
  std::map<std::string, nf::Node> producer;
  for (nf::Node n : g.nodes())
    if (n.output_count() == 1) producer.emplace(n.output(0), n);
  auto made_by = [&](const std::string& v, const char* op) {
    auto it = producer.find(v);
    return it != producer.end() && it->second.op_type() == op;
  };
  // The LM head's MatMul, also behind a Cast (HF's logits.float()) or an Identity.
  const std::string head = nf::decoder::lm_head_output(
      [&](const std::string& v) { auto it = producer.find(v); return it == producer.end() ? std::vector<std::string>{} : it->second.inputs(); },
      [&](const std::string& v) { return made_by(v, "MatMul"); });
  if (head.empty())
    throw nf::Error("hidden_states: 'logits' of graph '" + g.name() +
                    "' does not come from a MatMul (the LM head, hidden x weight) through Cast/Identity/Reshape");
  const nf::Node n = producer.at(head);
  if (n.input_count() != 2) throw nf::Error("hidden_states: the LM head of graph '" + g.name() + "' is not a 2-input MatMul");
  const std::string hidden = n.input(0), weight = n.input(1);
  nf::ValueType lt, ht;
  // The hidden width: the head input's last axis, else the weight's first; a tied head
  // multiplies by Transpose(embedding [vocab, hidden]) (torch without constant folding).
  int64_t width = g.value_type(hidden, &ht) && !ht.dims.empty() ? ht.dims.back() : -1;
  if (width <= 0) {
    nf::ValueType wt;
    std::string w = weight;
    bool transposed = made_by(w, "Transpose");
    if (transposed) w = producer.at(w).input(0);
    if (g.value_type(w, &wt) && wt.dims.size() == 2) width = wt.dims[transposed ? 1 : 0];
  }
  if (width <= 0)
    throw nf::Error("hidden_states: the LM head weight '" + weight + "' of graph '" + g.name() +
                    "' needs a static [hidden, vocab] shape");
  if (!g.value_type(kLogits, &lt) || lt.dims.size() != 3)
    throw nf::Error("hidden_states: 'logits' of graph '" + g.name() + "' should be [batch, sequence, vocab]");
  const nf_dtype dtype = g.value_type(hidden, &ht) ? ht.dtype : lt.dtype;  // a Cast after the head changes logits'
  g.add_node("Identity", {hidden}, {output}, "/hidden_states/Identity");
  g.set_value_type(output, dtype, {lt.dims[0], lt.dims[1], width}, {lt.dim_params[0], lt.dim_params[1], ""});
  outputs.push_back(output);
  g.set_outputs(outputs);
}

nf_status* apply(const char* options_json, nf_model_set* handle, nf_context*) {
  return NF_TRY({
    nf::ModelSet ms(handle);
    const std::string output = nf::Options(options_json).get<std::string>("output", "hidden_states");
    for (nf::Graph g : ms.target_graphs()) expose(g, output);  // a draft has its own
  });
}

const nf_transform_api kApi = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, nullptr};

const nf_plugin_descriptor kDescriptor = {NF_ABI_VERSION,
                                          sizeof(nf_plugin_descriptor),
                                          NF_KIND_TRANSFORM,
                                          "hidden_states",
                                          "0.1.0",
                                          "adds the LM head's input (the last hidden state) as a graph output",
                                          kSchema,
                                          &kApi};

}  // namespace

NF_PLUGIN_LIBRARY(&kDescriptor)
