// The JSON-schema subset on its own: every keyword, the messages, defaults, describe_options.
#include "manifest/schema.h"
#include "manifest/suggest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using nlohmann::json;
using namespace nf::manifest;

namespace {

// Validates and returns "path: message" lines, so a test states the whole outcome.
std::vector<std::string> check(const json& schema, json& value) {
  std::vector<std::string> out;
  for (const auto& e : validate_json(schema, value, {"option", "transform 'arcl'"}))
    out.push_back(e.path + ": " + e.message);
  return out;
}
std::vector<std::string> check(const json& schema, json&& value) { return check(schema, value); }

using Lines = std::vector<std::string>;

}  // namespace

TEST(Schema, TypeNames) {
  for (auto [type, good, bad] : std::vector<std::tuple<const char*, json, json>>{
           {"object", json::object(), json::array()},
           {"array", json::array(), json::object()},
           {"integer", 3, 3.5},
           {"number", 3.5, "3.5"},
           {"boolean", true, 1},
           {"string", "x", false},
       }) {
    json schema = {{"type", type}};
    EXPECT_TRUE(check(schema, json(good)).empty()) << type;
    EXPECT_EQ(check(schema, json(bad)).size(), 1u) << type;
  }
  EXPECT_TRUE(check({{"type", "number"}}, 3).empty()) << "an integer is a number";
}

TEST(Schema, TypeErrorNamesExpectedAndActual) {
  json schema = {{"type", "object"}, {"properties", {{"arn", {{"type", "integer"}}}}}};
  EXPECT_EQ(check(schema, {{"arn", "x"}}),
            Lines{"/arn: option 'arn' for transform 'arcl' must be integer, got string \"x\""});
  EXPECT_EQ(check(schema, {{"arn", 1.5}}),
            Lines{"/arn: option 'arn' for transform 'arcl' must be integer, got number 1.5"});
  EXPECT_EQ(check({{"type", "object"}}, json::array()), Lines{": transform 'arcl' options must be table, got list"});
}

TEST(Schema, ListOfTypes) {
  json schema = {{"type", {"integer", "string"}}};
  EXPECT_TRUE(check(schema, 4).empty());
  EXPECT_TRUE(check(schema, "auto").empty());
  EXPECT_EQ(check(schema, true), Lines{": transform 'arcl' options must be integer or string, got boolean true"});
}

TEST(Schema, AdditionalPropertiesFalseSuggests) {
  json schema = {{"type", "object"},
                 {"properties", {{"arn", {{"type", "array"}}}, {"context_length", {{"type", "array"}}}}},
                 {"additionalProperties", false}};
  EXPECT_EQ(check(schema, {{"arm", json::array()}}),
            Lines{"/arm: unknown option 'arm' for transform 'arcl'; did you mean 'arn'?"});
  EXPECT_EQ(check(schema, {{"zzzzzz", 1}}),
            Lines{"/zzzzzz: unknown option 'zzzzzz' for transform 'arcl' (known: arn, context_length)"});
  EXPECT_EQ(check({{"type", "object"}, {"additionalProperties", false}}, {{"x", 1}}),
            Lines{"/x: unknown option 'x' for transform 'arcl' (it takes none)"});
}

TEST(Schema, AdditionalPropertiesSchemaAndDefaultAllowsAny) {
  json schema = {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}};
  EXPECT_TRUE(check(schema, {{"a", 1}, {"b", 2}}).empty());
  EXPECT_EQ(check(schema, {{"a", "x"}}).size(), 1u);
  EXPECT_TRUE(check({{"type", "object"}}, {{"anything", "goes"}}).empty());
}

