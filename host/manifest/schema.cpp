#include "manifest/schema.h"
#include "manifest/suggest.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <set>

namespace nf::manifest {

using nlohmann::json;

std::string pointer_append(const std::string& pointer, const std::string& key) {
  std::string out = pointer + "/";
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string pointer_append(const std::string& pointer, size_t index) { return pointer + "/" + std::to_string(index); }

namespace {

// Where the walker is: the JSON pointer for SchemaError and a readable name for messages.
struct Path {
  std::string pointer;  // "/arn/1"
  std::string display;  // "arn[1]"
  Path key(const std::string& k) const { return {pointer_append(pointer, k), display.empty() ? k : display + "." + k}; }
  Path index(size_t i) const { return {pointer_append(pointer, i), display + "[" + std::to_string(i) + "]"}; }
};

bool is_integer(const json& v) { return v.is_number_integer(); }

bool type_matches(const std::string& type, const json& v) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "integer") return is_integer(v);
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "null") return v.is_null();
  return false;
}

bool schema_type_matches(const json& schema, const json& v) {
  if (!schema.is_object() || !schema.contains("type")) return true;
  const json& t = schema["type"];
  if (t.is_string()) return type_matches(t.get<std::string>(), v);
  for (const auto& one : t)
    if (type_matches(one.get<std::string>(), v)) return true;
  return false;
}

std::string single_type_name(const std::string& type, const json& schema) {
  if (type == "array") {
    if (schema.contains("items") && schema["items"].is_object()) return "list of " + type_name(schema["items"]);
    return "list";
  }
  if (type == "object") return "table";
  return type;
}

// The value's kind in TOML terms, as the user wrote it.
std::string actual_type(const json& v) {
  if (is_integer(v)) return "integer";
  if (v.is_number()) return "number";
  if (v.is_array()) return "list";
  if (v.is_object()) return "table";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  return "null";
}

// Scalars shown as JSON text (one line, escaped), cut short if long.
std::string preview(const json& v) {
  if (v.is_array() || v.is_object()) return actual_type(v);
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {  // JSON text would say null
    double d = v.get<double>();
    return std::string("number ") + (std::isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
  }
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) {
    size_t cut = 37;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
    text = text.substr(0, cut) + "...";
  }
  return v.is_string() ? "string " + text : actual_type(v) + " " + text;
}

// Exact for every 64-bit integer (x86 long double has a 64-bit mantissa).
long double as_number(const json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
  return static_cast<long double>(v.get<double>());
}

std::string enum_text(const json& values) {
  std::vector<std::string> names;
  for (const auto& e : values) names.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  return join(names, "|");
}

