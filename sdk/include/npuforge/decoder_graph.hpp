// Where a decoder graph keeps its token embedding and its LM head, found by what the nodes
// do (decoder_io.hpp's names), for plugins that edit or compare them. Header-only over
// plugin.hpp.
#pragma once

#include <npuforge/decoder_io.hpp>
#include <npuforge/plugin.hpp>

#include <map>
#include <optional>
#include <string>

namespace nf::decoder {

// Each value's producing node.
inline std::map<std::string, Node> producers(const Graph& g) {
  std::map<std::string, Node> p;
  for (Node n : g.nodes())
    for (const std::string& o : n.outputs()) p.emplace(o, n);
  return p;
}

// The token embedding: Gather(initializer [rows, hidden], input_ids) with any Casts between
// (an int32 export's .long(), the host's int64 input in front of it).
inline std::optional<Node> embedding_gather(const Graph& g) {
  const auto producer = producers(g);
  for (Node n : g.nodes()) {
    if (n.op_type() != "Gather" || n.input_count() < 2 || !g.initializer(n.input(0))) continue;
    std::string idx = n.input(1);
    for (auto p = producer.find(idx); p != producer.end() && p->second.op_type() == "Cast"; p = producer.find(idx))
      idx = p->second.input(0);
    if (idx == kInputIds) return n;
  }
  return std::nullopt;
}

// The LM head when it is a MatMul by an initializer ([hidden, vocab]) that makes the logits
// (through the ops lm_head_output walks); none when the first MatMul met reads its weight
// another way (a tied head's Transpose of the embedding table).
inline std::optional<Node> head_matmul(const Graph& g) {
  const auto producer = producers(g);
  std::optional<Node> head;
  lm_head_output(
      [&](const std::string& v) {
        auto p = producer.find(v);
        return p == producer.end() ? std::vector<std::string>{} : p->second.inputs();
      },
      [&](const std::string& v) {
        auto p = producer.find(v);
        if (p == producer.end() || p->second.op_type() != "MatMul") return false;
        head = p->second;
        return true;
      });
  if (head && !g.initializer(head->input(1))) return std::nullopt;
  return head;
}

// The initializer graph output `out` is: itself, or the input of the Identity that writes it
// (a kv_prefix graph's outputs, graph_roles.hpp); "" when it is not a constant.
inline std::string initializer_of_output(const Graph& g, const std::string& out) {
  if (g.initializer(out)) return out;
  for (const Node& n : g.nodes())
    if (n.op_type() == "Identity" && n.output_count() == 1 && n.output(0) == out && g.initializer(n.input(0)))
      return n.input(0);
  return "";
}

}  // namespace nf::decoder
