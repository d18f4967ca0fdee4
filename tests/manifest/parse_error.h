// The manifest tests' probe: the what() of the ManifestError that parsing `text` throws.
#pragma once

#include <string>
#include <string_view>

#include "manifest/manifest.h"

namespace nf::manifest::test {

// "" when `text` parses.
inline std::string parse_error(std::string_view text) {
  try {
    parse_manifest_string(text, "manifest.toml");
  } catch (const ManifestError& e) {
    return e.what();
  }
  return "";
}

}  // namespace nf::manifest::test
