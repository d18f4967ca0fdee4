// tokenizer.json, following Hugging Face tokenizers (Rust) step by step:
// added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor, and for decoding
// ids -> token strings -> decoder chain. Comments name the HF behaviour being matched.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "common/files.h"
#include "tokenizer/bpe.h"
#include "tokenizer/text.h"

namespace nf {
namespace tokenizer_detail {

using nlohmann::json;

namespace {

// GPT-2's split regex; the ByteLevel pre-tokenizer uses it when use_regex is true.
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const std::string kReplacementChar = "\xEF\xBF\xBD";

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_word_byte(char c) {
  auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || c == '_' || u >= 0x80;
}

std::string type_of(const json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A string-or-regex pattern as HF writes it: {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;

  explicit Pattern(const json& j) {
    if (j.contains("Regex"))
      regex = std::make_shared<Regex>(j.at("Regex").get<std::string>());
    else if (j.contains("String"))
      literal = j.at("String").get<std::string>();
    else
      throw std::runtime_error("pattern is neither String nor Regex");
  }
  explicit Pattern(std::string lit) : literal(std::move(lit)) {}
  // Calls f(begin, end) for each non-empty match, left to right.
  void for_each(std::string_view s, const std::function<void(size_t, size_t)>& f) const {
    if (regex) return regex->for_each(s, f);
    if (literal.empty()) return;
    for (size_t pos = 0; (pos = s.find(literal, pos)) != std::string_view::npos; pos += literal.size())
      f(pos, pos + literal.size());
  }
  std::string replace(std::string_view s, std::string_view with) const {
    if (!regex) return replace_all(s, literal, with);
    std::string out;
    size_t pos = 0;
    regex->for_each(s, [&](size_t b, size_t e) {
      out.append(s.substr(pos, b - pos));
      out.append(with);
      pos = e;
    });
    out.append(s.substr(pos));
    return out;
  }
};

// A piece of text on its way to the model. at_start: it begins at the start of the input
// (Metaspace's prepend_scheme "first" needs it).
struct Piece {
  std::string text;
  bool at_start;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

SplitBehavior parse_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  throw std::runtime_error("unsupported split behavior '" + s + "'");
}

using Emit = std::function<void(Piece)>;

// HF NormalizedString::split: cuts a piece at the matches fed to it in order, then keeps,
// drops or attaches the matches. Parts go out as soon as they are complete, so a long text
// never becomes one big list of pieces.
class Splitter {
 public:
  Splitter(const Piece& piece, SplitBehavior behavior, bool invert, const Emit& emit)
      : piece_(piece), behavior_(behavior), invert_(invert), emit_(emit) {}
  void match(size_t b, size_t e) {
    if (b > pos_) span(pos_, b, invert_);
    span(b, e, !invert_);
    pos_ = e;
  }
  void finish() {
    if (pos_ < piece_.text.size()) span(pos_, piece_.text.size(), invert_);
    flush();
  }

 private:
  void span(size_t b, size_t e, bool is_match) {
    bool extend = false;
    switch (behavior_) {
      case SplitBehavior::Removed:
        if (is_match) return;
        break;
      case SplitBehavior::Isolated:
        break;
      case SplitBehavior::MergedWithPrevious:
        extend = is_match && has_part_;
        break;
      case SplitBehavior::MergedWithNext:
        extend = last_was_match_ && has_part_;
        break;
      case SplitBehavior::Contiguous:
        extend = is_match && last_was_match_ && has_part_;
        break;
    }
    last_was_match_ = is_match;
    if (extend) {
      end_ = e;
      return;
    }
    flush();
    begin_ = b, end_ = e, has_part_ = true;
  }
  void flush() {
    if (has_part_ && end_ > begin_) emit_({piece_.text.substr(begin_, end_ - begin_), piece_.at_start && begin_ == 0});
    has_part_ = false;
  }

  const Piece& piece_;
  SplitBehavior behavior_;
  bool invert_;
  const Emit& emit_;
  size_t pos_ = 0;              // end of the last span
  size_t begin_ = 0, end_ = 0;  // the part being built
  bool has_part_ = false;
  bool last_was_match_ = false;
};

void split_piece(const Piece& piece, const Pattern& pattern, SplitBehavior behavior, bool invert, const Emit& emit) {
  Splitter splitter(piece, behavior, invert, emit);
  pattern.for_each(piece.text, [&](size_t b, size_t e) { splitter.match(b, e); });
  splitter.finish();
}

}  // namespace

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Finds added tokens in text, leftmost first and longest at a position (HF: aho-corasick,
// LeftmostLongest).
class AddedMatcher {
 public:
  // `pattern` is the token's content, normalized for the matcher that runs after normalization.
  void add(const AddedToken* t, std::string pattern) {
    if (pattern.empty()) return;
    auto& bucket = by_first_[static_cast<unsigned char>(pattern[0])];
    bucket.push_back({std::move(pattern), t});
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](auto& a, auto& b) { return a.pattern.size() > b.pattern.size(); });
  }
  bool empty() const {
    return std::all_of(by_first_.begin(), by_first_.end(), [](auto& b) { return b.empty(); });
  }
  // Calls text(begin, end) for plain text and token(id) for each added token, in order.
  void split(std::string_view s, const std::function<void(size_t, size_t)>& text,
             const std::function<void(int32_t)>& token) const {
    size_t plain = 0;  // start of the pending plain text
    for (size_t i = 0; i < s.size(); ++i) {
      const Entry* hit = nullptr;
      for (const Entry& entry : by_first_[static_cast<unsigned char>(s[i])]) {
        if (s.substr(i, entry.pattern.size()) != entry.pattern) continue;
        const AddedToken* t = entry.token;
        size_t end = i + entry.pattern.size();
        // single_word: not inside a word (ASCII letters, digits, '_' and non-ASCII count).
        if (t->single_word && ((i > 0 && is_word_byte(s[i - 1])) || (end < s.size() && is_word_byte(s[end])))) continue;
        hit = &entry;
        break;
      }
      if (!hit) continue;
      size_t b = i, e = i + hit->pattern.size();
      if (hit->token->lstrip)
        while (b > plain && is_space(s[b - 1])) --b;
      if (hit->token->rstrip)
        while (e < s.size() && is_space(s[e])) ++e;
      if (b > plain) text(plain, b);
      token(hit->token->id);
      plain = e;
      i = e - 1;
    }
    if (plain < s.size()) text(plain, s.size());
  }

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  std::array<std::vector<Entry>, 256> by_first_;
};

using Normalizer = std::function<std::string(std::string)>;
using PreTokenizer = std::function<void(const Piece&, const Emit&)>;
using Decoder = std::function<void(std::vector<std::string>&)>;

struct Impl {
  std::unique_ptr<Bpe> model;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, const AddedToken*> added_by_id;
  StringMap<int32_t> added_by_content;
  AddedMatcher raw_matcher;         // added tokens matched before normalization
  AddedMatcher normalized_matcher;  // ... and after it (normalized: true)
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<int32_t> prefix_ids, suffix_ids;  // what the post-processor puts around the text
  std::optional<int32_t> bos, eos;
  std::vector<int32_t> stop_ids;  // eos first, then end-of-turn added tokens
  int32_t vocab_size = 0;

