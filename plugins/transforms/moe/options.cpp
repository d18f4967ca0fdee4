#include "options.h"

#include <regex>

namespace moe {

const char* options_schema() {
  return R"schema({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "overridden_subselection": {
      "description": "experts kept: a list of expert indices for every MoE layer, or a table from layer index to such a list (layers not named keep all their experts; default: every expert kept); removed experts leave the router (their logits are masked before the softmax) and the graph",
      "anyOf": [{"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}}]},
    "remove_op_predicate": {
      "description": "ECMAScript regex over node names: every expert with a node whose name matches is removed (default: none; e.g. \"layers\\\\.1/.*/experts\\\\.3/\")",
      "type": "string", "minLength": 1}
  }
})schema";
}

namespace {

std::vector<int64_t> expert_list(const nlohmann::json& j, const std::string& where) {
  if (!j.is_array() || j.empty())
    throw nf::Error("moe: option 'overridden_subselection'" + where + " must be a non-empty list of expert indices");
  std::vector<int64_t> r;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw nf::Error("moe: option 'overridden_subselection'" + where + " must list expert indices >= 0, got " + v.dump());
    r.push_back(v.get<int64_t>());
  }
  return r;
}

}  // namespace

MoeOptions parse_options(const nf::Options& o) {
  MoeOptions opts;
  const nlohmann::json& j = o.json();
  if (o.has("overridden_subselection")) {
    const auto& s = j["overridden_subselection"];
    if (s.is_array()) {
      opts.all_layers = expert_list(s, "");
    } else if (s.is_object()) {
      for (const auto& [key, list] : s.items()) {
        size_t used = 0;
        int64_t layer = -1;
        try {
          layer = std::stoll(key, &used);
        } catch (...) {
        }
        if (used != key.size() || layer < 0)
          throw nf::Error("moe: option 'overridden_subselection': key '" + key + "' is not a layer index");
        opts.per_layer[layer] = expert_list(list, " for layer " + key);
      }
    } else {
      throw nf::Error("moe: option 'overridden_subselection' must be a list of expert indices or a table of them by layer");
    }
  }
  if (o.has("remove_op_predicate")) {
    if (!j["remove_op_predicate"].is_string()) throw nf::Error("moe: option 'remove_op_predicate' must be a regex string");
    opts.remove_op_predicate = j["remove_op_predicate"].get<std::string>();
    try {
      std::regex check(opts.remove_op_predicate);
    } catch (const std::regex_error& e) {
      throw nf::Error("moe: option 'remove_op_predicate' is not a valid regex: " + std::string(e.what()));
    }
  }
  return opts;
}

}  // namespace moe