TEST(Schema, RequiredAndNestedNames) {
  json schema = {{"type", "object"},
                 {"required", {"arn"}},
                 {"properties",
                  {{"arn", {{"type", "integer"}}},
                   {"split",
                    {{"type", "object"},
                     {"required", {"num_splits"}},
                     {"properties", {{"num_splits", {{"type", "integer"}, {"minimum", 1}}}}}}}}}};
  EXPECT_EQ(check(schema, {{"split", {{"num_splits", 0}}}}),
            (Lines{": missing required option 'arn' for transform 'arcl'",
                   "/split/num_splits: option 'split.num_splits' for transform 'arcl' must be >= 1, got 0"}));
  EXPECT_EQ(check(schema, {{"arn", 1}, {"split", json::object()}}),
            Lines{"/split: missing required option 'split.num_splits' for transform 'arcl'"});
}

TEST(Schema, DefaultsAreFilledAtEveryLevel) {
  json schema = {{"type", "object"},
                 {"properties",
                  {{"block_size", {{"type", "integer"}, {"default", 64}}},
                   {"given", {{"type", "integer"}, {"default", 1}}},
                   {"split",
                    {{"type", "object"},
                     {"default", json::object()},
                     {"properties", {{"embedding", {{"type", "boolean"}, {"default", true}}}}}}}}}};
  json value = {{"given", 5}};
  EXPECT_TRUE(check(schema, value).empty());
  EXPECT_EQ(value, (json{{"block_size", 64}, {"given", 5}, {"split", {{"embedding", true}}}}));
}

TEST(Schema, DefaultSatisfiesRequired) {
  json s = json::parse(R"({"type": "object", "required": ["a"], "properties": {"a": {"default": 1}}})");
  json v = json::object();
  EXPECT_TRUE(check(s, v).empty());
  EXPECT_EQ(v, (json{{"a", 1}}));
}

TEST(Schema, NonFiniteNumbersAreNamed) {
  EXPECT_EQ(check({{"type", "integer"}}, std::numeric_limits<double>::infinity()),
            Lines{": transform 'arcl' options must be integer, got number inf"});
  EXPECT_EQ(check({{"type", "number"}}, std::nan("")),
            Lines{": transform 'arcl' options must be a finite number, got number nan"});
}

TEST(Schema, EnumSuggestsForStrings) {
  json schema = {{"type", "object"},
                 {"properties",
                  {{"soc_model", {{"type", "string"}, {"enum", {"sm8650", "sm8750"}}}}, {"bits", {{"enum", {4, 8}}}}}}};
  EXPECT_TRUE(check(schema, {{"soc_model", "sm8750"}}).empty());
  EXPECT_EQ(check(schema, {{"soc_model", "sm875"}}),
            Lines{"/soc_model: option 'soc_model' for transform 'arcl' must be one of sm8650|sm8750, got string "
                  "\"sm875\"; did you mean 'sm8750'?"});
  EXPECT_EQ(check(schema, {{"bits", 5}}),
            Lines{"/bits: option 'bits' for transform 'arcl' must be one of 4|8, got integer 5"});
}

TEST(Schema, NumericBounds) {
  auto one = [](const json& schema, json v) { return check(schema, v); };
  json s = {{"type", "number"}, {"minimum", 1}, {"maximum", 10}};
  EXPECT_TRUE(one(s, 1).empty());
  EXPECT_TRUE(one(s, 10).empty());
  EXPECT_EQ(one(s, 0), Lines{": transform 'arcl' options must be >= 1, got 0"});
  EXPECT_EQ(one(s, 10.5), Lines{": transform 'arcl' options must be <= 10, got 10.5"});
  json ex = {{"type", "number"}, {"exclusiveMinimum", 0}, {"exclusiveMaximum", 1}};
  EXPECT_TRUE(one(ex, 0.5).empty());
  EXPECT_EQ(one(ex, 0), Lines{": transform 'arcl' options must be > 0, got 0"});
  EXPECT_EQ(one(ex, 1), Lines{": transform 'arcl' options must be < 1, got 1"});
  EXPECT_EQ(one(s, std::nan("")).size(), 1u) << "NaN fits no range";
  // 64-bit integers compare exactly.
  json big = {{"type", "integer"}, {"maximum", 9223372036854775806LL}};
  EXPECT_EQ(one(big, 9223372036854775807LL).size(), 1u);
}

