#include "tokenizer/text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <array>
#include <memory>
#include <stdexcept>

namespace nf::tokenizer_detail {

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t next_codepoint(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = utf8_len(b);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return b;
  }
  uint32_t cp = b & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

std::string utf8_lossy(std::string_view s) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  for (size_t i = 0; i < s.size();) {
    unsigned char b = byte(i);
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    // Allowed range of the second byte and total length (Unicode table 3-7).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b == 0xE0)
      len = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC)
      len = 3;
    else if (b == 0xED)
      len = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF)
      len = 3;
    else if (b == 0xF0)
      len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      len = 4;
    else if (b == 0xF4)
      len = 4, hi = 0x8F;
    size_t valid = 1;  // bytes of the sequence that are valid so far
    if (len > 0 && i + 1 < s.size() && byte(i + 1) >= lo && byte(i + 1) <= hi) {
      valid = 2;
      while (valid < len && i + valid < s.size() && (byte(i + valid) & 0xC0) == 0x80) ++valid;
    }
    if (len > 0 && valid == len) {
      out.append(s.substr(i, len));
    } else {
      out += kReplacement;  // one replacement for the maximal invalid prefix
    }
    i += valid;
  }
  return out;
}

namespace {
struct ByteLevelTables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 324> to_byte;  // every mapped code point is below 0x144
  ByteLevelTables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? b : next++;
      append_utf8(to_unicode[b], cp);
      to_byte[cp] = static_cast<int>(b);
    }
  }
};
const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}
}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_level_tables().to_unicode[b]; }

int unicode_to_byte(uint32_t cp) {
  const auto& t = byte_level_tables().to_byte;
  return cp < t.size() ? t[cp] : -1;
}

Regex::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::runtime_error("bad regex at offset " + std::to_string(offset) + ": " +
                             reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each(std::string_view text, const std::function<void(size_t, size_t)>& f) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> owner(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  pcre2_match_data* md = owner.get();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text may hold invalid UTF-8 (raw bytes from a caller): check it once, up front.
    uint32_t opts = pos == 0 ? 0 : PCRE2_NO_UTF_CHECK;
    int rc = pcre2_match(code, subject, text.size(), pos, opts, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error(std::string("regex match failed: ") + reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      f(b, e);
      pos = e;
    } else {  // empty match: step over one character
      pos = b < text.size() ? b + utf8_len(static_cast<unsigned char>(text[b])) : b + 1;
    }
  }
}

std::string unicode_normalize(std::string_view form, std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);  // ASCII is invariant under every form
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == "NFC"    ? icu::Normalizer2::getNFCInstance(err)
                              : form == "NFD"  ? icu::Normalizer2::getNFDInstance(err)
                              : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(err)
                                               : icu::Normalizer2::getNFKDInstance(err);
  if (U_FAILURE(err)) throw std::runtime_error("ICU normalizer unavailable");
  icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  icu::UnicodeString normalized = n->normalize(in, err);
  if (U_FAILURE(err)) throw std::runtime_error("ICU normalization failed");
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

std::string unicode_lowercase(std::string_view text) {
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  std::string out;
  s.toLower(icu::Locale::getRoot()).toUTF8String(out);  // locale-free, like Rust to_lowercase
  return out;
}

}  // namespace nf::tokenizer_detail
