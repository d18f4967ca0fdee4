#!/usr/bin/env node
// ort_logits.mjs — runs one prefill of an optimum-layout decoder ONNX in ONNX Runtime and
// prints its logits, for tests/quant (QDQ export against npuforge's quantized eval).
//
//   node ort_logits.mjs NODE_MODULES_DIR MODEL.onnx 1,2,3,...
//
// Inputs as npuforge's runner feeds a prefill: input_ids [1,T], attention_mask ones,
// position_ids 0..T-1, past_key_values.N.key|value empty [1, kv_heads, 0, head_dim] (kv
// heads and head dim read from the model's input metadata). Prints {"dims":[...],"logits":[...]}.
import { createRequire } from 'node:module';
import path from 'node:path';

const [modulesDir, model, idsArg] = process.argv.slice(2);
if (!modulesDir || !model || !idsArg) {
  process.stderr.write('usage: node ort_logits.mjs NODE_MODULES_DIR MODEL.onnx 1,2,3\n');
  process.exit(2);
}
const require = createRequire(path.resolve(modulesDir) + '/');
const ort = require('onnxruntime-node');

const ids = idsArg.split(',').map((v) => BigInt(v));
const T = ids.length;
const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1, graphOptimizationLevel: 'disabled' });
const feeds = {};
const meta = session.inputMetadata ?? [];
for (const name of session.inputNames) {
  if (name === 'input_ids') feeds[name] = new ort.Tensor('int64', BigInt64Array.from(ids), [1, T]);
  else if (name === 'attention_mask') feeds[name] = new ort.Tensor('int64', new BigInt64Array(T).fill(1n), [1, T]);
  else if (name === 'position_ids') feeds[name] = new ort.Tensor('int64', BigInt64Array.from(ids.map((_, i) => BigInt(i))), [1, T]);
  else if (name.startsWith('past_key_values.')) {
    const m = Array.isArray(meta) ? meta.find((x) => x.name === name) : null;
    const shape = m && m.shape ? m.shape : null;
    if (!shape || typeof shape[1] !== 'number' || typeof shape[3] !== 'number') {
      process.stderr.write(`ort_logits: no static kv_heads/head_dim for ${name}\n`);
      process.exit(1);
    }
    feeds[name] = new ort.Tensor('float32', new Float32Array(0), [1, shape[1], 0, shape[3]]);
  } else {
    process.stderr.write(`ort_logits: unexpected input ${name}\n`);
    process.exit(1);
  }
}
const out = await session.run(feeds, ['logits']);
const logits = out.logits;
process.stdout.write(JSON.stringify({ dims: logits.dims, logits: Array.from(logits.data) }) + '\n');