TEST(Schema, MultipleOf) {
  json s = {{"type", "integer"}, {"multipleOf", 32}};
  EXPECT_TRUE(check(s, 64).empty());
  EXPECT_TRUE(check(s, -32).empty());
  EXPECT_EQ(check(s, 40), Lines{": transform 'arcl' options must be a multiple of 32, got 40"});
  json f = {{"type", "number"}, {"multipleOf", 0.1}};
  EXPECT_TRUE(check(f, 0.3).empty()) << "fractional steps tolerate rounding";
  EXPECT_EQ(check(f, 0.35).size(), 1u);
}

TEST(Schema, ItemsCountsAndUniqueness) {
  json s = {{"type", "array"},
            {"items", {{"type", "integer"}, {"minimum", 1}, {"maximum", 4096}}},
            {"minItems", 1},
            {"maxItems", 3},
            {"uniqueItems", true}};
  EXPECT_TRUE(check(s, {1, 128}).empty());
  EXPECT_EQ(check(s, json::array()), Lines{": transform 'arcl' options needs at least 1 item(s), got 0"});
  EXPECT_EQ(check(s, {1, 2, 3, 4}), Lines{": transform 'arcl' options allows at most 3 item(s), got 4"});
  EXPECT_EQ(check(s, {1, 5000}), Lines{"/1: option '[1]' for transform 'arcl' must be <= 4096, got 5000"});
  EXPECT_EQ(check(s, {128, 1, 128}),
            Lines{"/2: option '[2]' for transform 'arcl' repeats integer 128 (items must be unique)"});
}

TEST(Schema, IntegerOrListOfIntegers) {
  json arn = json::parse(R"({"oneOf": [{"type": "integer", "minimum": 1},
      {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 4096}}]})");
  json s = {{"type", "object"}, {"properties", {{"arn", arn}}}};
  EXPECT_TRUE(check(s, {{"arn", 128}}).empty());
  EXPECT_TRUE(check(s, {{"arn", {1, 128}}}).empty());
  // The branch of the right type explains what is wrong, down to the element.
  EXPECT_EQ(check(s, {{"arn", {1, 9999}}}),
            Lines{"/arn/1: option 'arn[1]' for transform 'arcl' must be <= 4096, got 9999"});
  EXPECT_EQ(check(s, {{"arn", 0}}), Lines{"/arn: option 'arn' for transform 'arcl' must be >= 1, got 0"});
  EXPECT_EQ(check(s, {{"arn", "x"}}),
            Lines{"/arn: option 'arn' for transform 'arcl' must be integer or list of integer, got string \"x\""});
  EXPECT_EQ(type_name(arn), "integer or list of integer");
}

TEST(Schema, OneOfRejectsTwoMatchesAnyOfAccepts) {
  json branches = {{{"type", "integer"}}, {{"type", "number"}}};
  EXPECT_EQ(check({{"oneOf", branches}}, 3).size(), 1u);
  EXPECT_TRUE(check({{"oneOf", branches}}, 3.5).empty());
  EXPECT_TRUE(check({{"anyOf", branches}}, 3).empty());
}

TEST(Schema, OneOfFillsDefaultsOfTheMatchingBranch) {
  json s = {{"oneOf", {{{"type", "integer"}}, {{"type", "object"}, {"properties", {{"k", {{"default", 2}}}}}}}}};
  json v = json::object();
  EXPECT_TRUE(check(s, v).empty());
  EXPECT_EQ(v, (json{{"k", 2}}));
}

TEST(Schema, DescriptionDoesNotAffectValidation) {
  EXPECT_TRUE(check({{"type", "integer"}, {"description", "anything"}}, 3).empty());
}

