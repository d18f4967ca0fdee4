// Model-local functions (ModelProto.functions) inlined into the graphs that call them, so
// the rest of npuforge reads one flat graph. Exporters write them for repeated modules:
// torch.onnx.export(export_modules_as_functions=...), Qualcomm's efficient-transformers
// (use_onnx_subfunctions: one function per decoder layer), torch 2.1-2.4's dynamo_export.
#include "onnx/internal.h"

#include <set>
#include <unordered_map>

namespace nf::onnx_io::detail {

namespace {

using Names = std::unordered_map<std::string, std::string>;

// Every name a function body defines, its nested subgraphs' included (ONNX forbids a
// subgraph to shadow an outer name, so after inlining they must all be unique).
void defined_names(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes, std::set<std::string>& out);

void defined_names(const onnx::GraphProto& g, std::set<std::string>& out) {
  for (const auto& v : g.input()) out.insert(v.name());
  for (const auto& t : g.initializer()) out.insert(t.name());
  defined_names(g.node(), out);
}

void defined_names(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes, std::set<std::string>& out) {
  for (const auto& n : nodes) {
    for (const auto& o : n.output()) out.insert(o);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) defined_names(a.g(), out);
      for (const auto& sg : a.graphs()) defined_names(sg, out);
    }
  }
}

std::string renamed(const Names& names, const std::string& v) {
  if (v.empty()) return v;  // an omitted optional input or output stays omitted
  auto it = names.find(v);
  return it == names.end() ? v : it->second;
}

void rename_graph(onnx::GraphProto& g, const Names& names, const onnx::NodeProto& call);

// A body node as it reads at the call: values renamed, attribute references replaced by the
// call's attributes (an unset one is left out, as ONNX says), subgraphs likewise.
void instantiate(onnx::NodeProto& n, const Names& names, const onnx::NodeProto& call) {
  for (auto& v : *n.mutable_input()) v = renamed(names, v);
  for (auto& v : *n.mutable_output()) v = renamed(names, v);
  google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
  for (const auto& a : n.attribute()) {
    if (a.ref_attr_name().empty()) {
      auto* kept = attrs.Add();
      *kept = a;
      if (kept->has_g()) rename_graph(*kept->mutable_g(), names, call);
      for (auto& sg : *kept->mutable_graphs()) rename_graph(sg, names, call);
      continue;
    }
    for (const auto& given : call.attribute())
      if (given.name() == a.ref_attr_name()) {
        auto* set = attrs.Add();
        *set = given;
        set->set_name(a.name());
      }
  }
  n.mutable_attribute()->Swap(&attrs);
}

void rename_graph(onnx::GraphProto& g, const Names& names, const onnx::NodeProto& call) {
  for (auto& v : *g.mutable_input()) v.set_name(renamed(names, v.name()));
  for (auto& v : *g.mutable_output()) v.set_name(renamed(names, v.name()));
  for (auto& v : *g.mutable_value_info()) v.set_name(renamed(names, v.name()));
  for (auto& t : *g.mutable_initializer()) t.set_name(renamed(names, t.name()));
  for (auto& n : *g.mutable_node()) instantiate(n, names, call);
}

class Inliner {
 public:
  Inliner(onnx::ModelProto& m, const std::string& origin) : m_(m), origin_(origin) {
    for (const auto& f : m.functions()) {
      if (!functions_.emplace(key(f.domain(), f.name()), &f).second)
        fail(origin_, "model-local function '" + f.name() + "' of domain '" + f.domain() + "' is defined twice");
    }
    for (const auto& op : m.opset_import()) opsets_[op.domain() == "ai.onnx" ? "" : op.domain()] = op.version();
  }

  void run() {
    graph(*m_.mutable_graph(), 0);
    // The functions' own domains name no operator once their calls are gone.
    std::set<std::string> used;
    collect_domains(m_.graph(), used);
    google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto> kept;
    for (const auto& op : m_.opset_import())
      if (!function_domains_.count(op.domain()) || used.count(op.domain())) *kept.Add() = op;
    m_.mutable_opset_import()->Swap(&kept);
    m_.clear_functions();
  }

 private:
  onnx::ModelProto& m_;
  const std::string& origin_;
  std::unordered_map<std::string, const onnx::FunctionProto*> functions_;
  std::unordered_map<std::string, int64_t> opsets_;
  std::set<std::string> function_domains_;
  size_t calls_ = 0;

  static std::string key(const std::string& domain, const std::string& name) { return domain + '\x1f' + name; }

