#!/usr/bin/python3
"""Trains the small digits CNN used as quantd's example/test model.

Data: scikit-learn's bundled digits set (8x8 grey images, 1797 samples, no
download). Pixels are scaled to [0, 1] (pixel / 16). A fixed, seeded split
holds out 360 test samples; 64 training samples are saved for calibration.

Architecture (chosen so quantization has something to bite on, while the
default min_num_elements_for_weights=1024 leaves the first conv float):
  Conv2d(1,16,3,p=1)   144 weights  (< 1024, stays float)
  ReLU
  Conv2d(16,32,3,p=1)  4608 weights
  ReLU
  Flatten
  Linear(2048, 64)     131072 weights
  ReLU
  Linear(64, 10)       640 weights

Writes, under --out_dir (default <repo>/examples/digits):
  model.onnx   opset 13, input "input" [N,1,8,8] float32, output "logits" [N,10]
  test_x.npy   float32 [360,1,8,8]
  test_y.npy   int64   [360]
  calib_x.npy  float32 [64,1,8,8]  (training samples, for calibration)

Deterministic: fixed seeds, single thread, CPU only. Runs in a few seconds.
Must be run with Debian's Python: /usr/bin/python3 scripts/make_example_model.py
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

SEED = 20240601
N_TEST = 360
N_CALIB = 64
EPOCHS = 30
BATCH = 32
LR = 1e-3


def build_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((pred == y).mean())


def seed_everything():
    torch.set_num_threads(1)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)


def digits_split():
    """The fixed split: (x_train, y_train, x_test, y_test, x_calib), x as [N,1,8,8]."""
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    rng = np.random.RandomState(SEED)
    perm = rng.permutation(len(x))
    test_idx, train_idx = perm[:N_TEST], perm[N_TEST:]
    x_train, y_train = x[train_idx], y[train_idx]
    x_test, y_test = np.ascontiguousarray(x[test_idx]), np.ascontiguousarray(y[test_idx])
    x_calib = np.ascontiguousarray(x_train[:N_CALIB])
    return x_train, y_train, x_test, y_test, x_calib


def train(model, x_train, y_train, x_test, y_test, epochs):
    """Adam + cross-entropy in seeded mini-batches; leaves the model in eval mode."""
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    g = torch.Generator().manual_seed(SEED)
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(xt), generator=g)
        total = 0.0
        for i in range(0, len(xt), BATCH):
            idx = order[i:i + BATCH]
            opt.zero_grad()
            loss = loss_fn(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        if epoch % 10 == 9 or epoch == epochs - 1:
            print(f"epoch {epoch + 1:3d}  train loss {total / len(xt):.4f}  "
                  f"test acc {accuracy(model, x_test, y_test):.4f}", flush=True)
    model.eval()


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out_dir", default=os.path.join(repo, "examples", "digits"))
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--ort_check", choices=["auto", "require", "skip"], default="auto",
                    help="check the exported model with onnxruntime-node via scripts/ort_eval.js "
                         "(auto: skip with a note if node/ORT is unavailable)")
    ap.add_argument("--ort_dir", default=None,
                    help="node_modules dir holding onnxruntime-node (passed to ort_eval.js)")
    args = ap.parse_args()

    seed_everything()
    x_train, y_train, x_test, y_test, x_calib = digits_split()
    model = build_model()
    train(model, x_train, y_train, x_test, y_test, args.epochs)
    acc = accuracy(model, x_test, y_test)

    os.makedirs(args.out_dir, exist_ok=True)
    onnx_path = os.path.join(args.out_dir, "model.onnx")
    torch.onnx.export(
        model, torch.from_numpy(x_test[:1]), onnx_path,
        opset_version=13,
        input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
        do_constant_folding=True,
    )
    import onnx
    m = onnx.load(onnx_path)
    onnx.checker.check_model(m, full_check=True)

    np.save(os.path.join(args.out_dir, "test_x.npy"), x_test)
    np.save(os.path.join(args.out_dir, "test_y.npy"), y_test)
    np.save(os.path.join(args.out_dir, "calib_x.npy"), x_calib)

    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path)} bytes), "
          f"test_x {x_test.shape}, test_y {y_test.shape}, calib_x {x_calib.shape}")
    print(f"float test accuracy (torch): {acc:.4f} ({int(round(acc * N_TEST))}/{N_TEST})")

    if args.ort_check != "skip":
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(x_test)).numpy()
        ok = ort_check(repo, args, onnx_path, torch_logits, acc)
        if ok is False or (ok is None and args.ort_check == "require"):
            return 1
    return 0


def ort_check(repo, args, onnx_path, torch_logits, torch_acc):
    """Runs the exported model in onnxruntime-node; True ok, False mismatch, None skipped."""
    tool = os.path.join(repo, "scripts", "ort_eval.js")
    node = shutil.which("node")
    if node is None:
        print("ORT check skipped: node not found")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        xf = os.path.join(args.out_dir, "test_x.npy")
        yf = os.path.join(args.out_dir, "test_y.npy")
        out = os.path.join(tmp, "logits.npy")
        extra = ["--ort_dir", args.ort_dir] if args.ort_dir else []
        r = subprocess.run([node, tool, "accuracy", "--model", onnx_path, "--x", xf, "--y", yf] + extra,
                           capture_output=True, text=True)
        if r.returncode != 0:
            msg = r.stderr.strip()
            if "cannot load onnxruntime-node" in msg and args.ort_check == "auto":
                print("ORT check skipped: onnxruntime-node not found (run scripts/setup.sh or set NODE_PATH)")
                return None
            print(f"ORT check FAILED: {msg}", file=sys.stderr)
            return False
        res = json.loads(r.stdout)
        r2 = subprocess.run([node, tool, "run", "--model", onnx_path, "--x", xf, "--out", out] + extra,
                            capture_output=True, text=True)
        if r2.returncode != 0:
            print(f"ORT check FAILED: {r2.stderr.strip()}", file=sys.stderr)
            return False
        ort_logits = np.load(out)
    max_diff = float(np.abs(ort_logits - torch_logits).max())
    same_pred = bool((ort_logits.argmax(1) == torch_logits.argmax(1)).all())
    print(f"float test accuracy ({res['checked_by']}): {res['accuracy']:.4f} "
          f"({res['correct']}/{res['n']}); max |ORT - torch| logit diff {max_diff:.2e}")
    if abs(res["accuracy"] - torch_acc) > 1e-6 or not same_pred or max_diff > 1e-3:
        print("ORT check FAILED: onnxruntime-node disagrees with torch", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
