// moe's options: which experts stay (the seed's amoe.overridden_subselection and
// amoe.remove_op_predicate, as JSON: expert lists and a node-name regex).
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe {

struct MoeOptions {
  // Experts kept in every MoE layer (`all_layers`) or per layer index; unset: all.
  std::optional<std::vector<int64_t>> all_layers;
  std::map<int64_t, std::vector<int64_t>> per_layer;
  // ECMAScript regex over node names: an expert any of whose nodes matches is removed.
  std::string remove_op_predicate;
};

const char* options_schema();
// Throws nf::Error naming the option on a wrong value.
MoeOptions parse_options(const nf::Options& o);

}  // namespace moe
