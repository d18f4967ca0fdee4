#!/usr/bin/env node
// run_graph.mjs — runs one ONNX graph in ONNX Runtime (CPU, onnxruntime-node) on inputs
// read from files and writes every output to files, for tests/ort.
//
//   node run_graph.mjs NODE_MODULES_PARENT MODEL.onnx IO_DIR
//
// NODE_MODULES_PARENT: the folder whose node_modules holds onnxruntime-node (bench/).
// IO_DIR/inputs.json: [{"name", "dtype", "dims", "file"}], files of raw little-endian
// elements (dtype float32 | int64 | int32 | bool), paths relative to IO_DIR.
// Writes IO_DIR/outputs.json in the same form (files out_N.bin) and prints the
// onnxruntime version. Exit 2 on bad usage, 3 when onnxruntime-node cannot be loaded.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [modulesParent, model, ioDir] = process.argv.slice(2);
if (!modulesParent || !model || !ioDir) {
  process.stderr.write('usage: node run_graph.mjs NODE_MODULES_PARENT MODEL.onnx IO_DIR\n');
  process.exit(2);
}
let ort;
try {
  ort = createRequire(path.resolve(modulesParent) + '/')('onnxruntime-node');
} catch (e) {
  process.stderr.write(`run_graph: cannot load onnxruntime-node from ${modulesParent}/node_modules: ${e.message}\n`);
  process.exit(3);
}

const arrays = {
  float32: Float32Array,
  int64: BigInt64Array,
  int32: Int32Array,
  bool: Uint8Array,
};

function readTensor(entry) {
  const Array_ = arrays[entry.dtype];
  if (!Array_) throw new Error(`input ${entry.name}: unsupported dtype ${entry.dtype}`);
  const bytes = fs.readFileSync(path.join(ioDir, entry.file));
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  const data = new Array_(copy.buffer, 0, copy.byteLength / Array_.BYTES_PER_ELEMENT);
  return new ort.Tensor(entry.dtype, entry.dtype === 'bool' ? Uint8Array.from(data) : data, entry.dims);
}

const inputs = JSON.parse(fs.readFileSync(path.join(ioDir, 'inputs.json'), 'utf8'));
const session = await ort.InferenceSession.create(model, {
  executionProviders: ['cpu'],
  intraOpNumThreads: 1,
  interOpNumThreads: 1,
  // The check is about the graph as written: no fusions that change float rounding.
  graphOptimizationLevel: 'disabled',
});
const feeds = {};
for (const entry of inputs) feeds[entry.name] = readTensor(entry);
const results = await session.run(feeds);
const outputs = [];
session.outputNames.forEach((name, i) => {
  const t = results[name];
  const file = `out_${i}.bin`;
  const data = t.data;
  fs.writeFileSync(path.join(ioDir, file), Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  outputs.push({ name, dtype: t.type, dims: t.dims, file });
});
fs.writeFileSync(path.join(ioDir, 'outputs.json'), JSON.stringify(outputs));
process.stdout.write(JSON.stringify({ onnxruntime: ort.env.versions?.common ?? null, outputs: outputs.length }) + '\n');
