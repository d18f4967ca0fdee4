#include "npuforge/graph/copy_node.h"

namespace nf::graph {

Node copy_node(Graph dst, const Node& src, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               const std::string& name) {
  Node n = dst.add_node(std::string(src.op_type()), inputs, outputs, name, std::string(src.domain()));
  const nf_host_api& h = host();
  for (size_t i = 0; i < h.node_attr_count(src.get()); ++i) {
    const char* a = h.node_attr_name(src.get(), i);
    switch (h.node_attr_type(src.get(), a)) {
      case NF_ATTR_INT: n.set_attr(a, src.attr_int(a, 0)); break;
      case NF_ATTR_FLOAT: n.set_attr(a, src.attr_float(a, 0.f)); break;
      case NF_ATTR_STRING: n.set_attr(a, src.attr_string(a, "")); break;
      case NF_ATTR_INTS: n.set_attr(a, src.attr_ints(a)); break;
      case NF_ATTR_FLOATS: n.set_attr(a, src.attr_floats(a)); break;
      case NF_ATTR_TENSOR: n.set_attr(a, src.attr_tensor(a)); break;
      default:
        throw Error("cannot copy attribute '" + std::string(a) + "' of node '" + std::string(src.name()) + "'");
    }
  }
  return n;
}

}  // namespace nf::graph