  std::optional<int32_t> token_to_id(std::string_view token) const {
    if (auto it = added_by_content.find(token); it != added_by_content.end()) return it->second;
    if (auto it = model->vocab().find(token); it != model->vocab().end()) return it->second;
    return std::nullopt;
  }
  std::string id_to_token(int32_t id) const {
    if (auto it = added_by_id.find(id); it != added_by_id.end()) return it->second->content;
    const auto& tokens = model->tokens();
    return id >= 0 && static_cast<size_t>(id) < tokens.size() ? tokens[id] : std::string();
  }

  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
    std::string normalized(text);
    for (const auto& n : normalizers) normalized = n(std::move(normalized));
    // Each pre-tokenizer passes its pieces straight on to the next, the last to the model.
    std::function<void(size_t, Piece)> run = [&](size_t stage, Piece piece) {
      if (stage == pre_tokenizers.size()) return model->encode_word(piece.text, out);
      pre_tokenizers[stage](piece, [&](Piece next) { run(stage + 1, std::move(next)); });
    };
    auto model_part = [&](std::string_view s, bool first) { run(0, Piece{std::string(s), first}); };
    if (normalized_matcher.empty()) {
      model_part(normalized, at_start);
      return;
    }
    normalized_matcher.split(
        normalized,
        [&](size_t b, size_t e) { model_part(std::string_view(normalized).substr(b, e - b), at_start && b == 0); },
        [&](int32_t id) { out.push_back(id); });
  }

