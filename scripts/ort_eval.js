#!/usr/bin/env node
// ort_eval.js: evaluates ONNX models with onnxruntime-node, the independent
// runtime quantd's tests check output models against. No npm deps besides
// onnxruntime-node.
//
//   node scripts/ort_eval.js accuracy --model M.onnx --x X.npy --y Y.npy [--batch 64]
//       -> {"model":..,"n":..,"accuracy":..,"checked_by":"onnxruntime-node 1.30.0"}
//          (argmax over the last axis of the first output, against labels Y)
//   node scripts/ort_eval.js compare --model A.onnx --model2 B.onnx --x X.npy [--batch 64]
//       -> {"n":..,"top1_agreement":..,"sqnr_db":..,"max_abs_diff":..,...}
//          sqnr_db = 10*log10(sum a^2 / sum (a-b)^2), B's first output against A's;
//          null when the outputs are bit-identical ("identical": true).
//   node scripts/ort_eval.js run --model M.onnx --x X.npy --out OUT.npy [--batch 64]
//       -> writes the first output as float32 .npy; prints {"out":..,"shape":[..]}
//
// Common options:
//   --threads N     intra-op threads (default 1; inter-op is always 1)
//   --batch B       samples per Run (default 64; a model with a fixed batch
//                   dimension uses that instead)
//   --opt LEVEL     graph optimization: disabled|basic|extended|all (default all)
//   --ort_dir DIR   node_modules dir holding onnxruntime-node. Default: plain
//                   require (honours NODE_PATH), then <repo>/build/ort/node_modules.
//   --x64quantprecision 0|1  ORT's session.x64quantprecision (default 1 here;
//                   0 is ORT's own default, what a deployment on an AVX2 CPU
//                   without VNNI runs).
//
// The first model input is fed from X (float32/float64/int64/int32 .npy, C
// order, little-endian; float64 is converted to the input's type if needed).
// Any error (missing file, model ORT refuses, shape mismatch) -> message on
// stderr and exit code 1.
'use strict';

const fs = require('fs');
const path = require('path');

const REPO = path.resolve(__dirname, '..');

class UsageError extends Error {}

function fail(msg) {
  process.stderr.write(`ort_eval: ${msg}\n`);
  process.exit(1);
}

// ---------------------------------------------------------------- arguments
function parseArgs(argv) {
  const mode = argv[0];
  const opts = {};
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new UsageError(`unexpected argument '${a}'`);
    let key = a.slice(2);
    let val;
    const eq = key.indexOf('=');
    if (eq >= 0) {
      val = key.slice(eq + 1);
      key = key.slice(0, eq);
    } else {
      if (i + 1 >= argv.length) throw new UsageError(`option --${key} needs a value`);
      val = argv[++i];
    }
    opts[key.replace(/-/g, '_')] = val;
  }
  return { mode, opts };
}

function need(opts, key) {
  if (opts[key] === undefined) throw new UsageError(`missing --${key}`);
  return opts[key];
}

function posInt(opts, key, dflt) {
  if (opts[key] === undefined) return dflt;
  const v = Number(opts[key]);
  if (!Number.isInteger(v) || v < 1) throw new UsageError(`--${key} must be a positive integer`);
  return v;
}

function checkKnown(opts, allowed) {
  const common = ['threads', 'batch', 'opt', 'ort_dir', 'x64quantprecision'];
  for (const k of Object.keys(opts)) {
    if (!allowed.includes(k) && !common.includes(k)) throw new UsageError(`unknown option --${k}`);
  }
}

function existing(file, what) {
  if (!fs.existsSync(file)) throw new Error(`${what} not found: ${file}`);
  if (!fs.statSync(file).isFile()) throw new Error(`${what} is not a file: ${file}`);
  return file;
}

// ---------------------------------------------------------------- ORT loading
function loadOrt(ortDir) {
  const candidates = [];
  if (ortDir) {
    candidates.push(path.resolve(ortDir, 'onnxruntime-node'));
  } else {
    candidates.push('onnxruntime-node');
    candidates.push(path.join(REPO, 'build', 'ort', 'node_modules', 'onnxruntime-node'));
  }
  const errors = [];
  for (const c of candidates) {
    try {
      const ort = require(c);
      let version = (ort.env && ort.env.versions && ort.env.versions.node) || null;
      if (!version) {
        try {
          version = require(path.join(path.dirname(require.resolve(c)), '..', 'package.json')).version;
        } catch (_) { version = 'unknown'; }
      }
      return { ort, version };
    } catch (e) {
      errors.push(`${c}: ${e.message.split('\n')[0]}`);
    }
  }
  throw new Error(`cannot load onnxruntime-node (run scripts/setup.sh, or pass --ort_dir / NODE_PATH):\n  ` +
                  errors.join('\n  '));
}