TEST(Schema, CollectsEveryError) {
  json s = {{"type", "object"},
            {"additionalProperties", false},
            {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "string"}}}}}};
  EXPECT_EQ(check(s, {{"a", "x"}, {"b", 1}, {"c", 1}}).size(), 3u);
}

TEST(Schema, MalformedSchemaThrowsJsonException) {
  json v = 3;
  EXPECT_THROW(validate_json({{"type", 7}}, v), nlohmann::json::exception);
}

TEST(Schema, DescribeOptions) {
  json s = json::parse(R"({"type": "object", "required": ["arn"], "properties": {
    "arn": {"oneOf": [{"type": "integer"},
                      {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 4096}}],
            "description": "AR values"},
    "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
    "block_size": {"type": "integer", "minimum": 16, "multipleOf": 16, "default": 64},
    "split": {"type": "object", "properties": {"num_splits": {"type": "integer", "exclusiveMinimum": 0}}}}})");
  auto docs = describe_options(s);
  ASSERT_EQ(docs.size(), 5u);  // alphabetical, nested tables flattened
  EXPECT_EQ(docs[0].name, "arn");
  EXPECT_EQ(docs[0].type, "integer or list of integer");
  EXPECT_EQ(docs[0].range, "each 1..4096");
  EXPECT_EQ(docs[0].description, "AR values");
  EXPECT_TRUE(docs[0].required);
  EXPECT_EQ(docs[1].name, "block_size");
  EXPECT_EQ(docs[1].default_value, "64");
  EXPECT_EQ(docs[1].range, ">= 16, multiple of 16");
  EXPECT_FALSE(docs[1].required);
  EXPECT_EQ(docs[2].name, "mode");
  EXPECT_EQ(docs[2].type, "string: one of fast|exact");
  EXPECT_EQ(docs[2].default_value, "\"fast\"");
  EXPECT_EQ(docs[3].name, "split");
  EXPECT_EQ(docs[3].type, "table");
  EXPECT_EQ(docs[4].name, "split.num_splits");
  EXPECT_EQ(docs[4].range, "> 0");
}

TEST(Schema, StringLengthAndPattern) {
  json s = {{"type", "string"}, {"minLength", 2}, {"maxLength", 3}, {"pattern", "^[a-z]+$"}};
  EXPECT_TRUE(check(s, "ab").empty());
  EXPECT_TRUE(check({{"type", "string"}, {"maxLength", 2}}, "\xC3\xA9\xC3\xA9").empty()) << "characters, not bytes";
  EXPECT_EQ(check(s, "a"), Lines{": transform 'arcl' options needs at least 2 character(s), got string \"a\""});
  EXPECT_EQ(check(s, "abcd"), Lines{": transform 'arcl' options allows at most 3 character(s), got 4"});
  EXPECT_EQ(check(s, "A1"), Lines{": transform 'arcl' options must match \"^[a-z]+$\", got string \"A1\""});
  EXPECT_EQ(describe_options({{"properties", {{"k", s}}}})[0].range, "2 to 3 characters, matching \"^[a-z]+$\"");
}

// check_schema: what the registry runs on every plugin's schema at load.
TEST(SchemaCheck, AcceptsEveryKeywordOfTheSubset) {
  json s = json::parse(R"({"type": "object", "title": "t", "description": "d", "additionalProperties": false,
    "required": ["a"], "properties": {
      "a": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 9, "multipleOf": 3},
                      {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                       "minItems": 1, "maxItems": 4, "uniqueItems": true}], "default": 3},
      "b": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^x"}, {"type": "null"}]},
      "c": {"type": ["string", "boolean"], "enum": ["on", true], "default": true},
      "d": {"type": "string", "format": "asset"},
      "e": {"type": "object", "additionalProperties": {"type": "integer"}}}})");
  EXPECT_EQ(check_schema(s), "");
  EXPECT_EQ(check_schema(json::object()), "");
}

