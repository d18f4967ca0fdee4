// A pre-pass over manifest text before toml++ sees it.
//
// toml++ up to at least 3.3.0 (Debian 12) reaches __builtin_unreachable() when it asks
// "is this whitespace?" of certain non-ASCII code points (U+00A1..U+0499, U+2C6E..U+3067,
// U+FB76..U+FEFE): marzer/tomlplusplus issues #190 and #295, fixed upstream by PR #305.
// It asks that question of text outside strings, of quoted keys, and after a line-ending
// backslash in a multi-line string. None of those needs non-ASCII text in a manifest, so
// this pass rejects it there with a clear error; value strings and comments may hold any
// text.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nf::manifest {

struct TextProblem {
  int line = 0, column = 0;  // 1-based; columns count code points, as toml++ does
  std::string message;
};

std::optional<TextProblem> find_unsupported_text(std::string_view toml);

}  // namespace nf::manifest
