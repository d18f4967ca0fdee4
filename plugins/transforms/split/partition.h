// Cutting one static graph into parts at given boundary values.
//
// Nodes on the token path (those computed from input_ids) belong to exactly one part: the
// number of boundaries they depend on. Side computations that do not read input_ids
// (RoPE tables from position_ids, KV layout transposes, tied-weight transposes) are
// copied into every part that reads them, so a part takes from the runner only graph
// inputs and from earlier parts only token-path values.
#pragma once

#include <npuforge/graph/graph_view.h>

#include <string>
#include <vector>

namespace split {

struct PartPlan {
  std::vector<size_t> nodes;                    // indices into the sorted source graph
  std::vector<std::string> runner_inputs;       // graph inputs the part reads
  std::vector<std::string> chained_inputs;      // values earlier parts compute
  std::vector<size_t> chained_from;             // the part (0-based) each chained input comes from
  std::vector<std::string> chained_outputs;     // values later parts read
  std::vector<std::string> graph_outputs;       // the source graph's outputs this part makes
};

// `cuts[j]` is the value part j ends with and part j+1 starts from (cuts.size() + 1 parts).
// The source graph must be sorted. Throws nf::Error when the cuts are not in sequence on
// the token path or a part would be empty.
std::vector<PartPlan> plan_parts(const nf::graph::GraphView& view, const std::vector<std::string>& cuts);

// Adds graph `name` to the model set: a copy of `source` (weights shared) reduced to the
// part's nodes and IO.
void build_part(nf::ModelSet& ms, const nf::Graph& source, const PartPlan& plan, const std::string& name);

}  // namespace split
