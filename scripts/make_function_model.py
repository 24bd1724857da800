#!/usr/bin/python3
"""Trains a digits MLP whose residual blocks are exported as ONNX local functions.

Tests of func_name scoping (unit_wise_quantization_precision) and of local
function inlining use it: PyTorch's export_modules_as_functions writes each
Block call as a node of op type "Block" (domain "__main__") whose body is a
FunctionProto; the block's weights are inputs of the call.

Architecture (digits, the split and training of make_example_model.py):
  Flatten, Linear(64, 64) "stem", ReLU
  Block b1: Gemm(64x64) -> Relu -> Add(residual)     (local function "Block")
  Block b2: the same function, its own weights
  Linear(64, 10) "head"                              (640 weights, stays float
                                                      by default)

Writes tests/data/passes/function_digits.onnx (opset 15, IR 8, about 40 KB).
The test inputs are those of examples/digits (same split). Checks the export
in onnxruntime-node (it inlines local functions) against torch.
Must be run with Debian's Python: /usr/bin/python3 scripts/make_function_model.py
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_example_model as digits  # noqa: E402


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.stem = nn.Linear(64, 64)
        self.b1 = Block(64)
        self.b2 = Block(64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h = torch.relu(self.stem(self.flatten(x)))
        return self.head(self.b2(self.b1(h)))


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "tests", "data", "passes",
                                                  "function_digits.onnx"))
    ap.add_argument("--epochs", type=int, default=digits.EPOCHS)
    args = ap.parse_args()

    digits.seed_everything()
    x_train, y_train, x_test, y_test, _ = digits.digits_split()
    model = Net()
    digits.train(model, x_train, y_train, x_test, y_test, args.epochs)
    acc = digits.accuracy(model, x_test, y_test)

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    torch.onnx.export(
        model, torch.from_numpy(x_test[:1]), args.out,
        opset_version=15,
        input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
        export_modules_as_functions={Block},
    )
    import onnx
    m = onnx.load(args.out)
    onnx.checker.check_model(m, full_check=True)
    assert [f.name for f in m.functions] == ["Block"], [f.name for f in m.functions]
    calls = [n.name for n in m.graph.node if n.op_type == "Block"]
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes); calls of Block: {calls}; "
          f"function body: {[(n.op_type, n.name) for n in m.functions[0].node]}")
    print(f"float test accuracy (torch): {acc:.4f}")

    node = shutil.which("node")
    if node is None:
        print("ORT check skipped: node not found")
        return 0
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x_test)).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        xf = os.path.join(tmp, "x.npy")
        out = os.path.join(tmp, "logits.npy")
        np.save(xf, x_test)
        r = subprocess.run([node, os.path.join(repo, "scripts", "ort_eval.js"), "run",
                            "--model", args.out, "--x", xf, "--out", out,
                            "--ort_dir", os.path.join(repo, "build", "ort", "node_modules")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"ORT check FAILED: {r.stderr.strip()}", file=sys.stderr)
            return 1
        diff = float(np.abs(np.load(out) - torch_logits).max())
    print(f"max |ORT - torch| logit diff {diff:.2e}")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
