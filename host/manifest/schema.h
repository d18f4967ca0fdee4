// A small JSON-schema validator: the subset plugins use to describe their options,
// documented for plugin authors in sdk/docs/options-schema.md. Keywords: type (name or
// list), properties, additionalProperties, required, default, enum, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, multipleOf, minLength, maxLength, pattern, items,
// minItems, maxItems, uniqueItems, oneOf, anyOf, title and description (documentation
// only), format (only "asset": see asset_properties). check_schema refuses anything else.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace nf::manifest {

struct SchemaError {
  std::string path;     // JSON pointer into the validated value ("" = the value itself)
  std::string message;  // one line, names the offending key
};

// How messages name what they talk about, e.g. noun "option", owner "transform 'arcl'":
//   "unknown option 'arm' for transform 'arcl'; did you mean 'arn'?"
struct SchemaNames {
  std::string noun = "key";
  std::string owner;  // "" = no " for ..." suffix
};

// "" when `schema` uses only the keywords above, each well formed (and every default fits
// its own schema); else one line naming the keyword and where it is, e.g.
//   "unknown keyword 'maximun' at /properties/steps; did you mean 'maximum'?"
std::string check_schema(const nlohmann::json& schema);

// Checks `value` against `schema` and fills in missing properties that have a default.
// Collects every error rather than stopping at the first.
// Throws nlohmann::json::exception only if the schema itself is malformed.
std::vector<SchemaError> validate_json(const nlohmann::json& schema, nlohmann::json& value,
                                       const SchemaNames& names = {});

// Top-level string properties marked "format": "asset": paths to files or directories that
// ship with the model (a draft model, learned embeddings). `npuforge build` copies them into
// the package; `npuforge run` resolves relative values against the package (or the folder
// of a bare model.onnx).
std::vector<std::string> asset_properties(const nlohmann::json& schema);

// "integer", "list of integer", "integer or list of integer", "boolean", "table", ...
std::string type_name(const nlohmann::json& schema);

// One line per option for `npuforge plugins`; nested tables appear as "outer.inner".
struct OptionDoc {
  std::string name;
  std::string type;           // type_name, plus ": one of a|b" for enums
  std::string default_value;  // JSON text, "" when there is none
  std::string range;          // ">= 1", "1..4096", "multiple of 32", "1 to 4 items", ...
  std::string description;
  bool required = false;
};
std::vector<OptionDoc> describe_options(const nlohmann::json& schema);

// Appends a key or index to a JSON pointer, escaping '~' and '/'.
std::string pointer_append(const std::string& pointer, const std::string& key);
std::string pointer_append(const std::string& pointer, size_t index);

}  // namespace nf::manifest