  std::vector<int32_t> encode(std::string_view input, bool add_special) const {
    // HF takes valid UTF-8 only; invalid bytes become U+FFFD here.
    std::string text = utf8_lossy(input);
    std::vector<int32_t> ids;
    raw_matcher.split(
        text, [&](size_t b, size_t e) { encode_plain(std::string_view(text).substr(b, e - b), b == 0, ids); },
        [&](int32_t id) { ids.push_back(id); });
    if (add_special && (!prefix_ids.empty() || !suffix_ids.empty())) {
      ids.insert(ids.begin(), prefix_ids.begin(), prefix_ids.end());
      ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (auto it = added_by_id.find(id); it != added_by_id.end()) {
        if (!(skip_special && it->second->special)) tokens.push_back(it->second->content);
        continue;
      }
      std::string t = id_to_token(id);
      if (!t.empty()) tokens.push_back(std::move(t));  // unknown ids are dropped, as in HF
    }
    if (!has_decoder) {  // HF joins with spaces when there is no decoder
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    for (const auto& d : decoders) d(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }
};

namespace {

void add_normalizer(Impl& impl, const json& j) {
  if (j.is_null()) return;
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& n : j.at("normalizers")) add_normalizer(impl, n);
  } else if (type == "Prepend") {
    std::string prepend = j.at("prepend").get<std::string>();
    impl.normalizers.push_back([prepend](std::string s) { return s.empty() ? s : prepend + s; });
  } else if (type == "Replace") {
    auto pattern = std::make_shared<Pattern>(j.at("pattern"));
    std::string content = j.at("content").get<std::string>();
    impl.normalizers.push_back([pattern, content](std::string s) { return pattern->replace(s, content); });
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    impl.normalizers.push_back([type](std::string s) { return unicode_normalize(type, s); });
  } else if (type == "Lowercase") {
    impl.normalizers.push_back([](std::string s) { return unicode_lowercase(s); });
  } else if (type == "Strip") {
    bool left = j.value("strip_left", true), right = j.value("strip_right", true);
    impl.normalizers.push_back([left, right](std::string s) {
      size_t b = 0, e = s.size();
      while (left && b < e && is_space(s[b])) ++b;
      while (right && e > b && is_space(s[e - 1])) --e;
      return s.substr(b, e - b);
    });
  } else {
    throw std::runtime_error("unsupported normalizer type '" + type + "'");
  }
}

void add_pre_tokenizer(Impl& impl, const json& j) {
  if (j.is_null()) return;
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) add_pre_tokenizer(impl, p);
  } else if (type == "Split") {
    auto pattern = std::make_shared<Pattern>(j.at("pattern"));
    SplitBehavior behavior = parse_behavior(j.at("behavior").get<std::string>());
    bool invert = j.value("invert", false);
    impl.pre_tokenizers.push_back(
        [=](const Piece& p, const Emit& emit) { split_piece(p, *pattern, behavior, invert, emit); });
  } else if (type == "ByteLevel") {
    bool prefix_space = j.value("add_prefix_space", true);
    std::shared_ptr<Pattern> regex;
    if (j.value("use_regex", true)) regex = std::make_shared<Pattern>(json{{"Regex", kGpt2Pattern}});
    impl.pre_tokenizers.push_back([=](const Piece& p, const Emit& emit) {
      // Every byte becomes its printable stand-in, so the vocab never sees raw bytes.
      Emit map_bytes = [&](Piece q) {
        std::string mapped;
        mapped.reserve(q.text.size() * 2);
        for (char c : q.text) {
          const std::string& u = byte_to_unicode(static_cast<uint8_t>(c));
          mapped.push_back(u[0]);  // one or two bytes: push them, a general append is slower
          if (u.size() > 1) mapped.push_back(u[1]);
        }
        emit({std::move(mapped), q.at_start});
      };
      if (prefix_space && !p.text.starts_with(' ')) {
        Piece q{" " + p.text, p.at_start};
        regex ? split_piece(q, *regex, SplitBehavior::Isolated, false, map_bytes) : map_bytes(std::move(q));
      } else {
        regex ? split_piece(p, *regex, SplitBehavior::Isolated, false, map_bytes) : map_bytes(p);
      }
    });
  } else if (type == "Metaspace") {
    std::string replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = j.contains("prepend_scheme")        ? j.at("prepend_scheme").get<std::string>()
                         : j.value("add_prefix_space", true) ? "always"
                                                             : "never";
    bool split = j.value("split", true);
    auto marker = std::make_shared<Pattern>(replacement);
    impl.pre_tokenizers.push_back([=](const Piece& p, const Emit& emit) {
      Piece q{replace_all(p.text, " ", replacement), p.at_start};
      bool prepend = scheme == "always" || (scheme == "first" && p.at_start);
      if (prepend && !q.text.starts_with(replacement)) q.text.insert(0, replacement);
      if (split)
        split_piece(q, *marker, SplitBehavior::MergedWithNext, false, emit);
      else
        emit(std::move(q));
    });
  } else if (type == "Whitespace") {  // keeps runs of word characters and of other non-spaces
    auto words = std::make_shared<Pattern>(json{{"Regex", "\\w+|[^\\w\\s]+"}});
    impl.pre_tokenizers.push_back(
        [=](const Piece& p, const Emit& emit) { split_piece(p, *words, SplitBehavior::Removed, true, emit); });
  } else if (type == "WhitespaceSplit") {
    auto spaces = std::make_shared<Pattern>(json{{"Regex", "\\s+"}});
    impl.pre_tokenizers.push_back(
        [=](const Piece& p, const Emit& emit) { split_piece(p, *spaces, SplitBehavior::Removed, false, emit); });
  } else if (type == "Punctuation") {  // each ASCII or Unicode punctuation character on its own
    auto punct = std::make_shared<Pattern>(json{{"Regex", "[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]"}});
    SplitBehavior behavior = parse_behavior(j.value("behavior", std::string("Isolated")));
    impl.pre_tokenizers.push_back(
        [=](const Piece& p, const Emit& emit) { split_piece(p, *punct, behavior, false, emit); });
  } else if (type == "Digits") {
    auto digits =
        std::make_shared<Pattern>(json{{"Regex", j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+"}});
    impl.pre_tokenizers.push_back(
        [=](const Piece& p, const Emit& emit) { split_piece(p, *digits, SplitBehavior::Isolated, false, emit); });
  } else {
    throw std::runtime_error("unsupported pre_tokenizer type '" + type + "'");
  }
}

// HF ByteFallback decoder: runs of <0xNN> tokens become their bytes if those are valid UTF-8,
// otherwise one U+FFFD per byte.
void byte_fallback_decode(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string bytes;
  size_t count = 0;
  auto flush = [&] {
    if (count == 0) return;
    if (utf8_lossy(bytes) == bytes)
      out.push_back(bytes);
    else
      for (size_t i = 0; i < count; ++i) out.push_back(kReplacementChar);
    bytes.clear();
    count = 0;
  };
  for (auto& t : tokens) {
    if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
        std::isxdigit(static_cast<unsigned char>(t[4]))) {
      bytes += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
      ++count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void add_decoder(Impl& impl, const json& j) {
  if (j.is_null()) return;
  impl.has_decoder = true;
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& d : j.at("decoders")) add_decoder(impl, d);
  } else if (type == "ByteLevel") {
    impl.decoders.push_back([](std::vector<std::string>& tokens) {
      std::string bytes;
      for (const auto& t : tokens) {
        std::string mapped;
        bool all = true;
        for (size_t i = 0; i < t.size() && all;) {
          int b = unicode_to_byte(next_codepoint(t, i));
          if (b < 0)
            all = false;
          else
            mapped += static_cast<char>(b);
        }
        bytes += all ? mapped : t;  // a token outside the alphabet passes as it is
      }
      tokens = {utf8_lossy(bytes)};
    });
  } else if (type == "Replace") {
    auto pattern = std::make_shared<Pattern>(j.at("pattern"));
    std::string content = j.at("content").get<std::string>();
    impl.decoders.push_back([=](std::vector<std::string>& tokens) {
      for (auto& t : tokens) t = pattern->replace(t, content);
    });
  } else if (type == "ByteFallback") {
    impl.decoders.push_back(byte_fallback_decode);
  } else if (type == "Fuse") {
    impl.decoders.push_back([](std::vector<std::string>& tokens) {
      std::string all;
      for (const auto& t : tokens) all += t;
      tokens = {std::move(all)};
    });
  } else if (type == "Strip") {
    std::string content = j.at("content").get<std::string>();
    size_t start = j.value("start", 0), stop = j.value("stop", 0);
    // Per token: drop up to `start` leading and `stop` trailing copies of `content`.
    impl.decoders.push_back([=](std::vector<std::string>& tokens) {
      for (auto& t : tokens) {
        size_t b = 0, e = t.size();
        for (size_t k = 0; k < start && t.compare(b, content.size(), content) == 0 && b < e; ++k) b += content.size();
        for (size_t k = 0;
             k < stop && e >= b + content.size() && t.compare(e - content.size(), content.size(), content) == 0; ++k)
          e -= content.size();
        t = t.substr(b, e - b);
      }
    });
  } else if (type == "BPEDecoder") {  // end-of-word suffix: a space between words, none at the end
    std::string suffix = j.value("suffix", std::string("</w>"));
    impl.decoders.push_back([=](std::vector<std::string>& tokens) {
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], suffix, i + 1 == tokens.size() ? "" : " ");
    });
  } else if (type == "Metaspace") {
    std::string replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = j.contains("prepend_scheme")        ? j.at("prepend_scheme").get<std::string>()
                         : j.value("add_prefix_space", true) ? "always"
                                                             : "never";
    // HF: every replacement char becomes a space, except in the first token where it goes.
    impl.decoders.push_back([=](std::vector<std::string>& tokens) {
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], replacement, i == 0 && scheme != "never" ? "" : " ");
    });
  } else {
    throw std::runtime_error("unsupported decoder type '" + type + "'");
  }
}

