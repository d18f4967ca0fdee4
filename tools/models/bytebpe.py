"""A byte-level BPE tokenizer (GPT-2 style), trained and run in plain Python.

* bytes are mapped to printable unicode with GPT-2's bytes_to_unicode table;
* text is pre-split with GPT-2's regex
  's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
  (\\p{L} / \\p{N} are spelled out as character classes built from
  unicodedata, since Python's `re` has no \\p{..}; \\s is Python's);
* merges are learned greedily by pair frequency (ties broken by the smaller
  pair in code-point order, so training is deterministic);
* saved as an HF tokenizers `tokenizer.json` (model.type BPE, ByteLevel
  pre-tokenizer and decoder) that HF `tokenizers` can load.
"""
import collections
import heapq
import json
import re
import unicodedata



def _category_class(prefix):
    """A regex character class of every code point whose Unicode general
    category starts with `prefix` (L -> \\p{L}, N -> \\p{N})."""
    ranges, start, prev = [], None, None
    for cp in range(0x110000):
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in ranges)


_L = _category_class("L")
_N = _category_class("N")
# GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
PRETOKENIZE = re.compile(
    rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[{_L}]+| ?[{_N}]+| ?[^\s{_L}{_N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    return PRETOKENIZE.findall(text)


def to_byte_symbols(piece):
    return "".join(B2U[b] for b in piece.encode("utf-8"))


def train_bpe(texts, vocab_size, special_tokens, log=print):
    """Learn merges until len(bytes)+len(merges)+len(special) == vocab_size."""
    word_counts = collections.Counter()
    for t in texts:
        for p in pretokenize(t):
            word_counts[to_byte_symbols(p)] += 1
    words = [list(w) for w in word_counts]
    counts = [word_counts[w] for w in word_counts]
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_counts[(a, b)] += counts[i]
            where[(a, b)].add(i)
    base = [B2U[b] for b in range(256)]
    n_merges = vocab_size - len(base) - len(special_tokens)
    merges = []
    heap = [(-c, p[0], p[1]) for p, c in pair_counts.items()]
    heapq.heapify(heap)
    for m in range(n_merges):
        best = None
        while heap:
            negc, a, b = heapq.heappop(heap)
            if pair_counts.get((a, b), 0) == -negc:
                best = (a, b), -negc
                break
        if best is None:
            break
        (a, b), cnt = best
        if cnt < 2:
            break
        merges.append((a, b))
        new = a + b
        touched = set()
        for i in list(where[(a, b)]):
            w = words[i]
            c = counts[i]
            # remove old pairs of this word
            for x, y in zip(w, w[1:]):
                pair_counts[(x, y)] -= c
                if pair_counts[(x, y)] <= 0:
                    del pair_counts[(x, y)]
                where[(x, y)].discard(i)
                touched.add((x, y))
            j, nw = 0, []
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    nw.append(new)
                    j += 2
                else:
                    nw.append(w[j])
                    j += 1
            words[i] = nw
            for x, y in zip(nw, nw[1:]):
                pair_counts[(x, y)] += c
                where[(x, y)].add(i)
                touched.add((x, y))
        for p in touched:
            c = pair_counts.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p[0], p[1]))
        where.pop((a, b), None)
        if log and (m + 1) % 500 == 0:
            log(f"  bpe: {m + 1}/{n_merges} merges")
    vocab = {s: i for i, s in enumerate(base)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    specials = {}
    for s in special_tokens:
        specials[s] = len(vocab) + len(specials)
    return Tokenizer(vocab, merges, specials)


class Tokenizer:
    def __init__(self, vocab, merges, specials):
        self.vocab = vocab  # byte-symbol string -> id (BPE part)
        self.merges = merges
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.specials = specials  # content -> id
        self.id_to_tok = {i: s for s, i in vocab.items()}
        for s, i in specials.items():
            self.id_to_tok[i] = s
        self.cache = {}
        self.special_re = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")") if specials else None

    def __len__(self):
        return len(self.vocab) + len(self.specials)

    def _bpe(self, sym):
        if sym in self.cache:
            return self.cache[sym]
        w = list(sym)
        while len(w) > 1:
            best, bi = None, -1
            for i in range(len(w) - 1):
                r = self.ranks.get((w[i], w[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = self.merges[best]
            nw, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    nw.append(a + b)
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            w = nw
        ids = [self.vocab[t] for t in w]
        self.cache[sym] = ids
        return ids

    def encode(self, text, allow_special=True):
        ids = []
        parts = self.special_re.split(text) if (allow_special and self.special_re) else [text]
        for part in parts:
            if not part:
                continue
            if allow_special and part in self.specials:
                ids.append(self.specials[part])
                continue
            for p in pretokenize(part):
                ids.extend(self._bpe(to_byte_symbols(p)))
        return ids

    def decode(self, ids):
        out, buf = [], []
        for i in ids:
            t = self.id_to_tok[i]
            if t in self.specials:
                if buf:
                    out.append(bytes(buf).decode("utf-8", errors="replace"))
                    buf = []
                out.append(t)
            else:
                buf.extend(U2B[ch] for ch in t)
        if buf:
            out.append(bytes(buf).decode("utf-8", errors="replace"))
        return "".join(out)

    # ---- HF tokenizer.json ------------------------------------------------
    def to_hf_json(self):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for s, i in self.specials.items()]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                               "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False,
                      "vocab": self.vocab, "merges": [f"{a} {b}" for a, b in self.merges]},
        }

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_hf_json(), f, ensure_ascii=False, indent=1)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        vocab = j["model"]["vocab"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]
        specials = {t["content"]: t["id"] for t in j["added_tokens"]}
        return cls(vocab, merges, specials)
