#!/usr/bin/env node
// ort_time.js: times ONNX Runtime (onnxruntime-node) on one model, the
// reference point of bench/executor_bench.cc.
//
//   node scripts/ort_time.js --model M.onnx [--threads N] [--iters K] [--warmup W]
//       [--batch B] [--ort_dir DIR]
//     -> {"model":..,"threads":N,"batch":B,"median_ms":..,"min_ms":..,"runs":K}
//
// Feeds the first input with uniform [-1, 1) float32 data of the model's
// declared shape (symbolic dims become --batch, default 1). intraOpNumThreads
// = N, interOpNumThreads = 1, graph optimization "all" (ORT's default).
'use strict';

const path = require('path');

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) {
      throw new Error(`bad argument '${argv[i]}'`);
    }
    o[argv[i].slice(2)] = argv[i + 1];
  }
  return o;
}

function loadOrt(dir) {
  const tries = dir ? [path.resolve(dir, 'onnxruntime-node')] :
    ['onnxruntime-node', path.join(__dirname, '..', 'build', 'ort', 'node_modules', 'onnxruntime-node')];
  for (const t of tries) {
    try { return require(t); } catch (_) { /* next */ }
  }
  throw new Error('cannot load onnxruntime-node (pass --ort_dir or NODE_PATH)');
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (!o.model) throw new Error('missing --model');
  const threads = Number(o.threads || 1);
  const iters = Number(o.iters || 10);
  const warmup = Number(o.warmup || 2);
  const batch = Number(o.batch || 1);
  const ort = loadOrt(o.ort_dir);
  const session = await ort.InferenceSession.create(o.model, {
    intraOpNumThreads: threads, interOpNumThreads: 1,
    graphOptimizationLevel: 'all', executionMode: 'sequential',
  });
  // onnxruntime-node does not expose input shapes: read them from the model
  // metadata when available, else require --shape a,b,c.
  let dims = o.shape ? o.shape.split(',').map(Number) : null;
  if (!dims) {
    const meta = session.inputMetadata && session.inputMetadata[0];
    if (meta && meta.shape) dims = meta.shape.map((d) => (typeof d === 'number' && d > 0 ? d : batch));
  }
  if (!dims) throw new Error('cannot tell the input shape; pass --shape');
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.random() * 2 - 1;
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, dims) };
  for (let i = 0; i < warmup; i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < iters; i++) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  process.stdout.write(JSON.stringify({
    model: o.model, threads, batch: dims[0], median_ms: times[Math.floor(times.length / 2)],
    min_ms: times[0], runs: iters,
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_time: ${e.message}\n`);
  process.exit(1);
});