// The ids a post-processor puts before and after the encoded text (single sequence only).
void add_post_processor(Impl& impl, const json& j) {
  if (j.is_null()) return;
  std::string type = type_of(j);
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) add_post_processor(impl, p);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    std::vector<int32_t> before, after;
    bool seen_sequence = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      std::string name = item.at("SpecialToken").at("id").get<std::string>();
      const auto& special = j.at("special_tokens").at(name);
      auto& dst = seen_sequence ? after : before;
      for (const auto& id : special.at("ids")) dst.push_back(id.get<int32_t>());
    }
    // Nested processors wrap what the earlier ones produced.
    impl.prefix_ids.insert(impl.prefix_ids.begin(), before.begin(), before.end());
    impl.suffix_ids.insert(impl.suffix_ids.end(), after.begin(), after.end());
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    impl.prefix_ids.insert(impl.prefix_ids.begin(), j.at("cls").at(1).get<int32_t>());
    impl.suffix_ids.push_back(j.at("sep").at(1).get<int32_t>());
  } else {
    throw std::runtime_error("unsupported post_processor type '" + type + "'");
  }
}

json read_json(const std::string& path, const char* what) {
  // Whole file first: parsing from memory is much faster than from a stream.
  std::string text = nf::host::read_regular_file(path, nf::host::kTokenizerMax, what);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("invalid JSON: ") + e.what());
  }
}

