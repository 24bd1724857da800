#!/usr/bin/env node
// derive_inputs.js: inputs of the corpus's audio models, made from the
// synthetic clips of make_inputs.py (build/corpus/_audio/*_audio.npy, 16 kHz,
// [clips, samples]) by running the FLOAT models in ONNX Runtime, as the
// real pipelines chain them:
//
//   oww_melspectrogram  calib_x / eval_x: 1 s chunks, int16 scale
//   oww_embedding       76x32 windows (stride 8 frames) of melspectrogram/10+2
//   oww_alexa, oww_hey_jarvis, oww_timer
//                       16 (34 for timer) consecutive embeddings, stride 2
//                       (mel and embeddings of the clips played back to back,
//                       as the continuous stream openWakeWord listens to)
//   silero_vad_v4/v5    calib_input [2K,512] windows, with the float model's
//                       recurrent state before each window, laid out so that a
//                       2-sample calibration batch reads [layers, 2, hidden]:
//                       file[2k+a, j] = state(window 2k+j)[a, 0]
//
//   node scripts/corpus/derive_inputs.js [--corpus build/corpus] [--ort_dir DIR]
'use strict';

const path = require('path');
const lib = require('./lib');

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

const CORPUS = path.resolve(arg('corpus', path.join(lib.REPO, 'build', 'corpus')));
const { ort } = lib.loadOrt(arg('ort_dir'));
const INT16 = 32767 * 0.6;

function clips(file) {
  const a = lib.readNpy(file);
  const [n, len] = a.shape;
  return Array.from({ length: n }, (_, i) => a.data.subarray(i * len, (i + 1) * len));
}

// Picks at most `max` rows evenly from a list of Float32Arrays.
function pick(rows, max) {
  if (rows.length <= max) return rows;
  const step = rows.length / max;
  return Array.from({ length: max }, (_, i) => rows[Math.floor(i * step)]);
}

function stack(rows, inner) {
  const per = inner.reduce((a, b) => a * b, 1);
  const out = new Float32Array(rows.length * per);
  rows.forEach((r, i) => out.set(r, i * per));
  return { data: out, shape: [rows.length, ...inner] };
}

function save(model, file, t) {
  lib.writeNpy(path.join(CORPUS, model, file), t.data, t.shape);
  console.log(`[derive] ${model}/${file} [${t.shape}]`);
}

async function owwFeatures(audio, mel, emb) {
  // Per clip: mel frames [F,32] -> embeddings [E,96] (one per 8 frames).
  const melWins = [];
  const embSeqs = [];
  for (const c of audio) {
    const x = Float32Array.from(c, (v) => v * INT16);
    const r = await mel.run({ input: new ort.Tensor('float32', x, [1, x.length]) });
    const o = r[mel.outputNames[0]];
    const F = Number(o.dims[2]);
    const spec = Float32Array.from(o.data, (v) => v / 10 + 2);
    const wins = [];
    for (let s = 0; s + 76 <= F; s += 8) wins.push(spec.subarray(s * 32, (s + 76) * 32));
    melWins.push(...wins);
    const embs = [];
    for (const w of wins) {
      const e = await emb.run({ [emb.inputNames[0]]: new ort.Tensor('float32', Float32Array.from(w), [1, 76, 32, 1]) });
      embs.push(Float32Array.from(e[emb.outputNames[0]].data));
    }
    embSeqs.push(embs);
  }
  return { melWins, embSeqs };
}

function embWindows(embSeqs, len, stride) {
  const rows = [];
  for (const seq of embSeqs) {
    for (let s = 0; s + len <= seq.length; s += stride) {
      const w = new Float32Array(len * 96);
      for (let k = 0; k < len; k++) w.set(seq[s + k], k * 96);
      rows.push(w);
    }
  }
  return rows;
}

