#!/usr/bin/python3
"""Trains the small digits transformer: quantd's STATIC_RANGE transformer fixture.

  /usr/bin/python3 scripts/make_digits_transformer.py [--out_dir DIR] [--ort_check auto|require|skip]

Data: scikit-learn's bundled digits set, exactly as scripts/make_example_model.py
loads and splits it (pixel / 16, the same seeded permutation: the same 360
test samples and the same 64 calibration samples), but each 8x8 image is read
as a sequence of 8 rows of 8 pixels.

Architecture: Linear(8, 32) per row, plus a learned positional embedding
[1, 8, 32]; nn.TransformerEncoder of 2 layers (d_model 32, 4 heads,
feed-forward 64, ReLU, batch_first, post-norm); mean over the 8 positions;
Linear(32, 10).

Writes, under --out_dir (default <repo>/examples/digits_transformer):
  model.onnx   opset 14, input "input" [N,8,8] float32, output "logits" [N,10]
  test_x.npy   float32 [360,8,8]
  test_y.npy   int64   [360]
  calib_x.npy  float32 [64,8,8]  (training samples, for calibration)

Deterministic: fixed seeds, one thread, CPU only; about 20-40 s.
"""
import argparse
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

# The same accuracy and ORT check as the digits CNN (one copy of each).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_example_model import accuracy, ort_check  # noqa: E402

SEED = 20240601  # Same seed and split as scripts/make_example_model.py.
N_TEST = 360
N_CALIB = 64
EPOCHS = 40
BATCH = 32
LR = 2e-3


class DigitsTransformer(nn.Module):
    def __init__(self, d_model=32, heads=4, layers=2, ff=64, classes=10):
        super().__init__()
        self.embed = nn.Linear(8, d_model)
        self.pos = nn.Parameter(torch.zeros(1, 8, d_model))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x) + self.pos).mean(dim=1))


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out_dir", default=os.path.join(repo, "examples", "digits_transformer"))
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--ort_check", choices=["auto", "require", "skip"], default="auto",
                    help="check the exported model with onnxruntime-node via scripts/ort_eval.js")
    ap.add_argument("--ort_dir", default=None,
                    help="node_modules dir holding onnxruntime-node (default: <repo>/build/ort/node_modules)")
    args = ap.parse_args()

    t0 = time.time()
    torch.set_num_threads(1)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0).reshape(-1, 8, 8)
    y = digits.target.astype(np.int64)
    rng = np.random.RandomState(SEED)
    perm = rng.permutation(len(x))
    test_idx, train_idx = perm[:N_TEST], perm[N_TEST:]
    x_train, y_train = x[train_idx], y[train_idx]
    x_test, y_test = np.ascontiguousarray(x[test_idx]), np.ascontiguousarray(y[test_idx])
    x_calib = np.ascontiguousarray(x_train[:N_CALIB])

    model = DigitsTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    loss_fn = nn.CrossEntropyLoss()
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    g = torch.Generator().manual_seed(SEED)
    for epoch in range(args.epochs):
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
        sched.step()
        if epoch % 10 == 9 or epoch == args.epochs - 1:
            print(f"epoch {epoch + 1:3d}  train loss {total / len(xt):.4f}  "
                  f"test acc {accuracy(model, x_test, y_test):.4f}  ({time.time() - t0:.0f} s)",
                  flush=True)

    model.eval()
    acc = accuracy(model, x_test, y_test)

    os.makedirs(args.out_dir, exist_ok=True)
    onnx_path = os.path.join(args.out_dir, "model.onnx")
    # torch 1.13 takes the fused eval fast path (aten::_transformer_encoder_
    # layer_fwd, no ONNX export) only when grad is off: trace with grad on,
    # as scripts/make_transformer_model.py does. Dropout is 0, so the traced
    # graph is the eval-mode computation.
    with torch.enable_grad():
        torch.onnx.export(
            model, torch.from_numpy(x_test[:1]), onnx_path,
            opset_version=14,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
            do_constant_folding=True,
        )
    import onnx
    m = onnx.load(onnx_path)
    onnx.checker.check_model(m, full_check=True)
    ops = sorted({n.op_type for n in m.graph.node})

    np.save(os.path.join(args.out_dir, "test_x.npy"), x_test)
    np.save(os.path.join(args.out_dir, "test_y.npy"), y_test)
    np.save(os.path.join(args.out_dir, "calib_x.npy"), x_calib)

    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path)} bytes, ops {ops}), "
          f"test_x {x_test.shape}, test_y {y_test.shape}, calib_x {x_calib.shape}")
    print(f"float test accuracy (torch): {acc:.4f} ({int(round(acc * N_TEST))}/{N_TEST}); "
          f"{time.time() - t0:.1f} s in all")

    if args.ort_check != "skip":
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(x_test)).numpy()
        ok = ort_check(repo, args, onnx_path, torch_logits, acc)
        if ok is False or (ok is None and args.ort_check == "require"):
            return 1
    return 0




if __name__ == "__main__":
    sys.exit(main())
