// Shared helpers of the corpus scripts: ONNX Runtime loading (as
// scripts/ort_eval.js does it), .npy read/write, float16 conversion, and
// running a model over a sample axis.
'use strict';

const fs = require('fs');
const path = require('path');

const REPO = path.resolve(__dirname, '..', '..');

function loadOrt(ortDir) {
  const candidates = ortDir ? [path.resolve(ortDir, 'onnxruntime-node')]
    : ['onnxruntime-node', path.join(REPO, 'build', 'ort', 'node_modules', 'onnxruntime-node')];
  const errors = [];
  for (const c of candidates) {
    try {
      const ort = require(c);
      let version = 'unknown';
      try {
        version = require(path.join(path.dirname(require.resolve(c)), '..', 'package.json')).version;
      } catch (_) { /* keep unknown */ }
      return { ort, version };
    } catch (e) {
      errors.push(`${c}: ${e.message.split('\n')[0]}`);
    }
  }
  throw new Error(`cannot load onnxruntime-node (run scripts/setup.sh):\n  ${errors.join('\n  ')}`);
}

// ---------------------------------------------------------------- .npy
const DT = {
  f4: [Float32Array, 'float32', 4], f8: [Float64Array, 'float64', 8], f2: [Uint16Array, 'float16', 2],
  i8: [BigInt64Array, 'int64', 8], i4: [Int32Array, 'int32', 4], u1: [Uint8Array, 'uint8', 1],
  i1: [Int8Array, 'int8', 1], b1: [Uint8Array, 'bool', 1],
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf[0] !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not .npy`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header)[1];
  if (/True/.test(/'fortran_order'\s*:\s*(True|False)/.exec(header)[1])) throw new Error(`${file}: Fortran order`);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  const kind = descr.slice(1);
  if (!DT[kind]) throw new Error(`${file}: unsupported dtype ${descr}`);
  const [Ctor, type, size] = DT[kind];
  const count = shape.reduce((a, b) => a * b, 1);
  const bytes = new Uint8Array(count * size);
  bytes.set(buf.subarray(hstart + hlen, hstart + hlen + count * size));
  return { data: new Ctor(bytes.buffer, 0, count), shape, type };
}

function writeNpy(file, data, shape) {
  let descr;
  if (data instanceof Float32Array) descr = '<f4';
  else if (data instanceof BigInt64Array) descr = '<i8';
  else if (data instanceof Int32Array) descr = '<i4';
  else if (data instanceof Float64Array) descr = '<f8';
  else throw new Error('writeNpy: unsupported array type');
  const shapeStr = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeStr}, }`;
  const total = Math.ceil((10 + header.length + 1) / 64) * 64;
  header = header + ' '.repeat(total - 10 - header.length - 1) + '\n';
  const pre = Buffer.alloc(10);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]).copy(pre, 0);
  pre.writeUInt16LE(header.length, 8);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

// ---------------------------------------------------------------- float16
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
// Round to nearest, ties to even; overflow gives infinity, NaN stays NaN.
function toHalf(v) {
  f32[0] = v;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = ((b >>> 23) & 0xff) - 127 + 15;
  const mant = b & 0x7fffff;
  if (((b >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    const m = mant | 0x800000;
    const shift = 14 - exp;
    let h = m >>> shift;
    const rest = m & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rest > half || (rest === half && (h & 1))) h++;
    return sign | h;
  }
  let h = sign | (exp << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return h;
}
function fromHalf(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

// Converts an array to the ORT element type `want`.
function convert(data, from, want) {
  if (from === want) return data;
  const num = from === 'float16' ? Array.from(data, fromHalf) : data;
  switch (want) {
    case 'float32': return Float32Array.from(num, Number);
    case 'float64': return Float64Array.from(num, Number);
    case 'float16': return Uint16Array.from(num, (v) => toHalf(Number(v)));
    case 'int64': return BigInt64Array.from(num, (v) => BigInt(Math.round(Number(v))));
    case 'int32': return Int32Array.from(num, (v) => Math.round(Number(v)));
    default: throw new Error(`cannot convert ${from} to ${want}`);
  }
}

// Any ORT output tensor's data as a Float64Array.
function toF64(t) {
  if (t.type === 'float16') return Float64Array.from(t.data, fromHalf);
  return Float64Array.from(t.data, Number);
}

// ---------------------------------------------------------------- sessions
async function session(ort, model, level = 'all', threads = 1) {
  return ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: level, logSeverityLevel: 3,
  });
}

function inputTypes(sess) {
  const types = {};
  const meta = sess.inputMetadata || [];
  sess.inputNames.forEach((n, i) => {
    const m = Array.isArray(meta) ? meta[i] : meta[n];
    types[n] = { type: (m && m.type) || 'float32', shape: (m && m.shape) || null };
  });
  return types;
}

// Runs `sess` over arrays {name: npy} sharing a sample axis 0, `batch`
// samples per Run (a fixed leading dim in the model wins). Returns the listed
// outputs (default: all), concatenated along axis 0, as {data: Float64Array, shape}.
async function runBatched(ort, sess, inputs, batch = 16, outNames = null) {
  const types = inputTypes(sess);
  const names = Object.keys(inputs);
  const n = inputs[names[0]].shape[0];
  for (const k of names) {
    const fixed = types[k] && types[k].shape && types[k].shape[0];
    if (typeof fixed === 'number' && fixed > 0) batch = fixed;
  }
  outNames = outNames || sess.outputNames;
  const chunks = Object.fromEntries(outNames.map((o) => [o, []]));
  const shapes = {};
  for (let s = 0; s < n; s += batch) {
    const b = Math.min(batch, n - s);
    const feeds = {};
    for (const k of names) {
      const x = inputs[k];
      const per = x.shape.slice(1).reduce((a, c) => a * c, 1);
      const want = (types[k] && types[k].type) || x.type;
      feeds[k] = new ort.Tensor(want, convert(x.data.subarray(s * per, (s + b) * per), x.type, want), [b, ...x.shape.slice(1)]);
    }
    const res = await sess.run(feeds, outNames);
    for (const o of outNames) {
      chunks[o].push(toF64(res[o]));
      const dims = Array.from(res[o].dims, Number);
      if (!shapes[o]) shapes[o] = dims;
      else shapes[o] = [shapes[o][0] + dims[0], ...dims.slice(1)];
    }
  }
  const out = {};
  for (const o of outNames) {
    const total = chunks[o].reduce((a, c) => a + c.length, 0);
    const data = new Float64Array(total);
    let off = 0;
    for (const c of chunks[o]) { data.set(c, off); off += c.length; }
    out[o] = { data, shape: shapes[o] };
  }
  return out;
}

module.exports = { REPO, loadOrt, readNpy, writeNpy, toHalf, fromHalf, convert, toF64, session, inputTypes, runBatched };
