#include "graph_edit.h"

#include <npuforge/graph/copy_node.h>
#include <npuforge/graph/eliminate_dead_nodes.h>
#include <npuforge/graph/value_types.h>

namespace mha2sha {

Dims static_dims(const nf::Graph& g, const std::string& value, const std::string& what) {
  auto t = nf::graph::get_value_type(g, value);
  if (!t || !t->is_static())
    throw nf::Error("mha2sha: graph " + g.name() + ": " + what + " '" + value +
                    "' has no static shape (run arcl first: mha2sha works on static graphs)");
  return *t->dims;
}

std::optional<Dims> known_dims(const nf::Graph& g, const std::string& value) {
  auto t = nf::graph::get_value_type(g, value);
  if (!t || !t->is_static()) return std::nullopt;
  return *t->dims;
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

int64_t normalize_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

GraphEditor::GraphEditor(nf::Graph g, std::string prefix) : g_(g), prefix_(std::move(prefix)), names_(g) {}

std::vector<int64_t> axes_of(const nf::graph::GraphView& view, const nf::Node& n) {
  return n.input_count() > 1 && !n.input(1).empty() ? view.constant_ints(n.input(1)) : n.attr_ints("axes");
}

std::optional<int64_t> scalar_index(const nf::graph::GraphView& view, const nf::Node& gather) {
  if (gather.op_type() != "Gather" || gather.input_count() != 2) return std::nullopt;
  auto t = nf::graph::get_value_type(view.graph(), gather.input(1));
  const std::vector<int64_t> index = view.constant_ints(gather.input(1));
  if (!t || !t->dims || !t->dims->empty() || index.size() != 1) return std::nullopt;
  return index[0];
}

size_t finish_rewrite(nf::Graph g, size_t count) {
  if (count) {
    nf::graph::eliminate_dead_nodes(g);
    g.sort();
  }
  return count;
}

void GraphEditor::replace_by_slice(nf::Node node, const std::string& x, int64_t begin, int64_t end, int64_t axis) {
  const std::string out = node.output(0), name(node.name());
  g_.remove_node(node);
  add("Slice", {x, int64_constant({begin}), int64_constant({end}), int64_constant({axis})}, {out}, name);
}

std::string GraphEditor::int64_constant(const std::vector<int64_t>& values) {
  auto it = constants_.find(values);
  if (it != constants_.end()) return it->second;
  std::string name = names_.make(prefix_ + "const");
  nf::graph::set_int64_initializer(g_, name, values);
  constants_[values] = name;
  return name;
}

nf::Node GraphEditor::add(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                          const std::string& label) {
  return g_.add_node(op, in, out, names_.make(prefix_ + label));
}

nf::Node GraphEditor::clone(const nf::Node& src, const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs, const std::string& label) {
  try {
    return nf::graph::copy_node(g_, src, inputs, outputs, names_.make(prefix_ + label));
  } catch (const nf::Error& e) {
    throw nf::Error("mha2sha: " + std::string(e.what()));
  }
}

std::string GraphEditor::reshape(const std::string& value, const Dims& from, const Dims& to, const std::string& label) {
  if (from == to) return value;
  std::string out = names_.make(value + ".r");
  add("Reshape", {value, int64_constant(to)}, {out}, label);
  return out;
}

std::string GraphEditor::permute(const std::string& value, const Dims& dims, const Dims& perm, const std::string& label) {
  Dims out_dims;
  std::vector<int64_t> moved;  // source axes of size > 1, in output order
  for (int64_t p : perm) {
    out_dims.push_back(dims[p]);
    if (dims[p] != 1) moved.push_back(p);
  }
  bool bytes_stay = true;
  for (size_t i = 1; i < moved.size(); ++i) bytes_stay &= moved[i - 1] < moved[i];
  std::string key = value;
  for (int64_t d : out_dims) key += "," + std::to_string(d);
  key += bytes_stay ? "|r" : "|t";
  for (int64_t p : moved) key += "," + std::to_string(p);
  auto it = permuted_.find(key);
  if (it != permuted_.end()) return it->second;
  std::string out;
  if (bytes_stay) {
    out = reshape(value, dims, out_dims, label);
  } else {
    out = names_.make(value + ".t");
    add("Transpose", {value}, {out}, label).set_attr("perm", perm);
  }
  permuted_[key] = out;
  return out;
}

}  // namespace mha2sha