// ---------------------------------------------------------------- .npy I/O
const NPY_MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY

const DTYPES = {
  // descr (without byte order) -> [typed array ctor, ort type name, bytes]
  f4: [Float32Array, 'float32', 4],
  f8: [Float64Array, 'float64', 8],
  i8: [BigInt64Array, 'int64', 8],
  i4: [Int32Array, 'int32', 4],
  u1: [Uint8Array, 'uint8', 1],
  i1: [Int8Array, 'int8', 1],
};

function readNpy(file) {
  existing(file, '.npy file');
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || !buf.subarray(0, 6).equals(NPY_MAGIC)) throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  let hlen, hstart;
  if (major === 1) {
    hlen = buf.readUInt16LE(8);
    hstart = 10;
  } else if (major === 2 || major === 3) {
    if (buf.length < 12) throw new Error(`${file}: truncated .npy header`);
    hlen = buf.readUInt32LE(8);
    hstart = 12;
  } else {
    throw new Error(`${file}: unsupported .npy version ${major}.${buf[7]}`);
  }
  if (hstart + hlen > buf.length) throw new Error(`${file}: truncated .npy header`);
  const header = buf.toString(major === 3 ? 'utf8' : 'latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shapeM = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shapeM) throw new Error(`${file}: cannot parse .npy header: ${header.trim()}`);
  if (fortran[1] === 'True') throw new Error(`${file}: Fortran-order arrays are not supported`);
  const d = descr[1];
  const order = d[0];
  const kind = d.slice(1);
  if (!DTYPES[kind]) throw new Error(`${file}: unsupported dtype '${d}' (want <f4, <f8, <i8, <i4, |u1, |i1)`);
  const [Ctor, type, size] = DTYPES[kind];
  if (size > 1 && order !== '<' && !(order === '=' && require('os').endianness() === 'LE')) {
    throw new Error(`${file}: only little-endian data is supported (descr '${d}')`);
  }
  const shape = shapeM[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  if (shape.some((v) => !Number.isInteger(v) || v < 0)) throw new Error(`${file}: bad shape (${shapeM[1]})`);
  const count = shape.reduce((a, b) => a * b, 1);
  const off = hstart + hlen;
  if (buf.length - off < count * size) {
    throw new Error(`${file}: data truncated (${buf.length - off} bytes, need ${count * size})`);
  }
  // Copy into a fresh, aligned buffer.
  const bytes = new Uint8Array(count * size);
  bytes.set(buf.subarray(off, off + count * size));
  return { data: new Ctor(bytes.buffer, 0, count), shape, type };
}

function writeNpyF32(file, data, shape) {
  const shapeStr = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': ${shapeStr}, }`;
  // Pad so magic(6)+version(2)+len(2)+header is a multiple of 64, ending in \n.
  const total = Math.ceil((10 + header.length + 1) / 64) * 64;
  header = header + ' '.repeat(total - 10 - header.length - 1) + '\n';
  const pre = Buffer.alloc(10);
  NPY_MAGIC.copy(pre, 0);
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const f32 = data instanceof Float32Array ? data : Float32Array.from(data, Number);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength)]));
}

// ---------------------------------------------------------------- inference
function sessionOptions(opts) {
  const level = opts.opt || 'all';
  if (!['disabled', 'basic', 'extended', 'all'].includes(level)) {
    throw new UsageError('--opt must be disabled|basic|extended|all');
  }
  // x86 CPUs without VNNI run ORT's u8 x s8 integer kernels with
  // VPMADDUBSW, whose int16 pair sums saturate for full-range int8 weights:
  // results then depend on the machine, not on the model. The tests judge a
  // model's arithmetic, so they ask ORT's AVX2 precision mode (int8 weights
  // shifted to uint8, exact u8 x u8 products) unless --x64quantprecision=0
  // asks for ORT's default. The real-model corpus (scripts/corpus/) keeps
  // ORT's defaults: that is what a deployment sees.
  const precision = opts.x64quantprecision === undefined ? '1'
                                                         : String(opts.x64quantprecision);
  if (!['0', '1'].includes(precision)) {
    throw new UsageError('--x64quantprecision must be 0 or 1');
  }
  return {
    intraOpNumThreads: posInt(opts, 'threads', 1),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: level,
    extra: {session: {x64quantprecision: precision}},
  };
}

async function openSession(ort, model, opts) {
  existing(model, 'model');
  try {
    return await ort.InferenceSession.create(model, sessionOptions(opts));
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new Error(`onnxruntime refused ${model}: ${e.message}`);
  }
}

// IEEE half <-> number (round to nearest even), shared with the corpus
// scripts: a model computing in float16 takes and returns Uint16Array bits.
const { toHalf: toHalfBits, fromHalf: fromHalfBits } = require('./corpus/lib');

