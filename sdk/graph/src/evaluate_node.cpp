#include "npuforge/graph/evaluate_node.h"

#include "npuforge/graph/operators.h"

namespace nf::graph {

bool can_evaluate(const Node& n) {
  const Operator* op = find_operator(n.op_type(), n.domain());
  return op && op->evaluate;
}

std::vector<kernels::Tensor> evaluate_node(const Node& n, const std::vector<const kernels::Tensor*>& inputs,
                                           int64_t opset) {
  const Operator* op = find_operator(n.op_type(), n.domain());
  if (!op || !op->evaluate) throw Error("cannot evaluate operator " + std::string(n.op_type()));
  std::vector<kernels::Tensor> out(n.output_count());
  op->evaluate(GraphNode(n, opset), inputs, out);
  return out;
}

}  // namespace nf::graph