// tokenizer_config.json names tokens as a string or as an AddedToken object.
std::optional<std::string> config_token(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

// The first of `names` that is an added token. Plain vocab entries do not count: Qwen's vocab
// has "<s>" and "</s>" as ordinary text pieces.
std::optional<int32_t> first_added(const Impl& impl, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto it = impl.added_by_content.find(std::string_view(n)); it != impl.added_by_content.end()) return it->second;
  return std::nullopt;
}

std::shared_ptr<Impl> build(const json& root, const json& config) {
  auto impl = std::make_shared<Impl>();
  const json& model = root.at("model");
  std::string type = type_of(model);
  if (type.empty() && model.contains("merges")) type = "BPE";  // older files omit it
  if (type != "BPE") throw std::runtime_error("unsupported model type '" + type + "' (only BPE is supported)");
  impl->model = std::make_unique<Bpe>(model);

  if (auto it = root.find("added_tokens"); it != root.end()) {
    for (const auto& t : *it) {
      impl->added.push_back({t.at("id").get<int32_t>(), t.at("content").get<std::string>(), t.value("special", false),
                             t.value("lstrip", false), t.value("rstrip", false), t.value("single_word", false),
                             t.value("normalized", false)});
    }
  }
  impl->vocab_size = static_cast<int32_t>(impl->model->tokens().size());
  add_normalizer(*impl, root.value("normalizer", json()));
  // HF matches normalized: false tokens in the raw text and the others, normalized
  // themselves, in the normalized text.
  for (const auto& t : impl->added) {  // `added` no longer grows: pointers into it stay valid
    impl->added_by_id[t.id] = &t;
    impl->added_by_content[t.content] = t.id;
    if (t.normalized) {
      std::string pattern = t.content;
      for (const auto& n : impl->normalizers) pattern = n(std::move(pattern));
      impl->normalized_matcher.add(&t, std::move(pattern));
    } else {
      impl->raw_matcher.add(&t, t.content);
    }
    impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
  }

  add_pre_tokenizer(*impl, root.value("pre_tokenizer", json()));
  add_post_processor(*impl, root.value("post_processor", json()));
  add_decoder(*impl, root.value("decoder", json()));

  // bos/eos: tokenizer_config.json names them (null: there is none); otherwise the template's
  // first token and the usual names.
  auto id_of = [&](const std::optional<std::string>& name) { return name ? impl->token_to_id(*name) : std::nullopt; };
  if (config.contains("bos_token"))
    impl->bos = id_of(config_token(config, "bos_token"));
  else if (!impl->prefix_ids.empty())
    impl->bos = impl->prefix_ids.front();
  else
    impl->bos = first_added(*impl, {"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"});
  if (config.contains("eos_token"))
    impl->eos = id_of(config_token(config, "eos_token"));
  else
    impl->eos = first_added(*impl, {"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>", "<|im_end|>"});
  impl->stop_ids = impl->eos ? std::vector<int32_t>{*impl->eos} : std::vector<int32_t>{};
  for (const char* name : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|end|>",
                           "<end_of_turn>", "</s>"}) {
    auto id = first_added(*impl, {name});
    if (id && std::find(impl->stop_ids.begin(), impl->stop_ids.end(), *id) == impl->stop_ids.end())
      impl->stop_ids.push_back(*id);
  }

  // transformers' Llama-style tokenizers rebuild the template from these flags.
  if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
    impl->prefix_ids.clear();
    impl->suffix_ids.clear();
    if (config.value("add_bos_token", false) && impl->bos) impl->prefix_ids.push_back(*impl->bos);
    if (config.value("add_eos_token", false) && impl->eos) impl->suffix_ids.push_back(*impl->eos);
  }
  return impl;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

}  // namespace
}  // namespace tokenizer_detail

