// toml++ 3.3 (Debian 12) reached __builtin_unreachable() on non-ASCII text where it looks
// for whitespace (manifest/toml.h reads those tables with the upstream fix). These are
// the fuzzer's finds and their neighbours: each one is now a normal parse or one error.
#include "manifest/manifest.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "parse_error.h"

using namespace nf::manifest;

using nf::manifest::test::parse_error;

TEST(TomlUnicode, NonAsciiValueStringsAndCommentsAreFine) {
  Manifest m = parse_manifest_string(
      "# модель — コメント\n[model]\nonnx = \"модели/§.onnx\" # ﻟ\ntokenizer = '''\nﻟ'''\n"
      "[targets.cpu]\nbackend = \"cpu\"\nlabels = [\n  [\"é\"], { note = \"ﻟ\" }]\nml = \"\"\"a\\\n  \\u00A7\"\"\"\"\n",
      "m.toml");
  EXPECT_EQ(std::filesystem::path(m.model_onnx).filename(), "§.onnx");
  EXPECT_EQ(m.targets.at(0).second.options["labels"][0][0], "é");
  EXPECT_EQ(m.targets.at(0).second.options["ml"], "a§\"");
}

TEST(TomlUnicode, QuotedNonAsciiKeysAreKeys) {
  // Valid TOML; the schema, not the parser, says the key is unknown.
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n\"cl\xc3\xa9\" = 1\n[targets.cpu]\nbackend = \"cpu\"\n"),
            "manifest.toml:3:1: unknown key 'clé' in [model] (known: onnx, config, tokenizer)");
}

TEST(TomlUnicode, ByteOrderMarkIsSkipped) {
  Manifest m = parse_manifest_string("\xEF\xBB\xBF[model]\nonnx = \"m\"\n[targets.cpu]\nbackend = \"cpu\"\n", "m.toml");
  EXPECT_EQ(m.targets.at(0).second.where.column, 1);
}

TEST(TomlUnicode, FuzzerFindsAreOneErrorEach) {
  const char* finds[] = {
      "[model]\n\xef\xbb\x9fmaximum\"mplugin",             // U+FEDF at the start of a line
      "x = 1\"\xc3\xa9\"\n",                               // right after a bare value
      "x = { a = [1, 1979-05-27T07:32:00\"\xc3\xa9\"] }\n",  // after a date in an array
      "model.onnx = \"m\"\n\"\"\"a\n\xd2\x8c\"\"\" = 4\n",   // a multi-line string as a key
      "model.onnx = \"m\"\n\"\"\"targets.cpu.bacnd = \"cpu\"\nt]].cp\\\xd2\x8c" "decoder]\n",
      "[model]\nonnx = \"\"\"\\\n  \xc2\xa7\"\"\"\n",       // a line-ending backslash
      "a = \"\xff\xfe\"\n",                                // malformed UTF-8
      "a = \"\xe2\x82\"",                                  // truncated sequence at the end
  };
  for (const char* text : finds) {
    const std::string error = parse_error(text);
    EXPECT_EQ(error.rfind("manifest.toml:", 0), 0u) << text << " -> " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}
