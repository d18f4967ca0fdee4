#include "npuforge/graph/make_static.h"

#include "npuforge/graph/eliminate_dead_nodes.h"
#include "npuforge/graph/infer_shapes.h"
#include "npuforge/graph/operators.h"

namespace nf::graph {

MakeStaticResult make_static(Graph g, const std::string& what, const FoldOptions& opts) {
  for (const std::string& in : g.inputs()) {
    auto t = get_value_type(g, in);
    if (!t || !t->is_static()) throw Error(what + ": graph input '" + in + "' has no static shape");
  }
  MakeStaticResult result;
  // A fold can expose new Shape-of-static values only through types it inferred in the
  // same sweep, so one fold is enough; the loop guards against exotic orders.
  for (;;) {
    size_t folded = fold_constants(g, opts).folded_nodes;
    result.dead_nodes += eliminate_dead_nodes(g).nodes;
    result.folded_nodes += folded;
    if (folded == 0) break;
  }
  InferShapesResult types = infer_shapes(g);
  // An op the engine does not know has no shape rule: name it rather than the value it left
  // unshaped (an operator of a later opset, or another domain's).
  if (!types.not_static.empty())
    for (const Node& n : g.nodes())
      if (!find_operator(n.op_type(), n.domain()))
        throw Error(what + ": op '" + std::string(n.op_type()) + "'" +
                    (n.domain().empty() ? "" : " (domain " + std::string(n.domain()) + ")") + " of node '" +
                    std::string(n.name()) + "' is not an operator npuforge knows (graph opset " +
                    std::to_string(g.opset()) + ")");
  if (!types.not_static.empty()) {
    auto t = get_value_type(g, types.not_static.front());
    throw Error(what + ": value '" + types.not_static.front() + "' has no static shape after folding (" +
                (t ? to_string(*t) : std::string("unknown")) + ")");
  }
  for (const Node& n : g.nodes())
    if (n.op_type() == "Shape")
      throw Error(what + ": Shape node '" + std::string(n.name()) + "' remains after folding");
  return result;
}

}  // namespace nf::graph
