#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <stdexcept>

#include "tokenizer/text.h"

namespace nf::tokenizer_detail {

namespace {
const std::string_view kMetaspace = "\xE2\x96\x81";  // "▁"

bool after_metaspace(std::string_view s, size_t pos) {
  return pos >= kMetaspace.size() && s.substr(pos - kMetaspace.size(), kMetaspace.size()) == kMetaspace;
}

std::string string_or_empty(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
}  // namespace

Bpe::Bpe(const nlohmann::json& model) {
  const auto& vocab = model.at("vocab");
  if (!vocab.is_object()) throw std::runtime_error("model.vocab is not an object");
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    auto i = id.get<int32_t>();
    if (i < 0) throw std::runtime_error("negative id for token '" + token + "'");
    vocab_[token] = i;
    if (static_cast<size_t>(i) >= tokens_.size()) tokens_.resize(i + 1);
    tokens_[i] = token;
  }
  prefix_ = string_or_empty(model, "continuing_subword_prefix");
  suffix_ = string_or_empty(model, "end_of_word_suffix");
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  if (auto unk = string_or_empty(model, "unk_token"); !unk.empty()) {
    auto it = vocab_.find(unk);
    if (it == vocab_.end()) throw std::runtime_error("unk_token '" + unk + "' is not in the vocab");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(name);
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  cut_before_metaspace_ =
      prefix_.empty() && suffix_.empty() && vocab_.contains(kMetaspace) &&
      std::none_of(vocab_.begin(), vocab_.end(), [](const auto& entry) {
        const std::string& t = entry.first;
        for (size_t pos = t.find(kMetaspace, 1); pos != std::string::npos; pos = t.find(kMetaspace, pos + 1))
          if (!after_metaspace(t, pos)) return true;
        return false;
      });

  // Merges come as "a b" strings (older files) or as [a, b] pairs (newer ones, where a
  // token may itself contain a space). The rank is the position in the list.
  const auto& merges = model.at("merges");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const auto& line = m.get_ref<const std::string&>();
      auto space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        throw std::runtime_error("merge " + std::to_string(rank + 1) + " is not \"a b\": '" + line + "'");
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      throw std::runtime_error("merge " + std::to_string(rank + 1) + " is neither \"a b\" nor [a, b]");
    }
    // With a continuing-subword prefix the right part carries it, the merged token only once.
    std::string merged = a + (!prefix_.empty() && b.starts_with(prefix_) ? b.substr(prefix_.size()) : b);
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(merged);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
      throw std::runtime_error("merge " + std::to_string(rank + 1) + " ('" + a + "', '" + b +
                               "') uses a token that is not in the vocab");
    merges_[pair_key(ia->second, ib->second)] = Merge{rank, im->second};  // a repeat wins, as in HF
    ++rank;
  }
}

std::optional<int32_t> Bpe::find(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama-3: a word that is a token as a whole is taken as is, whatever the merges would do.
    if (auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (!cut_before_metaspace_) {
    encode_cached(word, out);
    return;
  }
  size_t start = 0;
  for (size_t pos = word.find(kMetaspace, 1); pos != std::string_view::npos; pos = word.find(kMetaspace, pos + 1)) {
    if (after_metaspace(word, pos)) continue;  // inside a run of "▁"s
    encode_cached(word.substr(start, pos - start), out);
    start = pos;
  }
  encode_cached(word.substr(start), out);
}

void Bpe::encode_cached(std::string_view word, std::vector<int32_t>& out) const {
  bool cacheable = word.size() <= kCacheMaxWord;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

// Follows HF's BPE::merge_word + Word::merge_all so that ties and unknowns come out the same.
void Bpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  };

  int32_t pending_unk = -1;  // unk waiting to be added: a fused run of unknown characters
  auto chars = utf8_chars(word);
  std::string piece;
  for (size_t i = 0; i < chars.size(); ++i) {
    piece.assign(i > 0 ? prefix_ : std::string());
    piece.append(chars[i]);
    if (i + 1 == chars.size()) piece.append(suffix_);
    if (auto id = find(piece)) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = std::all_of(piece.begin(), piece.end(),
                             [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; });
      if (all) {
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
    // No unk token: HF drops the character.
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Skip entries made stale by an earlier merge of either side.
    auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.id != top.id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const auto& s : symbols)
    if (s.alive) out.push_back(s.id);
}

}  // namespace nf::tokenizer_detail