TEST(SchemaCheck, RefusesUnknownKeywordsNamingThemAndWhere) {
  EXPECT_EQ(check_schema({{"type", "object"}, {"properties", {{"steps", {{"type", "integer"}, {"maximun", 9}}}}}}),
            "unknown keyword 'maximun' at /properties/steps; did you mean 'maximum'?");
  EXPECT_EQ(check_schema({{"type", "object"}, {"additionalProperties", {{"const", 1}}}}),
            "unknown keyword 'const' at /additionalProperties");
  EXPECT_EQ(check_schema({{"typ", "object"}}), "unknown keyword 'typ' at the top level; did you mean 'type'?");
  EXPECT_EQ(check_schema({{"properties", {{"a", {{"oneOf", {{{"type", "integer"}}, {{"not", json::object()}}}}}}}}}),
            "unknown keyword 'not' at /properties/a/oneOf/1");
}

TEST(SchemaCheck, RefusesMalformedKeywordValues) {
  auto at_a = [](json prop) { return check_schema({{"properties", {{"a", prop}}}}); };
  EXPECT_EQ(check_schema(json::array()), "the schema is list, not a table");
  EXPECT_EQ(check_schema({{"properties", {{"a", 3}}}}), "the schema at /properties/a is integer, not a table or boolean");
  EXPECT_EQ(at_a({{"type", "int"}}), "keyword 'type' at /properties/a must be one of "
                                     "object|array|integer|number|boolean|string|null or a list of them, got string \"int\"");
  EXPECT_EQ(at_a({{"minimum", "3"}}), "keyword 'minimum' at /properties/a must be a number, got string \"3\"");
  EXPECT_EQ(at_a({{"multipleOf", 0}}), "keyword 'multipleOf' at /properties/a must be a number > 0, got integer 0");
  EXPECT_EQ(at_a({{"minItems", -1}}), "keyword 'minItems' at /properties/a must be an integer >= 0, got integer -1");
  EXPECT_EQ(at_a({{"enum", json::array()}}), "keyword 'enum' at /properties/a must be a non-empty list");
  EXPECT_EQ(at_a({{"required", {1}}}), "keyword 'required' at /properties/a must be a list of property names");
  EXPECT_EQ(at_a({{"format", "uri"}}),
            "keyword 'format' at /properties/a must be \"asset\" (the only format with a meaning here), got string \"uri\"");
  EXPECT_EQ(at_a({{"pattern", "(["}}).rfind("keyword 'pattern' at /properties/a must be an ECMAScript regular "
                                            "expression: string \"([\" is not (",
                                            0),
            0u);
  EXPECT_EQ(at_a({{"type", "integer"}, {"minimum", 1}, {"default", 0}}),
            "keyword 'default' at /properties/a does not fit its own schema: value must be >= 1, got 0");
}

TEST(Schema, PointersEscape) {
  EXPECT_EQ(pointer_append("", "a/b~c"), "/a~1b~0c");
  EXPECT_EQ(pointer_append("/arn", 2), "/arn/2");
}

TEST(Suggest, EditDistanceAndClosest) {
  EXPECT_EQ(edit_distance("arcl", "arcl"), 0u);
  EXPECT_EQ(edit_distance("arcll", "arcl"), 1u);
  EXPECT_EQ(edit_distance("spilt", "split"), 1u) << "a swap is one edit";
  EXPECT_EQ(edit_distance("HTP", "htp"), 0u);
  EXPECT_EQ(closest("target", {"model", "targets"}), "targets");
  EXPECT_EQ(closest("xyz", {"model", "targets"}), std::nullopt);
  EXPECT_EQ(closest("ab", {"xy"}), std::nullopt);
  EXPECT_EQ(did_you_mean("arm", {"arn"}), "; did you mean 'arn'?");
  EXPECT_EQ(quote("a\nb"), "'a\\x0ab'");
}