// Characters (code points) of UTF-8 text, as JSON Schema counts string length.
size_t utf8_length(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

class Validator {
 public:
  explicit Validator(const SchemaNames& names) : names_(names) {}
  std::vector<SchemaError> errors;

  void check(const json& schema, json& value, const Path& path) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail(path, subject(path) + " is not allowed");
      return;
    }
    if (!schema.is_object()) return;
    if (!schema_type_matches(schema, value)) {
      fail(path, subject(path) + " must be " + type_name(schema) + ", got " + preview(value));
      return;  // further checks would only repeat the type error
    }
    if (schema.contains("oneOf")) alternatives(schema["oneOf"], value, path, true);
    if (schema.contains("anyOf")) alternatives(schema["anyOf"], value, path, false);
    if (schema.contains("enum")) check_enum(schema["enum"], value, path);
    if (value.is_number()) check_number(schema, value, path);
    if (value.is_string()) check_string(schema, value, path);
    if (value.is_array()) check_array(schema, value, path);
    if (value.is_object()) check_object(schema, value, path);
  }

 private:
  const SchemaNames& names_;

  void fail(const Path& path, std::string message) { errors.push_back({path.pointer, std::move(message)}); }

  std::string owner_suffix() const { return names_.owner.empty() ? "" : " for " + names_.owner; }

  std::string subject(const Path& path) const {
    if (path.display.empty()) return names_.owner.empty() ? "value" : names_.owner + " options";
    return names_.noun + " " + quote(path.display) + owner_suffix();
  }

  void check_enum(const json& allowed, const json& value, const Path& path) {
    for (const auto& e : allowed)
      if (e == value) return;
    std::string hint;
    if (value.is_string()) {
      std::vector<std::string> words;
      for (const auto& e : allowed)
        if (e.is_string()) words.push_back(e.get<std::string>());
      hint = did_you_mean(value.get<std::string>(), words);
    }
    fail(path, subject(path) + " must be one of " + enum_text(allowed) + ", got " + preview(value) + hint);
  }

  void check_number(const json& schema, const json& value, const Path& path) {
    if (value.is_number_float() && !std::isfinite(value.get<double>())) {
      fail(path, subject(path) + " must be a finite number, got " + preview(value));
      return;
    }
    const long double v = as_number(value);
    auto bound = [&](const char* key, const char* op, auto ok) {
      if (!schema.contains(key)) return;
      const json& b = schema[key];
      if (!ok(v, as_number(b))) fail(path, subject(path) + " must be " + op + " " + b.dump() + ", got " + value.dump());
    };
    bound("minimum", ">=", [](long double a, long double b) { return a >= b; });
    bound("maximum", "<=", [](long double a, long double b) { return a <= b; });
    bound("exclusiveMinimum", ">", [](long double a, long double b) { return a > b; });
    bound("exclusiveMaximum", "<", [](long double a, long double b) { return a < b; });
    if (schema.contains("multipleOf")) {
      const long double m = as_number(schema["multipleOf"]);
      if (m > 0) {
        // fmod is exact; the tolerance only matters for fractional steps like 0.1.
        long double r = std::fabs(std::fmod(v, m));
        bool ok = is_integer(value) && is_integer(schema["multipleOf"]) ? r == 0 : r <= m * 1e-9L || m - r <= m * 1e-9L;
        if (!ok)
          fail(path, subject(path) + " must be a multiple of " + schema["multipleOf"].dump() + ", got " + value.dump());
      }
    }
  }

  void check_string(const json& schema, const json& value, const Path& path) {
    const auto& text = value.get_ref<const std::string&>();
    const size_t n = utf8_length(text);
    if (schema.contains("minLength") && n < schema["minLength"].get<size_t>())
      fail(path, subject(path) + " needs at least " + schema["minLength"].dump() + " character(s), got " + preview(value));
    if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>())
      fail(path, subject(path) + " allows at most " + schema["maxLength"].dump() + " character(s), got " +
                     std::to_string(n));
    if (schema.contains("pattern") && !std::regex_search(text, std::regex(schema["pattern"].get<std::string>())))
      fail(path, subject(path) + " must match " + schema["pattern"].dump() + ", got " + preview(value));
  }

  void check_array(const json& schema, json& value, const Path& path) {
    const size_t n = value.size();
    if (schema.contains("minItems") && n < schema["minItems"].get<size_t>())
      fail(path, subject(path) + " needs at least " + schema["minItems"].dump() + " item(s), got " + std::to_string(n));
    if (schema.contains("maxItems") && n > schema["maxItems"].get<size_t>())
      fail(path, subject(path) + " allows at most " + schema["maxItems"].dump() + " item(s), got " + std::to_string(n));
    if (schema.contains("items"))
      for (size_t i = 0; i < n; ++i) check(schema["items"], value[i], path.index(i));
    if (schema.value("uniqueItems", false)) {
      std::set<json> seen;
      for (size_t i = 0; i < n; ++i)
        if (!seen.insert(value[i]).second) {
          Path at = path.index(i);
          fail(at, subject(at) + " repeats " + preview(value[i]) + " (items must be unique)");
        }
    }
  }

  void check_object(const json& schema, json& value, const Path& path) {
    static const json empty = json::object();
    const json& props = schema.contains("properties") ? schema["properties"] : empty;
    // Defaults first: a required key that has a default is satisfied by it, and a second
    // validation of the filled value gives the same answer as the first.
    for (const auto& [key, prop] : props.items())
      if (!value.contains(key) && prop.is_object() && prop.contains("default")) value[key] = prop["default"];
    if (schema.contains("required"))
      for (const auto& r : schema["required"]) {
        const auto key = r.get<std::string>();
        if (!value.contains(key))
          fail(path, "missing required " + names_.noun + " " + quote(path.key(key).display) + owner_suffix());
      }

    const json additional = schema.value("additionalProperties", json(true));
    std::vector<std::string> allowed;
    for (const auto& [key, prop] : props.items()) allowed.push_back(key);
    for (auto& [key, member] : value.items()) {
      const Path at = path.key(key);
      if (props.contains(key)) {
        check(props[key], member, at);
      } else if (additional.is_boolean() && !additional.get<bool>()) {
        std::string hint = did_you_mean(key, allowed);
        if (hint.empty()) hint = allowed.empty() ? " (it takes none)" : " (known: " + join(allowed) + ")";
        fail(at, "unknown " + names_.noun + " " + quote(at.display) + owner_suffix() + hint);
      } else if (additional.is_object()) {
        check(additional, member, at);
      }
    }
  }

  void alternatives(const json& branches, json& value, const Path& path, bool exactly_one) {
    std::vector<std::vector<SchemaError>> failures;
    std::optional<json> filled;  // value with the defaults of the first branch that fits
    int matches = 0;
    for (const auto& branch : branches) {
      Validator sub(names_);
      json copy = value;
      sub.check(branch, copy, path);
      if (sub.errors.empty()) {
        if (!matches++) filled = std::move(copy);
      }
      failures.push_back(std::move(sub.errors));
    }
    if (matches == 1 || (matches > 1 && !exactly_one)) {
      value = std::move(*filled);
      return;
    }
    if (matches > 1) {
      fail(path, subject(path) + " matches more than one of: " + type_name(json{{"oneOf", branches}}));
      return;
    }
    // Nothing fits: the branch of the right type knows best what is wrong.
    for (size_t i = 0; i < branches.size(); ++i)
      if (branches[i].is_object() && branches[i].contains("type") && schema_type_matches(branches[i], value)) {
        errors.insert(errors.end(), failures[i].begin(), failures[i].end());
        return;
      }
    fail(path, subject(path) + " must be " + type_name(json{{"anyOf", branches}}) + ", got " + preview(value));
  }
};

}  // namespace

