// "Did you mean" suggestions for misspelled names (keys, plugins, enum values).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nf::manifest {

// Optimal-string-alignment distance (a swap of two neighbours counts as one edit),
// ignoring ASCII case.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a plausible typo.
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" or "" when nothing is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// 'text' in single quotes, with control characters escaped so a message stays one line.
std::string quote(std::string_view text);

// "a, b, c"
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");

}  // namespace nf::manifest
