#!/usr/bin/python3
"""Exports a small nn.TransformerEncoder classifier to ONNX: the executor's
transformer fixture (tests/core/executor/ort_parity_test.cc).

  /usr/bin/python3 scripts/make_transformer_model.py OUT_DIR [--opset 14] [--seed 0]

Writes OUT_DIR/transformer_opset<N>.onnx (input "x" [N, 8, 32] float32, dynamic batch;
output "logits" [N, 4]) and OUT_DIR/transformer_x.npy (a [2, 8, 32] input).
d_model 32, 2 heads, 2 layers, feed-forward 64, batch_first, mean-pooled
classification head; random weights with a fixed seed, eval mode. Small
enough to commit (about 100 KB) under tests/data/executor/.
"""
import argparse
import os
import sys

import numpy as np
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, d_model=32, heads=2, layers=2, ff=64, classes=4):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=ff, dropout=0.0, batch_first=True,
            activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    model = Classifier().eval()
    x = torch.randn(2, 8, 32)
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, f"transformer_opset{args.opset}.onnx")
    # The fused eval fast path (aten::_transformer_encoder_layer_fwd) has no
    # ONNX export; torch only takes it when grad is off, so trace with grad on.
    with torch.enable_grad():
        torch.onnx.export(
            model, x, path, opset_version=args.opset,
            input_names=["x"], output_names=["logits"],
            dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}},
            do_constant_folding=True)
    np.save(os.path.join(args.out_dir, "transformer_x.npy"), x.numpy().astype(np.float32))

    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    ops = sorted({n.op_type for n in m.graph.node})
    print(f"wrote {path}: {os.path.getsize(path)} bytes, opset {args.opset}, ops {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
