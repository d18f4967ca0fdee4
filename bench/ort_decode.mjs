#!/usr/bin/env node
// ort_decode.mjs — the ONNX Runtime CPU peer for bench/decode_bench.sh.
//
//   node bench/ort_decode.mjs MODEL.onnx [--threads N] [--prompt-len P | --prompt-ids 1,2,3]
//                             [--new-tokens T] [--warmup W]
//
// Greedy generation with the KV cache exactly as an optimum-layout runtime drives a
// torch.onnx / optimum export (and as npuforge's runner does, see host/runner/generate.cpp):
//   prefill: input_ids [1,P], attention_mask ones [1,P], position_ids 0..P-1,
//            past_key_values.N.key|value empty [1, kv_heads, 0, head_dim]
//   decode:  input_ids [[tok]], attention_mask ones [1, past+1], position_ids [[past]],
//            past_key_values.N.* = the previous call's present.N.*
// Token i+1 is the argmax of the last position's logits.
//
// Timing follows npuforge's `run --json` stats: prefill_tokens_per_s = P / (prefill call);
// decode_tokens_per_s = (T-1) / (time from the end of prefill to the last token, i.e. T-1
// decode calls plus the argmaxes). No warm-up by default (npuforge's timed run has none
// either); --warmup W does W untimed prefill+decode rounds first.
//
// Prints one JSON object: {prefill_tokens_per_s, decode_tokens_per_s, tokens, ...}.
import ort from 'onnxruntime-node';

function usage(msg) {
  if (msg) process.stderr.write(`ort_decode: ${msg}\n`);
  process.stderr.write('usage: node ort_decode.mjs MODEL.onnx [--threads N] [--prompt-len P | --prompt-ids 1,2,3] [--new-tokens T] [--warmup W]\n');
  process.exit(2);
}

const args = process.argv.slice(2);
let model = null, threads = 1, promptLen = 16, promptIds = null, newTokens = 32, warmup = 0;
for (let i = 0; i < args.length; ++i) {
  const a = args[i];
  const val = () => { if (i + 1 >= args.length) usage(`${a} needs a value`); return args[++i]; };
  const int = (v, min) => { const n = Number(v); if (!Number.isInteger(n) || n < min) usage(`bad value '${v}' for ${a}`); return n; };
  if (a === '--threads') threads = int(val(), 0);
  else if (a === '--prompt-len') promptLen = int(val(), 1);
  else if (a === '--prompt-ids') promptIds = val().split(',').map((v) => int(v, 0));
  else if (a === '--new-tokens') newTokens = int(val(), 1);
  else if (a === '--warmup') warmup = int(val(), 0);
  else if (a.startsWith('--')) usage(`unknown option ${a}`);
  else if (model === null) model = a;
  else usage(`unexpected argument ${a}`);
}
if (!model) usage('no model');
// Deterministic default prompt (the same formula decode_bench.sh uses): ids 3..252.
if (!promptIds) promptIds = Array.from({ length: promptLen }, (_, i) => 3 + ((i * 37 + 11) % 250));

const session = await ort.InferenceSession.create(model, {
  executionProviders: ['cpu'],
  intraOpNumThreads: threads,
  interOpNumThreads: 1,
  graphOptimizationLevel: 'all',
  executionMode: 'sequential',
});

// KV inputs: past_key_values.{i}.key|value with shape [batch, kv_heads, past, head_dim].
const kvInputs = session.inputNames.filter((n) => n.startsWith('past_key_values.'));
const meta = new Map((session.inputMetadata || []).map((m) => [m.name, m]));
const kvShape = (name) => {
  const m = meta.get(name);
  if (!m || !m.shape || m.shape.length !== 4 || typeof m.shape[1] !== 'number' || typeof m.shape[3] !== 'number')
    throw new Error(`cannot read [batch, kv_heads, past, head_dim] of ${name} from the model's input metadata`);
  return [m.shape[1], m.shape[3]];
};
const presentOf = (name) => name.replace('past_key_values.', 'present.');
const hasPositions = session.inputNames.includes('position_ids');
const hasMask = session.inputNames.includes('attention_mask');

function i64(values, dims) {
  return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
}

function argmaxLast(logits) {
  const [, seq, vocab] = logits.dims;
  const d = logits.data;
  const base = (seq - 1) * vocab;
  let best = 0, bestV = -Infinity;
  for (let j = 0; j < vocab; ++j) if (d[base + j] > bestV) { bestV = d[base + j]; best = j; }
  return best;
}

async function generate(prompt, T) {
  const feeds = {};
  const P = prompt.length;
  feeds.input_ids = i64(prompt, [1, P]);
  if (hasMask) feeds.attention_mask = i64(new Array(P).fill(1), [1, P]);
  if (hasPositions) feeds.position_ids = i64(prompt.map((_, i) => i), [1, P]);
  for (const n of kvInputs) {
    const [h, d] = kvShape(n);
    feeds[n] = new ort.Tensor('float32', new Float32Array(0), [1, h, 0, d]);
  }
  const t0 = performance.now();
  let out = await session.run(feeds);
  const t1 = performance.now();
  const tokens = [];
  let past = P;
  for (let i = 0; i < T; ++i) {
    const tok = argmaxLast(out.logits);
    tokens.push(tok);
    if (i + 1 >= T) break;
    const f = { input_ids: i64([tok], [1, 1]) };
    if (hasMask) f.attention_mask = i64(new Array(past + 1).fill(1), [1, past + 1]);
    if (hasPositions) f.position_ids = i64([past], [1, 1]);
    for (const n of kvInputs) f[n] = out[presentOf(n)];
    out = await session.run(f);
    past += 1;
  }
  const t2 = performance.now();
  return { tokens, prefillS: (t1 - t0) / 1e3, decodeS: (t2 - t1) / 1e3 };
}

for (let w = 0; w < warmup; ++w) await generate(promptIds, Math.min(newTokens, 4));
const r = await generate(promptIds, newTokens);
const result = {
  prefill_tokens_per_s: r.prefillS > 0 ? promptIds.length / r.prefillS : 0,
  decode_tokens_per_s: r.decodeS > 0 && newTokens > 1 ? (newTokens - 1) / r.decodeS : 0,
  tokens: r.tokens,
  prompt_tokens: promptIds.length,
  new_tokens: r.tokens.length,
  prefill_seconds: r.prefillS,
  decode_seconds: r.decodeS,
  threads,
  onnxruntime_version: ort.env.versions?.common ?? null,
};
process.stdout.write(JSON.stringify(result) + '\n');
