#include "options.h"

#include <regex>

namespace split {

const char* options_schema() {
  return R"schema({
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "num_splits": {
      "description": "parts each AR/CL graph is cut into (embedding and LM head parts included); default 3 + parameter bytes // 2 GiB with both split off (the seed's formula: one more decoder part per 2 GB)",
      "type": "integer", "minimum": 1},
    "split_embedding": {
      "description": "the token-embedding lookup becomes its own first part",
      "type": "boolean", "default": true},
    "split_lm_head": {
      "description": "the final norm and LM head become their own last part",
      "type": "boolean", "default": true},
    "layer_boundary_name_regex": {
      "description": "ECMAScript regex on node names; each matching node's first output ends a layer (a place a cut may go). Default: the residual-Add heuristic (the output of every decoder layer's second residual Add)",
      "type": "string", "minLength": 1}
  }
})schema";
}

SplitOptions parse_options(const nf::Options& o) {
  SplitOptions opts;
  const auto& j = o.json();
  if (o.has("num_splits")) {
    if (!j["num_splits"].is_number_integer() || j["num_splits"].get<int64_t>() < 1)
      throw nf::Error("split: option 'num_splits' must be an integer >= 1, got " + j["num_splits"].dump());
    opts.num_splits = j["num_splits"].get<int64_t>();
  }
  for (const char* key : {"split_embedding", "split_lm_head"}) {
    if (!o.has(key)) continue;
    if (!j[key].is_boolean()) throw nf::Error(std::string("split: option '") + key + "' must be true or false");
    (std::string(key) == "split_embedding" ? opts.split_embedding : opts.split_lm_head) = j[key].get<bool>();
  }
  if (o.has("layer_boundary_name_regex")) {
    if (!j["layer_boundary_name_regex"].is_string() || j["layer_boundary_name_regex"].get<std::string>().empty())
      throw nf::Error("split: option 'layer_boundary_name_regex' must be a non-empty string");
    std::string re = j["layer_boundary_name_regex"].get<std::string>();
    try {
      std::regex check(re);
    } catch (const std::regex_error& e) {
      throw nf::Error("split: option 'layer_boundary_name_regex' = \"" + re + "\" is not a valid regex (" + e.what() + ")");
    }
    opts.layer_boundary_name_regex = re;
  }
  return opts;
}

int64_t default_num_splits(const SplitOptions& o, int64_t parameter_bytes) {
  return (o.split_embedding ? 1 : 0) + (o.split_lm_head ? 1 : 0) + 1 + parameter_bytes / kBytesPerDecoderPart;
}

}  // namespace split
