// A node copied into a graph (the same one or another): its operator, domain and every
// attribute, reading and writing the values given.
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

namespace nf::graph {

// Throws nf::Error when an attribute is of a kind the ABI cannot copy.
Node copy_node(Graph dst, const Node& src, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               const std::string& name);

}  // namespace nf::graph