function convertInput(x, wantType, file) {
  if (!wantType || wantType === x.type) return x;
  const conv = {
    float32: (d) => Float32Array.from(d, Number),
    float64: (d) => Float64Array.from(d, Number),
    float16: (d) => Uint16Array.from(d, (v) => toHalfBits(Number(v))),
    int64: (d) => BigInt64Array.from(d, (v) => BigInt(Math.round(Number(v)))),
    int32: (d) => Int32Array.from(d, Number),
  }[wantType];
  // Only lossless-enough conversions: f8->f4, integer widenings/narrowings,
  // and float to float16 for a model that computes in half (its own input
  // precision).
  const ok = (x.type === 'float64' && wantType === 'float32') ||
             (x.type.startsWith('float') && wantType === 'float16') ||
             (!x.type.startsWith('float') && !wantType.startsWith('float'));
  if (!conv || !ok) throw new Error(`${file} holds ${x.type} but the model input wants ${wantType}`);
  return { data: conv(x.data), shape: x.shape, type: wantType };
}

// Runs the model over X in batches; returns the first output, concatenated
// along axis 0, as { data: Float64Array-like (number[] or typed), shape }.
async function runAll(ort, session, x, xfile, opts) {
  const inName = session.inputNames[0];
  const outName = session.outputNames[0];
  let meta = null;
  try { meta = session.inputMetadata && session.inputMetadata[0]; } catch (_) { meta = null; }
  if (meta && meta.isTensor && meta.type) x = convertInput(x, meta.type, xfile);
  if (x.shape.length < 1 || x.shape[0] < 1) throw new Error(`${xfile}: empty input (shape [${x.shape}])`);
  const n = x.shape[0];
  const inner = x.shape.slice(1);
  const per = inner.reduce((a, b) => a * b, 1);
  let batch = posInt(opts, 'batch', 64);
  if (meta && Array.isArray(meta.shape) && meta.shape.length) {
    if (meta.shape.length !== x.shape.length) {
      throw new Error(`${xfile} has shape [${x.shape}] but model input '${inName}' has rank ${meta.shape.length} ` +
                      `([${meta.shape}])`);
    }
    if (typeof meta.shape[0] === 'number' && meta.shape[0] > 0) batch = meta.shape[0];
  }
  const chunks = [];
  let outInner = null;
  let outType = null;
  for (let s = 0; s < n; s += batch) {
    const b = Math.min(batch, n - s);
    const t = new ort.Tensor(x.type, x.data.subarray(s * per, (s + b) * per), [b, ...inner]);
    let res;
    try {
      res = await session.run({ [inName]: t }, [outName]);
    } catch (e) {
      throw new Error(`onnxruntime failed to run batch at ${s}: ${e.message}`);
    }
    const o = res[outName];
    if (!o || o.location && o.location !== 'cpu' || !o.data || typeof o.data.length !== 'number') {
      throw new Error(`first output '${outName}' is not a CPU tensor`);
    }
    const dims = Array.from(o.dims, Number);
    if (dims.length < 1 || dims[0] !== b) {
      throw new Error(`first output '${outName}' has shape [${dims}], expected leading dim ${b}`);
    }
    if (outInner === null) { outInner = dims.slice(1); outType = o.type; }
    else if (dims.slice(1).join(',') !== outInner.join(',')) {
      throw new Error(`first output '${outName}' changes shape between batches`);
    }
    chunks.push(o.type === 'float32' ? o.data.slice()
                : o.type === 'float16' ? Float64Array.from(o.data, fromHalfBits)
                : Float64Array.from(o.data, Number));
  }
  const total = chunks.reduce((a, c) => a + c.length, 0);
  const data = outType === 'float32' ? new Float32Array(total) : new Float64Array(total);
  let off = 0;
  for (const c of chunks) { data.set(c, off); off += c.length; }
  return { data, shape: [n, ...outInner], type: outType };
}

function argmaxRows(out) {
  const k = out.shape.length > 0 ? out.shape[out.shape.length - 1] : 1;
  if (k < 1) throw new Error('first output has an empty last axis');
  const rows = out.data.length / k;
  const res = new Int32Array(rows);
  for (let r = 0; r < rows; r++) {
    let best = 0;
    let bv = out.data[r * k];
    for (let j = 1; j < k; j++) {
      const v = out.data[r * k + j];
      if (v > bv || (Number.isNaN(bv) && !Number.isNaN(v))) { bv = v; best = j; }
    }
    res[r] = best;
  }
  return res;
}

