// Text helpers for the tokenizer: UTF-8, the byte-level alphabet, PCRE2 regexes, ICU
// normalization. Internal to host/tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nf::tokenizer_detail {

// Length of the UTF-8 sequence that starts with byte `b` (1 for stray bytes).
inline size_t utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

// Splits into characters (a stray byte is one character).
std::vector<std::string_view> utf8_chars(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
// Decodes the character at s[i] and advances i; stray bytes decode as themselves.
uint32_t next_codepoint(std::string_view s, size_t& i);

// Like Rust's String::from_utf8_lossy (what HF decoders use): each maximal invalid
// subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// GPT-2's reversible byte <-> printable character mapping.
const std::string& byte_to_unicode(uint8_t b);
// The byte for a byte-level character, or -1 if `cp` is not in the alphabet.
int unicode_to_byte(uint32_t cp);

// A PCRE2 regex in UTF + Unicode-property mode (\p{L}, \s as Unicode), JIT-compiled.
class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws std::runtime_error with PCRE2's message
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Calls f(begin, end) for each non-empty match, left to right, as byte offsets.
  void for_each(std::string_view text, const std::function<void(size_t, size_t)>& f) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8, kept out of this header
};

// Unicode normalization through ICU; form is "NFC", "NFD", "NFKC" or "NFKD".
std::string unicode_normalize(std::string_view form, std::string_view text);
std::string unicode_lowercase(std::string_view text);

}  // namespace nf::tokenizer_detail