using namespace tokenizer_detail;

Tokenizer Tokenizer::load(const std::string& path) {
  std::string where = path;
  try {
    json root = read_json(path, "tokenizer");
    if (!root.is_object()) throw std::runtime_error("not a tokenizer.json object");
    if (!root.contains("model")) throw std::runtime_error("no \"model\" section");
    json config = json::object();
    std::string file = std::filesystem::path(path).filename().string();
    if (file.ends_with("tokenizer.json")) {
      std::string config_path =
          path.substr(0, path.size() - std::string("tokenizer.json").size()) + "tokenizer_config.json";
      if (std::filesystem::exists(config_path)) {
        where = config_path;
        config = read_json(config_path, "tokenizer config");
        where = path;
      }
    }
    return Tokenizer(build(root, config));
  } catch (const nf::host::FileError&) {
    throw;  // already names the file
  } catch (const std::exception& e) {
    throw std::runtime_error(one_line(where + ": " + e.what()));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  return impl_->encode(text, add_special);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return impl_->decode(ids, skip_special);
}

Tokenizer::Stream Tokenizer::stream(bool skip_special) const { return Stream(impl_, skip_special); }

// Like HF's DecodeStream: decode a small window with one token of context before the new
// ones, so decoders that look at neighbours (Strip, Metaspace) see what the full decode sees.
std::string Tokenizer::Stream::push(int32_t id) {
  ids_.push_back(id);
  std::span<const int32_t> all(ids_);
  std::string before = impl_->decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  std::string now = impl_->decode(all.subspan(prefix_), skip_special_);
  if (now.size() <= before.size() || now.ends_with(kReplacementChar) || !now.starts_with(before)) return {};
  prefix_ = read_;
  read_ = ids_.size();
  if (prefix_ > 256) {  // keep the window small
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
    read_ -= prefix_;
    prefix_ = 0;
  }
  return now.substr(before.size());
}

std::string Tokenizer::Stream::finish() {
  std::span<const int32_t> all(ids_);
  std::string before = impl_->decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  std::string now = impl_->decode(all.subspan(prefix_), skip_special_);
  prefix_ = read_ = ids_.size();
  return now.starts_with(before) ? now.substr(before.size()) : now;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }

std::vector<int32_t> Tokenizer::stop_ids() const { return impl_->stop_ids; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }
std::string Tokenizer::id_to_token(int32_t id) const { return impl_->id_to_token(id); }

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && it->second->special;
}

}  // namespace nf