std::string type_name(const json& schema) {
  if (!schema.is_object()) return "any";
  for (const char* key : {"oneOf", "anyOf"})
    if (schema.contains(key) && schema[key].is_array()) {
      std::vector<std::string> names;
      for (const auto& b : schema[key]) names.push_back(type_name(b));
      return join(names, " or ");
    }
  if (!schema.contains("type")) return "any";
  const json& t = schema["type"];
  if (t.is_string()) return single_type_name(t.get<std::string>(), schema);
  std::vector<std::string> names;
  for (const auto& one : t) names.push_back(single_type_name(one.get<std::string>(), schema));
  return join(names, " or ");
}

std::vector<SchemaError> validate_json(const json& schema, json& value, const SchemaNames& names) {
  Validator v(names);
  v.check(schema, value, Path{});
  return std::move(v.errors);
}

namespace {

const std::vector<std::string>& schema_keywords() {
  static const std::vector<std::string> words{
      "type", "properties", "additionalProperties", "required", "default", "enum", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "items",
      "minItems", "maxItems", "uniqueItems", "oneOf", "anyOf", "title", "description", "format"};
  return words;
}

bool is_count(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

// Walks a schema and returns the first problem as one line ("" when there is none).
class SchemaChecker {
 public:
  std::string check(const json& s, const std::string& at) {
    if (s.is_boolean()) return "";
    if (!s.is_object()) return "the schema at " + where(at) + " is " + actual_type(s) + ", not a table or boolean";
    for (const auto& [key, v] : s.items()) {
      const auto& known = schema_keywords();
      if (std::find(known.begin(), known.end(), key) == known.end())
        return "unknown keyword " + quote(key) + " at " + where(at) + did_you_mean(key, known);
      if (std::string why = keyword(key, v, at); !why.empty()) return why;
    }
    if (s.contains("default")) {
      json value = s["default"];
      auto errors = validate_json(s, value);
      if (!errors.empty()) return "keyword 'default' at " + where(at) + " does not fit its own schema: " + errors[0].message;
    }
    return "";
  }

 private:
  static std::string where(const std::string& at) { return at.empty() ? "the top level" : at; }
  static std::string bad(const std::string& key, const std::string& at, const std::string& want) {
    return "keyword " + quote(key) + " at " + where(at) + " must be " + want;
  }

  std::string keyword(const std::string& key, const json& v, const std::string& at) {
    const std::string inner = pointer_append(at, key);
    if (key == "type") {
      static const std::vector<std::string> types{"object", "array", "integer", "number", "boolean", "string", "null"};
      auto one = [&](const json& t) {
        return t.is_string() && std::find(types.begin(), types.end(), t.get<std::string>()) != types.end();
      };
      bool ok = one(v) || (v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), one));
      return ok ? "" : bad(key, at, "one of " + join(types, "|") + " or a list of them, got " + preview(v));
    }
    if (key == "properties") {
      if (!v.is_object()) return bad(key, at, "a table of schemas");
      for (const auto& [name, prop] : v.items())
        if (std::string why = check(prop, pointer_append(inner, name)); !why.empty()) return why;
      return "";
    }
    if (key == "additionalProperties" || key == "items") {
      if (!v.is_boolean() && !v.is_object()) return bad(key, at, "a schema (table or boolean)");
      return check(v, inner);
    }
    if (key == "oneOf" || key == "anyOf") {
      if (!v.is_array() || v.empty()) return bad(key, at, "a non-empty list of schemas");
      for (size_t i = 0; i < v.size(); ++i)
        if (std::string why = check(v[i], pointer_append(inner, i)); !why.empty()) return why;
      return "";
    }
    if (key == "required") {
      bool ok = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& r) { return r.is_string(); });
      return ok ? "" : bad(key, at, "a list of property names");
    }
    if (key == "enum") return v.is_array() && !v.empty() ? "" : bad(key, at, "a non-empty list");
    if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum")
      return v.is_number() ? "" : bad(key, at, "a number, got " + preview(v));
    if (key == "multipleOf")
      return v.is_number() && v.get<double>() > 0 ? "" : bad(key, at, "a number > 0, got " + preview(v));
    if (key == "minLength" || key == "maxLength" || key == "minItems" || key == "maxItems")
      return is_count(v) ? "" : bad(key, at, "an integer >= 0, got " + preview(v));
    if (key == "uniqueItems") return v.is_boolean() ? "" : bad(key, at, "a boolean, got " + preview(v));
    if (key == "title" || key == "description") return v.is_string() ? "" : bad(key, at, "a string, got " + preview(v));
    if (key == "format")
      return v == "asset" ? "" : bad(key, at, "\"asset\" (the only format with a meaning here), got " + preview(v));
    if (key == "pattern") {
      if (!v.is_string()) return bad(key, at, "a string, got " + preview(v));
      try {
        std::regex re(v.get<std::string>());
      } catch (const std::regex_error& e) {
        return bad(key, at, "an ECMAScript regular expression: " + preview(v) + " is not (" + e.what() + ")");
      }
    }
    return "";  // default: any value, checked against the schema once the keywords are
  }
};

}  // namespace