  static void collect_domains(const onnx::GraphProto& g, std::set<std::string>& out) {
    for (const auto& n : g.node()) {
      out.insert(n.domain());
      for (const auto& a : n.attribute()) {
        if (a.has_g()) collect_domains(a.g(), out);
        for (const auto& sg : a.graphs()) collect_domains(sg, out);
      }
    }
  }

  void graph(onnx::GraphProto& g, int depth) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> flat;
    expand(*g.mutable_node(), flat, depth);
    g.mutable_node()->Swap(&flat);
  }

  void expand(google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
              google::protobuf::RepeatedPtrField<onnx::NodeProto>& out, int depth) {
    for (auto& n : nodes) {
      auto it = functions_.find(key(n.domain(), n.op_type()));
      if (it == functions_.end()) {
        for (auto& a : *n.mutable_attribute()) {
          if (a.has_g()) graph(*a.mutable_g(), depth);
          for (auto& sg : *a.mutable_graphs()) graph(sg, depth);
        }
        out.Add(std::move(n));
        continue;
      }
      // 64 levels of modules within modules is far past any exporter; a cycle never ends.
      if (depth >= 64)
        fail(origin_, "model-local function '" + n.op_type() + "' calls itself or nests deeper than 64 levels");
      auto body = instantiate_call(n, *it->second);
      expand(body, out, depth + 1);
    }
  }

  google::protobuf::RepeatedPtrField<onnx::NodeProto> instantiate_call(const onnx::NodeProto& call,
                                                                       const onnx::FunctionProto& f) {
    const std::string where = "node '" + call.name() + "' calls function '" + f.name() + "'";
    if (call.input_size() > f.input_size())
      fail(origin_, where + " with " + std::to_string(call.input_size()) + " inputs; it takes " +
                        std::to_string(f.input_size()));
    if (call.output_size() > f.output_size())
      fail(origin_, where + " for " + std::to_string(call.output_size()) + " outputs; it makes " +
                        std::to_string(f.output_size()));
    for (const auto& op : f.opset_import()) {
      std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
      auto [at, added] = opsets_.emplace(domain, op.version());
      if (added) {
        auto* imp = m_.add_opset_import();
        imp->set_domain(domain);
        imp->set_version(op.version());
      } else if (at->second != op.version()) {
        fail(origin_, "model-local function '" + f.name() + "' imports opset " + std::to_string(op.version()) +
                          " of domain '" + domain + "' and the model opset " + std::to_string(at->second) +
                          ": one opset per domain is supported");
      }
    }
    function_domains_.insert(f.domain());

    // Values the body makes get the call's own prefix; formal inputs and outputs become the
    // call's (an input the call omits is an omitted optional input).
    const std::string prefix = (call.name().empty() ? f.name() : call.name()) + "#" + std::to_string(calls_++) + "/";
    std::set<std::string> internal;
    defined_names(f.node(), internal);
    Names names;
    for (const auto& v : internal) names[v] = prefix + v;
    for (int i = 0; i < f.output_size(); ++i)
      names[f.output(i)] = i < call.output_size() ? call.output(i) : prefix + f.output(i);
    for (int i = 0; i < f.input_size(); ++i) names[f.input(i)] = i < call.input_size() ? call.input(i) : "";

    google::protobuf::RepeatedPtrField<onnx::NodeProto> body;
    for (const auto& fn : f.node()) {
      auto* n = body.Add();
      *n = fn;
      n->set_name(prefix + fn.name());
      instantiate(*n, names, call);
    }
    // A function that returns one of its inputs as it came: no body node makes that output.
    for (int i = 0; i < f.output_size() && i < call.output_size(); ++i) {
      if (internal.count(f.output(i)) || call.output(i).empty()) continue;
      std::string from;
      for (int j = 0; j < f.input_size(); ++j)
        if (f.input(j) == f.output(i) && j < call.input_size()) from = call.input(j);
      if (from.empty()) fail(origin_, where + ": no node of the function makes its output '" + f.output(i) + "'");
      auto* id = body.Add();
      id->set_op_type("Identity");
      id->set_name(prefix + "output_" + std::to_string(i));
      id->add_input(from);
      id->add_output(call.output(i));
    }
    return body;
  }
};

}  // namespace

void inline_local_functions(onnx::ModelProto& m, const std::string& origin) {
  if (m.functions_size() == 0) return;
  Inliner(m, origin).run();
}

}  // namespace nf::onnx_io::detail
