#include "manifest/toml_guard.h"

#include <cstdint>
#include <cstdio>

namespace nf::manifest {

namespace {

// One UTF-8 code point at `i`; malformed bytes come back one at a time as U+FFFD
// (toml++ rejects them itself).
char32_t decode(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int extra = b0 >= 0xF0 && b0 < 0xF8 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC0 ? 1 : 0;
  if (b0 < 0x80) return s[i++];
  if (extra == 0 || i + extra >= s.size()) {
    ++i;
    return 0xFFFD;
  }
  char32_t c = b0 & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    c = (c << 6) | (b & 0x3F);
  }
  i += extra + 1;
  return c;
}

std::string describe(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  std::optional<TextProblem> run() {
    if (at("\xEF\xBB\xBF")) i_ = 3;  // a UTF-8 byte order mark, which toml++ skips
    while (i_ < s_.size()) {
      const char c = s_[i_];
      const bool first_on_line = !seen_on_line_;
      if (c != ' ' && c != '\t' && c != '\r' && c != '\n') seen_on_line_ = true;
      if (c == '#') {
        skip_comment();
      } else if (c == '"' || c == '\'') {
        if (auto p = string(c)) return p;
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        return unexpected();
      } else if (value_pos_ && !is_terminator(c) && c != '=' && c != '[' && c != '{') {
        if (auto p = bare_value()) return p;
      } else {
        punctuation(c, first_on_line);
        next();
      }
    }
    return std::nullopt;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
  bool seen_on_line_ = false;  // a token before this point on the line
  bool header_line_ = false;   // the line is a [table] header: its strings are keys
  bool value_pos_ = false;     // after '=' or inside an array: a value comes next
  std::string open_;           // unclosed '[' (arrays) and '{' (inline tables)

  static bool is_terminator(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ']' || c == '}' || c == '#';
  }

  TextProblem unexpected() const {
    return {line_, col_,
            "invalid TOML: unexpected character " + describe(peek()) + " outside a quoted string or comment"};
  }

  // Keeps track of whether a key or a value comes next.
  void punctuation(char c, bool first_on_line) {
    switch (c) {
      case '\n':
        if (open_.empty()) value_pos_ = false;
        break;
      case '=':
        value_pos_ = true;
        break;
      case ',':
        value_pos_ = open_.empty() || open_.back() == '[';
        break;
      case '[':
        if (first_on_line && open_.empty() && !value_pos_) {
          header_line_ = true;
        } else {
          open_ += '[';
          value_pos_ = true;
        }
        break;
      case '{':
        open_ += '{';
        value_pos_ = false;
        break;
      case ']':
      case '}':
        if (!open_.empty()) open_.pop_back();
        value_pos_ = !open_.empty() && open_.back() == '[';
        break;
      default:
        break;
    }
  }

  // Numbers, booleans, dates, inf/nan: toml++ scans them up to a terminator, asking of
  // every character (quotes included) whether it is whitespace.
  std::optional<TextProblem> bare_value() {
    while (i_ < s_.size() && !is_terminator(s_[i_])) {
      if (static_cast<unsigned char>(s_[i_]) >= 0x80) return unexpected();
      next();
    }
    return std::nullopt;
  }

  char32_t peek() const {
    size_t j = i_;
    return decode(s_, j);
  }
  char32_t next() {
    char32_t c = decode(s_, i_);
    if (c == U'\n') {
      ++line_;
      col_ = 1;
      seen_on_line_ = header_line_ = false;
    } else {
      ++col_;
    }
    return c;
  }
  bool at(std::string_view text) const { return s_.substr(i_, text.size()) == text; }

  void skip_comment() {
    while (i_ < s_.size() && s_[i_] != '\n') next();
  }

  std::optional<TextProblem> string(char quote) {
    seen_on_line_ = true;
    const std::string triple(3, quote);
    if (at(triple)) return multi_line(quote, triple);
    next();
    std::optional<TextProblem> first_non_ascii;
    while (i_ < s_.size() && s_[i_] != quote && s_[i_] != '\n') {
      if (quote == '"' && s_[i_] == '\\') {
        next();
        if (i_ < s_.size() && s_[i_] != '\n') next();
        continue;
      }
      const int line = line_, col = col_;
      char32_t c = next();
      if (c >= 0x80 && !first_non_ascii)
        first_non_ascii = TextProblem{line, col, "quoted keys must be ASCII (saw " + describe(c) + ")"};
    }
    if (i_ < s_.size() && s_[i_] == quote) next();
    if (first_non_ascii && is_key()) return first_non_ascii;
    return std::nullopt;
  }

  // A string is a key in a [header] line, where no value is due, or before '=' or '.'.
  bool is_key() const {
    if (header_line_ || !value_pos_) return true;
    size_t j = i_;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
    return j < s_.size() && (s_[j] == '=' || s_[j] == '.');
  }

  // Multi-line strings cannot be keys, but toml++ reads one in key position as a key
  // (recording it) before saying so.
  std::optional<TextProblem> multi_line(char quote, const std::string& triple) {
    const bool key_position = header_line_ || !value_pos_;
    for (int k = 0; k < 3; ++k) next();
    while (i_ < s_.size()) {
      if (key_position && static_cast<unsigned char>(s_[i_]) >= 0x80)
        return TextProblem{line_, col_, "quoted keys must be ASCII (saw " + describe(peek()) + ")"};
      if (at(triple)) {
        for (int k = 0; k < 3; ++k) next();
        // Up to two more quotes belong to the content ("""a"""" ends with a quote).
        for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] == quote; ++k) next();
        return std::nullopt;
      }
      if (quote == '"' && s_[i_] == '\\') {
        next();
        if (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) {
          // Line-ending backslash: toml++ tests what follows the whitespace run.
          while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) next();
          if (i_ < s_.size() && static_cast<unsigned char>(s_[i_]) >= 0x80)
            return TextProblem{line_, col_,
                               "a line-ending backslash in a multi-line string must not be followed by "
                               "non-ASCII text; write " +
                                   describe(peek()) + " as an escape (\\uXXXX)"};
        } else if (i_ < s_.size()) {
          next();
        }
        continue;
      }
      next();
    }
    return std::nullopt;
  }
};

}  // namespace

std::optional<TextProblem> find_unsupported_text(std::string_view toml) { return Scanner(toml).run(); }

}  // namespace nf::manifest