// Silero VAD as published: `input` [batch, 512], a scalar sample rate `sr`
// and recurrent states [layers, batch, hidden]. Calibration windows are
// spread over the clips; each carries the state the float model had when
// it reached that window, laid out [layers, windows, hidden] (quantctl
// --sample_axis=NAME=1), and sr goes whole with every batch.
async function vadCalib(name, audio, states, maxWindows) {
  const sess = await lib.session(ort, path.join(CORPUS, name, 'model.onnx'));
  const sr = new ort.Tensor('int64', BigInt64Array.from([16000n]), []);
  const wins = [];
  const st = [];                           // per window: {in: Float32Array}
  for (const c of audio) {
    let cur = Object.fromEntries(states.map((s) => [s.in, new Float32Array(s.shape.reduce((a, b) => a * b, 1))]));
    for (let s = 0; s + 512 <= c.length; s += 512) {
      const w = Float32Array.from(c.subarray(s, s + 512));
      wins.push(w);
      st.push(cur);
      const feeds = { input: new ort.Tensor('float32', w, [1, 512]), sr };
      for (const S of states) feeds[S.in] = new ort.Tensor('float32', cur[S.in], S.shape);
      const r = await sess.run(feeds);
      cur = Object.fromEntries(states.map((S) => [S.in, Float32Array.from(r[S.out].data)]));
    }
  }
  const n = Math.min(wins.length, maxWindows);
  const idx = Array.from({ length: n }, (_, p) => Math.floor((p * wins.length) / n));
  save(name, 'calib_input.npy', stack(idx.map((i) => wins[i]), [512]));
  for (const S of states) {
    const [L, , H] = S.shape;                // [layers, 1, hidden]
    const out = new Float32Array(L * n * H);
    for (let a = 0; a < L; a++) {
      for (let p = 0; p < n; p++) out.set(st[idx[p]][S.in].subarray(a * H, (a + 1) * H), (a * n + p) * H);
    }
    save(name, `calib_${S.in}.npy`, { data: out, shape: [L, n, H] });
  }
  save(name, 'calib_sr.npy', { data: BigInt64Array.from([16000n]), shape: [] });
}

async function main() {
  const calibAudio = clips(path.join(CORPUS, '_audio', 'calib_audio.npy'));
  const evalAudio = clips(path.join(CORPUS, '_audio', 'eval_audio.npy'));

  // melspectrogram: 1 s chunks
  const chunks = (aud) => aud.flatMap((c) => [0, 1, 2].map((k) => Float32Array.from(c.subarray(k * 16000, (k + 1) * 16000), (v) => v * INT16)));
  save('oww_melspectrogram', 'calib_x.npy', stack(chunks(calibAudio), [16000]));
  save('oww_melspectrogram', 'eval_x.npy', stack(chunks(evalAudio), [16000]));

  const mel = await lib.session(ort, path.join(CORPUS, 'oww_melspectrogram', 'model.onnx'));
  const emb = await lib.session(ort, path.join(CORPUS, 'oww_embedding', 'model.onnx'));
  // openWakeWord listens to a continuous stream: the clips, one after the other.
  const concat = (aud) => { const s = new Float32Array(aud.reduce((a, c) => a + c.length, 0)); let o = 0; for (const c of aud) { s.set(c, o); o += c.length; } return [s]; };
  const cal = await owwFeatures(concat(calibAudio), mel, emb);
  const ev = await owwFeatures(concat(evalAudio), mel, emb);
  save('oww_embedding', 'calib_x.npy', stack(pick(cal.melWins, 32), [76, 32, 1]));
  save('oww_embedding', 'eval_x.npy', stack(pick(ev.melWins, 64), [76, 32, 1]));
  for (const [name, len] of [['oww_alexa', 16], ['oww_hey_jarvis', 16], ['oww_timer', 34]]) {
    save(name, 'calib_x.npy', stack(pick(embWindows(cal.embSeqs, len, 2), 24), [len, 96]));
    save(name, 'eval_x.npy', stack(pick(embWindows(ev.embSeqs, len, 2), 64), [len, 96]));
  }

  await vadCalib('silero_vad_v4', calibAudio, [
    { in: 'h', out: 'hn', shape: [2, 1, 64] }, { in: 'c', out: 'cn', shape: [2, 1, 64] }], 48);
  await vadCalib('silero_vad_v5', calibAudio, [{ in: 'state', out: 'stateN', shape: [2, 1, 128] }], 48);
}

main().catch((e) => { console.error(`derive_inputs: ${e.stack || e}`); process.exit(1); });
