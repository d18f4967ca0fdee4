// libFuzzer target: any bytes through parse_manifest_string and validate. The only
// acceptable outcomes are a Manifest, a ManifestError, or a list of errors, and every
// message must be one line that starts with the manifest's name. Anything else aborts,
// which libFuzzer reports as a crash. The replay test runs the same function over the
// corpus in the normal build.
#include "manifest/manifest.h"
#include "manifest/schema.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

using nlohmann::json;
using namespace nf::manifest;

namespace {

const std::string kFile = "fuzz/manifest.toml";

// A few plugins whose schemas use every keyword the validator knows.
const json& plugins() {
  static const json table = json::parse(R"({
    "transform": {
      "arcl": {"type": "object", "additionalProperties": false, "properties": {
        "arn": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 4096},
                          {"type": "array", "minItems": 1, "maxItems": 8, "uniqueItems": true,
                           "items": {"type": "integer", "minimum": 1, "maximum": 4096}}],
                "default": [1, 128], "description": "AR values"},
        "context_length": {"type": "array", "items": {"type": "integer", "multipleOf": 256}, "default": [4096]},
        "sliding_context_length": {"type": ["integer", "null"], "exclusiveMinimum": 0}}},
      "split": {"type": "object", "additionalProperties": false, "properties": {
        "num_splits": {"type": "integer", "minimum": 1, "maximum": 64},
        "split_embedding": {"type": "boolean", "default": true},
        "layer_boundary_name_regex": {"type": "string"},
        "extra": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMaximum": 1.5}}}}
    },
    "quant": {
      "lpbq": {"type": "object", "additionalProperties": false, "required": ["block_size"], "properties": {
        "block_size": {"type": "integer", "enum": [16, 32, 64, 128], "default": 64},
        "decompressed_bw": {"anyOf": [{"type": "integer", "enum": [4, 8]}, {"type": "string", "enum": ["auto"]}]},
        "scale": {"type": "number", "multipleOf": 0.25, "minimum": -1e9}}}
    },
    "backend": {
      "htp": {"type": "object", "additionalProperties": false, "required": ["soc_model"], "properties": {
        "soc_model": {"type": "string", "enum": ["sm8650", "sm8750", "sm8850"]},
        "graph": {"type": "object", "default": {}, "properties": {
          "vtcm_mb": {"type": "integer", "default": 8}, "hvx_threads": {"type": "integer", "minimum": 1}}}}},
      "cpu": {"type": "object", "additionalProperties": false},
      "aries": {"type": "object"}
    },
    "speculative": {
      "lade": {"type": "object", "additionalProperties": false, "properties": {
        "window": {"type": "integer", "default": 8, "minimum": 1},
        "ngram": {"type": "integer", "default": 3, "minimum": 2}}}
    }
  })");
  return table;
}

std::optional<json> lookup(const std::string& kind, const std::string& name) {
  if (!plugins().contains(kind) || !plugins()[kind].contains(name)) return std::nullopt;
  return plugins()[kind][name];
}

std::vector<std::string> installed(const std::string& kind) {
  std::vector<std::string> names;
  if (plugins().contains(kind))
    for (const auto& [name, schema] : plugins()[kind].items()) names.push_back(name);
  return names;
}

void expect(bool ok, const char* what, const std::string& detail) {
  if (ok) return;
  std::fprintf(stderr, "manifest_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void check_message(const std::string& message) {
  expect(message.rfind(kFile + ":", 0) == 0, "message does not start with the file name", message);
  expect(message.find_first_of("\r\n") == std::string::npos, "message spans lines", message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    Manifest m = parse_manifest_string(text, kFile);
    expect(!m.model_onnx.empty() && !m.targets.empty(), "parsed without model or targets", std::string(text));
    const auto errors = validate(m, lookup, installed);
    for (const auto& e : errors) check_message(e);
    // Defaults are filled in, so validating again must give the same answer.
    const auto again = validate(m, lookup, installed);
    if (again != errors) {
      for (const auto& e : errors) std::fprintf(stderr, "first:  %s\n", e.c_str());
      for (const auto& e : again) std::fprintf(stderr, "second: %s\n", e.c_str());
      expect(false, "second validation differs", std::string(text));
    }
  } catch (const ManifestError& e) {
    check_message(e.what());
  }
  return 0;
}
