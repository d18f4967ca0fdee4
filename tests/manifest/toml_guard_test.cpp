// toml++ 3.3 has undefined behaviour on some non-ASCII text where it looks for
// whitespace; the manifest parser turns those places into errors before toml++ runs.
#include "manifest/toml_guard.h"
#include "manifest/manifest.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace nf::manifest;

namespace {
std::string parse_error(std::string_view text) {
  try {
    parse_manifest_string(text, "manifest.toml");
  } catch (const ManifestError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TomlGuard, NonAsciiValueStringsAndCommentsAreFine) {
  Manifest m = parse_manifest_string(
      "# модель — コメント\n[model]\nonnx = \"модели/§.onnx\" # ﻟ\ntokenizer = '''\nﻟ'''\n"
      "[targets.cpu]\nbackend = \"cpu\"\nlabels = [\n  [\"é\"], { note = \"ﻟ\" }]\nml = \"\"\"a\\\n  \\u00A7\"\"\"\"\n",
      "m.toml");
  EXPECT_EQ(std::filesystem::path(m.model_onnx).filename(), "§.onnx");
  EXPECT_EQ(m.targets.at(0).second.options["labels"][0][0], "é");
  EXPECT_EQ(m.targets.at(0).second.options["ml"], "a§\"");
}

TEST(TomlGuard, ByteOrderMarkIsFine) {
  Manifest m = parse_manifest_string("\xEF\xBB\xBF[model]\nonnx = \"m\"\n[targets.cpu]\nbackend = \"cpu\"\n", "m.toml");
  EXPECT_EQ(m.targets.at(0).second.where.column, 1);
  EXPECT_EQ(parse_error("\xEF\xBB\xBF\xEF\xBB\xBF"),
            "manifest.toml:1:1: invalid TOML: unexpected character U+FEFF outside a quoted string or comment");
}

TEST(TomlGuard, BareNonAsciiIsASyntaxError) {
  // The fuzzer's first find: U+FEDF at the start of a line.
  EXPECT_EQ(parse_error("[model]\n\xef\xbb\x9fmaximum\"mplugin"),
            "manifest.toml:2:1: invalid TOML: unexpected character U+FEDF outside a quoted string or comment");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\" é\n"),
            "manifest.toml:2:12: invalid TOML: unexpected character U+00E9 outside a quoted string or comment");
}

TEST(TomlGuard, NonAsciiRightAfterABareValue) {
  // toml++ scans a number, date or boolean up to the next space, comma or bracket,
  // quotes included. The fuzzer's second find.
  EXPECT_EQ(parse_error("x = 1\"\xc3\xa9\"\n"),
            "manifest.toml:1:7: invalid TOML: unexpected character U+00E9 outside a quoted string or comment");
  EXPECT_EQ(parse_error("x = { a = [1, 1979-05-27T07:32:00\"\xc3\xa9\"] }\n"),
            "manifest.toml:1:35: invalid TOML: unexpected character U+00E9 outside a quoted string or comment");
  EXPECT_EQ(parse_error("[[transform]]\nplugin = 3\nlabels = [1,\n  \"\xc3\xa9\", true]\n"),
            "manifest.toml:2:1: 'plugin' in [[transform]] #1 must be a string, got integer")
      << "strings in arrays are values";
}

TEST(TomlGuard, QuotedKeysMustBeAscii) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n\"cl\xc3\xa9\" = 1\n"),
            "manifest.toml:3:4: quoted keys must be ASCII (saw U+00E9)");
  EXPECT_EQ(parse_error("a.'\xc3\xa9' = 1\n"), "manifest.toml:1:4: quoted keys must be ASCII (saw U+00E9)");
  EXPECT_EQ(parse_error("[targets.\"\xc3\xa9\"]\n"), "manifest.toml:1:11: quoted keys must be ASCII (saw U+00E9)");
}

TEST(TomlGuard, MultiLineStringInKeyPosition) {
  // The fuzzer's third find: toml++ records a multi-line "key" before rejecting it.
  EXPECT_EQ(parse_error("model.onnx = \"m\"\n\"\"\"a\n\xd2\x8c\"\"\" = 4\n"),
            "manifest.toml:3:1: quoted keys must be ASCII (saw U+048C)");
}

TEST(TomlGuard, LineEndingBackslashBeforeNonAscii) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"\"\"\\\n  \xc2\xa7\"\"\"\n"),
            "manifest.toml:3:3: a line-ending backslash in a multi-line string must not be followed by non-ASCII "
            "text; write U+00A7 as an escape (\\uXXXX)");
}

TEST(TomlGuard, MalformedUtf8IsLeftToToml) {
  EXPECT_FALSE(find_unsupported_text("a = \"\xff\xfe\"\n"));
  EXPECT_FALSE(find_unsupported_text("a = \"\xe2\x82\""));  // truncated sequence at the end
  EXPECT_NE(parse_error("a = \"\xff\"\n"), "");
}