std::string check_schema(const json& schema) {
  if (!schema.is_object()) return "the schema is " + actual_type(schema) + ", not a table";
  return SchemaChecker().check(schema, "");
}

namespace {

std::string range_text(const json& s) {
  if (!s.is_object()) return "";
  std::vector<std::string> parts;
  if (s.contains("minimum") && s.contains("maximum")) {
    parts.push_back(s["minimum"].dump() + ".." + s["maximum"].dump());
  } else {
    if (s.contains("minimum")) parts.push_back(">= " + s["minimum"].dump());
    if (s.contains("maximum")) parts.push_back("<= " + s["maximum"].dump());
  }
  if (s.contains("exclusiveMinimum")) parts.push_back("> " + s["exclusiveMinimum"].dump());
  if (s.contains("exclusiveMaximum")) parts.push_back("< " + s["exclusiveMaximum"].dump());
  if (s.contains("multipleOf")) parts.push_back("multiple of " + s["multipleOf"].dump());
  if (s.contains("minItems") && s.contains("maxItems"))
    parts.push_back(s["minItems"].dump() + " to " + s["maxItems"].dump() + " items");
  else if (s.contains("minItems"))
    parts.push_back("at least " + s["minItems"].dump() + " item(s)");
  else if (s.contains("maxItems"))
    parts.push_back("at most " + s["maxItems"].dump() + " item(s)");
  if (s.value("uniqueItems", false)) parts.push_back("unique");
  if (s.contains("minLength") && s.contains("maxLength"))
    parts.push_back(s["minLength"].dump() + " to " + s["maxLength"].dump() + " characters");
  else if (s.contains("minLength"))
    parts.push_back("at least " + s["minLength"].dump() + " character(s)");
  else if (s.contains("maxLength"))
    parts.push_back("at most " + s["maxLength"].dump() + " character(s)");
  if (s.contains("pattern")) parts.push_back("matching " + s["pattern"].dump());
  if (s.contains("items")) {
    std::string inner = range_text(s["items"]);
    if (!inner.empty()) parts.push_back("each " + inner);
  }
  for (const char* key : {"oneOf", "anyOf"})
    if (s.contains(key) && s[key].is_array())
      for (const auto& b : s[key]) {
        std::string inner = range_text(b);
        if (!inner.empty() && std::find(parts.begin(), parts.end(), inner) == parts.end()) parts.push_back(inner);
      }
  return join(parts, ", ");
}

void describe_into(const json& schema, const std::string& prefix, std::vector<OptionDoc>& out) {
  if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object()) return;
  std::set<std::string> required;
  if (schema.contains("required") && schema["required"].is_array())
    for (const auto& r : schema["required"])
      if (r.is_string()) required.insert(r.get<std::string>());
  for (const auto& [key, prop] : schema["properties"].items()) {
    OptionDoc doc;
    doc.name = prefix + key;
    doc.type = type_name(prop);
    if (prop.is_object()) {
      if (prop.contains("enum")) doc.type += ": one of " + enum_text(prop["enum"]);
      if (prop.contains("default")) doc.default_value = prop["default"].dump();
      if (prop.contains("description") && prop["description"].is_string())
        doc.description = prop["description"].get<std::string>();
    }
    doc.range = range_text(prop);
    doc.required = required.count(key) > 0;
    out.push_back(std::move(doc));
    describe_into(prop, prefix + key + ".", out);
  }
}

}  // namespace

std::vector<OptionDoc> describe_options(const json& schema) {
  std::vector<OptionDoc> out;
  describe_into(schema, "", out);
  return out;
}

std::vector<std::string> asset_properties(const json& schema) {
  std::vector<std::string> out;
  if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object()) return out;
  for (const auto& [key, prop] : schema["properties"].items())
    if (prop.is_object() && prop.value("format", "") == "asset") out.push_back(key);
  return out;
}

}  // namespace nf::manifest
