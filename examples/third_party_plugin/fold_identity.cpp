// fold_identity: a transform that removes Identity nodes, wiring each consumer to the
// Identity's input. Graph outputs produced by an Identity keep their names.
#include <npuforge/plugin.hpp>

#include <map>
#include <set>

namespace {

nf_status* apply(const char* options, nf_model_set* handle, nf_context* context) {
  return NF_TRY({
    nf::Options opts(options);
    nf::Context ctx(context);
    nf::ModelSet ms(handle);
    bool keep_outputs = opts.get<bool>("keep_graph_outputs", true);
    size_t removed = 0;
    for (nf::Graph g : ms.graphs()) {
      auto outs = g.outputs();
      std::set<std::string> graph_outputs(outs.begin(), outs.end());
      std::map<std::string, std::string> alias;  // Identity output -> its input
      for (nf::Node n : g.nodes()) {
        if (n.op_type() != "Identity" || !n.domain().empty()) continue;
        if (keep_outputs && graph_outputs.count(n.output(0))) continue;
        alias[n.output(0)] = n.input(0);
      }
      auto resolve = [&](std::string v) {
        for (auto it = alias.find(v); it != alias.end(); it = alias.find(v)) v = it->second;
        return v;
      };
      for (nf::Node n : g.nodes())
        for (size_t i = 0; i < n.input_count(); ++i)
          if (alias.count(n.input(i))) n.set_input(i, resolve(n.input(i)));
      for (auto& o : outs) o = resolve(o);
      g.set_outputs(outs);
      for (nf::Node n : g.nodes())
        if (n.op_type() == "Identity" && alias.count(n.output(0))) {
          g.remove_node(n);
          ++removed;
        }
    }
    ctx.info("removed " + std::to_string(removed) + " Identity node(s)");
    ms.set_metadata("fold_identity", {{"removed", removed}});  // lands in package.json
  });
}

const nf_transform_api api = {NF_ABI_VERSION, sizeof(nf_transform_api), apply, nullptr};

const nf_plugin_descriptor descriptor = {
    NF_ABI_VERSION, sizeof(nf_plugin_descriptor), NF_KIND_TRANSFORM, "fold_identity", "1.0.0",
    "Removes Identity nodes (an example plugin built out of tree)",
    R"({"type": "object", "additionalProperties": false,
        "properties": {"keep_graph_outputs": {"type": "boolean", "default": true,
          "description": "Keep Identity nodes that produce a graph output, so output names stay"}}})",
    &api};

}  // namespace

NF_PLUGIN_LIBRARY(&descriptor)
