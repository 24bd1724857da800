#!/usr/bin/env node
// Loads each model scripts/sweep/backend_nodes.py had quantized in ONNX
// Runtime (default level, `all`) beside its float original, runs both on the
// model's test inputs and compares every output.
//
//   node scripts/sweep/ort_check.js DIR/manifest.json
//
// A quantized model ONNX Runtime refuses, or that fails where the float one
// runs, is a finding (exit 1). Prints one JSON line per model whose worst
// output SQNR is under 30 dB (expected for some ops at 8 bits; listed to be
// read) and a summary.
'use strict';

const fs = require('fs');
const path = require('path');
const lib = require(path.join(__dirname, '..', 'corpus', 'lib.js'));

function sqnr(a, b) {
  let s = 0, n = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Number.isFinite(a[i])) {
      if (!(Object.is(a[i], b[i]) || (Number.isNaN(a[i]) && Number.isNaN(b[i])))) n = Infinity;
      continue;
    }
    s += a[i] * a[i];
    const d = a[i] - b[i];
    n += Number.isFinite(d) ? d * d : Infinity;
  }
  if (n === 0) return Infinity;
  if (s === 0) return -Infinity;
  return 10 * Math.log10(s / n);
}

async function runAll(ort, sess, entry) {
  const types = lib.inputTypes(sess);
  const feeds = {};
  for (const inp of entry.inputs) {
    const x = lib.readNpy(inp.npy);
    const want = (types[inp.name] && types[inp.name].type) || x.type;
    feeds[inp.name] = new ort.Tensor(want, lib.convert(x.data, x.type, want), x.shape.slice(1));
  }
  const res = await sess.run(feeds);
  const out = {};
  for (const o of sess.outputNames) {
    if (res[o].type === 'string') continue;
    out[o] = lib.toF64(res[o]);
  }
  return out;
}

async function main() {
  const manifest = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const { ort } = lib.loadOrt();
  const tally = { compared: 0, identical: 0, under_30_db: 0, ort_refuses_float: 0, findings: 0 };
  for (const e of manifest) {
    let fsess;
    let fout;
    try {
      fsess = await lib.session(ort, e.float, 'all');
      fout = await runAll(ort, fsess, e);
    } catch (err) {
      tally.ort_refuses_float++;
      continue;
    }
    let qout;
    try {
      const qsess = await lib.session(ort, e.quantized, 'all');
      qout = await runAll(ort, qsess, e);
    } catch (err) {
      tally.findings++;
      console.log(JSON.stringify({ model: e.name, config: e.config, finding: String(err.message || err).slice(0, 300) }));
      continue;
    }
    tally.compared++;
    let worst = Infinity;
    for (const o of Object.keys(fout)) {
      if (!qout[o] || qout[o].length !== fout[o].length) {
        worst = -Infinity;
        continue;
      }
      worst = Math.min(worst, sqnr(fout[o], qout[o]));
    }
    if (worst === Infinity) tally.identical++;
    else if (worst < 30) {
      tally.under_30_db++;
      console.log(JSON.stringify({ model: e.name, config: e.config, worst_sqnr_db: Number(worst.toFixed(1)) }));
    }
  }
  console.log(JSON.stringify({ summary: tally }));
  process.exit(tally.findings > 0 ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
