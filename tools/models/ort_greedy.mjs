#!/usr/bin/env node
// ort_greedy.mjs — greedy decoding of an optimum-layout decoder in ONNX Runtime, for the
// model makers' checks (make_merged_decoder.py, make_function_export.py).
//
//   node ort_greedy.mjs NODE_MODULES_PARENT MODEL.onnx PROMPT_JSON N_NEW CACHE_BRANCH_FIRST
//
// A merged decoder (decoder_model_merged.onnx: an If on use_cache_branch) takes the
// else-branch on the prompt pass (use_cache_branch false, as optimum's runtime does) or, with
// CACHE_BRANCH_FIRST 1, the then-branch over an empty cache; every later pass the
// then-branch. Other decoders run from an empty cache. Prints the new token ids as JSON.
import { createRequire } from 'node:module';
import path from 'node:path';

const [modulesParent, model, promptJson, nNew, cacheFirst] = process.argv.slice(2);
const ort = createRequire(path.resolve(modulesParent) + '/')('onnxruntime-node');
const session = await ort.InferenceSession.create(model, { executionProviders: ['cpu'], intraOpNumThreads: 1 });
const pastNames = session.inputNames.filter((n) => n.startsWith('past_key_values.'));
const meta = session.inputMetadata ?? [];
const kvMeta = (name) =>  // shape [batch, kv heads, past, head_dim] with the heads and head_dim fixed; type
  Array.isArray(meta) ? meta.find((e) => e.name === name) : meta[name];
let past = Object.fromEntries(pastNames.map((n) => {
  const { shape: s, type } = kvMeta(n);
  const empty = type === 'float16' ? new Uint16Array(0) : new Float32Array(0);  // an fp16 export's cache
  return [n, new ort.Tensor(type === 'float16' ? 'float16' : 'float32', empty, [1, s[1], 0, s[3]])];
}));
// An fp16 export's logits arrive as IEEE half bits.
const halfToFloat = (h) => {
  const e = (h >> 10) & 0x1f, f = h & 0x3ff, sign = h & 0x8000 ? -1 : 1;
  if (e === 0) return sign * f * 2 ** -24;
  if (e === 31) return f ? NaN : sign * Infinity;
  return sign * (1 + f / 1024) * 2 ** (e - 15);
};
let rows = JSON.parse(promptJson);
let seen = 0;
const out = [];
for (let step = 0; out.length < Number(nNew); ++step) {
  const ids = BigInt64Array.from(rows.map(BigInt));
  const mask = new BigInt64Array(seen + rows.length).fill(1n);
  const pos = BigInt64Array.from(rows.map((_, i) => BigInt(seen + i)));
  const feeds = {
    input_ids: new ort.Tensor('int64', ids, [1, rows.length]),
    attention_mask: new ort.Tensor('int64', mask, [1, mask.length]),
    position_ids: new ort.Tensor('int64', pos, [1, rows.length]),
    ...past,
  };
  if (session.inputNames.includes('use_cache_branch'))
    feeds.use_cache_branch = new ort.Tensor('bool', Uint8Array.from([step > 0 || cacheFirst === '1' ? 1 : 0]), [1]);
  const r = await session.run(feeds);
  const logits = r.logits;
  const vocab = logits.dims[2];
  let last = logits.data.subarray((rows.length - 1) * vocab, rows.length * vocab);
  if (logits.type === 'float16') last = Float32Array.from(last, halfToFloat);
  let best = 0;
  for (let v = 1; v < vocab; ++v) if (last[v] > last[best]) best = v;
  out.push(best);
  seen += rows.length;
  past = Object.fromEntries(pastNames.map((n) => [n, r[n.replace('past_key_values.', 'present.')]]));
  rows = [best];
}
process.stdout.write(JSON.stringify(out) + '\n');