function round(v, digits = 6) {
  if (v === null || !Number.isFinite(v)) return v;
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

// ---------------------------------------------------------------- modes
async function modeAccuracy(ortInfo, opts) {
  checkKnown(opts, ['model', 'x', 'y']);
  const model = need(opts, 'model');
  const xfile = need(opts, 'x');
  const yfile = need(opts, 'y');
  const x = readNpy(xfile);
  const y = readNpy(yfile);
  if (y.type.startsWith('float')) throw new Error(`${yfile}: labels must be integers, got ${y.type}`);
  const session = await openSession(ortInfo.ort, model, opts);
  const out = await runAll(ortInfo.ort, session, x, xfile, opts);
  const pred = argmaxRows(out);
  const n = x.shape[0];
  if (pred.length !== n) {
    throw new Error(`first output has shape [${out.shape}]: ${pred.length} argmax rows for ${n} samples`);
  }
  if (y.data.length !== n) throw new Error(`${yfile} has ${y.data.length} labels for ${n} samples`);
  let correct = 0;
  for (let i = 0; i < n; i++) if (pred[i] === Number(y.data[i])) correct++;
  return { model, n, correct, accuracy: round(correct / n), checked_by: `onnxruntime-node ${ortInfo.version}` };
}

async function modeCompare(ortInfo, opts) {
  checkKnown(opts, ['model', 'model2', 'x']);
  const modelA = need(opts, 'model');
  const modelB = need(opts, 'model2');
  const xfile = need(opts, 'x');
  const x = readNpy(xfile);
  existing(modelB, 'model2');
  const sa = await openSession(ortInfo.ort, modelA, opts);
  const a = await runAll(ortInfo.ort, sa, x, xfile, opts);
  const sb = await openSession(ortInfo.ort, modelB, opts);
  const b = await runAll(ortInfo.ort, sb, x, xfile, opts);
  if (a.shape.join(',') !== b.shape.join(',')) {
    throw new Error(`output shapes differ: [${a.shape}] vs [${b.shape}]`);
  }
  let sig = 0, noise = 0, maxAbs = 0;
  for (let i = 0; i < a.data.length; i++) {
    const av = a.data[i];
    const d = av - b.data[i];
    sig += av * av;
    noise += d * d;
    const ad = Math.abs(d);
    if (ad > maxAbs || Number.isNaN(ad)) maxAbs = ad;
  }
  const pa = argmaxRows(a);
  const pb = argmaxRows(b);
  let agree = 0;
  for (let i = 0; i < pa.length; i++) if (pa[i] === pb[i]) agree++;
  const identical = noise === 0;
  const sqnr = identical ? null : 10 * Math.log10(sig / noise);
  return {
    model: modelA, model2: modelB, n: x.shape[0],
    top1_agreement: round(agree / pa.length),
    sqnr_db: sqnr === null ? null : round(sqnr, 3),
    max_abs_diff: round(maxAbs, 8),
    identical,
    checked_by: `onnxruntime-node ${ortInfo.version}`,
  };
}

async function modeRun(ortInfo, opts) {
  checkKnown(opts, ['model', 'x', 'out']);
  const model = need(opts, 'model');
  const xfile = need(opts, 'x');
  const outFile = need(opts, 'out');
  const x = readNpy(xfile);
  const session = await openSession(ortInfo.ort, model, opts);
  const out = await runAll(ortInfo.ort, session, x, xfile, opts);
  writeNpyF32(outFile, out.data, out.shape);
  return { model, out: outFile, shape: out.shape, output: session.outputNames[0],
    checked_by: `onnxruntime-node ${ortInfo.version}` };
}

const USAGE = `usage:
  node scripts/ort_eval.js accuracy --model M.onnx --x X.npy --y Y.npy [--batch 64]
  node scripts/ort_eval.js compare  --model A.onnx --model2 B.onnx --x X.npy
  node scripts/ort_eval.js run      --model M.onnx --x X.npy --out OUT.npy
options: --threads N (default 1)  --batch B (default 64)  --opt disabled|basic|extended|all
         --ort_dir DIR (node_modules holding onnxruntime-node; default NODE_PATH, then
         <repo>/build/ort/node_modules)  --x64quantprecision 0|1 (default 1)`;

async function main() {
  const argv = process.argv.slice(2);
  if (argv.length === 0 || argv[0] === '-h' || argv[0] === '--help' || argv[0] === 'help') {
    process.stdout.write(USAGE + '\n');
    if (argv.length === 0) process.exit(1);
    return;
  }
  const { mode, opts } = parseArgs(argv);
  const modes = { accuracy: modeAccuracy, compare: modeCompare, run: modeRun };
  if (!modes[mode]) throw new UsageError(`unknown mode '${mode}'`);
  // Validate options that do not need ORT before loading it.
  sessionOptions(opts);
  posInt(opts, 'batch', 64);
  const ortInfo = loadOrt(opts.ort_dir);
  const result = await modes[mode](ortInfo, opts);
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().then(() => process.exit(0), (e) => {
  if (e instanceof UsageError) fail(`${e.message}\n${USAGE}`);
  fail(e && e.message ? e.message : String(e));
});
