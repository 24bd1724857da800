#!/usr/bin/python3
"""A training job that hands its model to quantd.

Trains a tiny CNN on scikit-learn's bundled digits (or synthetic data) for a
few steps, exports it to ONNX, streams the inputs of the last training
batches it saw to quantd's Calibrate (the activations observed on real
data), then quantizes the model with STATIC_RANGE using those ranges and
saves the int8 model. See README.md.
"""

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Iterator, List, Tuple

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def load_data(kind: str, seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """float32 images [N,1,8,8] in [0,1] and int64 labels: train and test."""
    rng = np.random.default_rng(seed)
    if kind == "digits":
        from sklearn.datasets import load_digits  # Ships with scikit-learn.
        digits = load_digits()
        x = (digits.images / 16.0).astype(np.float32)[:, None]
        y = digits.target.astype(np.int64)
    else:
        # Ten random prototypes plus noise: learnable, no dataset needed.
        prototypes = rng.uniform(0, 1, size=(10, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, 10, size=1800).astype(np.int64)
        x = np.clip(prototypes[y] + rng.normal(0, 0.2, size=(1800, 1, 8, 8)), 0, 1)
        x = x.astype(np.float32)
    order = rng.permutation(len(x))
    test, train = order[:360], order[360:]
    return x[train], y[train], x[test], y[test]


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, steps: int, batch_size: int,
          record_last: int, seed: int) -> List[np.ndarray]:
    """Trains for `steps` steps; returns the inputs of the last `record_last`
    batches, as the job observed them (what calibration should see)."""
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    observed: List[np.ndarray] = []
    model.train()
    for step in range(steps):
        idx = rng.choice(len(x), size=batch_size, replace=False)
        xb, yb = torch.from_numpy(x[idx]), torch.from_numpy(y[idx])
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        if step >= steps - record_last:
            observed.append(xb.numpy().copy())
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    return observed


def export_onnx(model: nn.Module) -> bytes:
    model.eval()
    buffer = io.BytesIO()
    torch.onnx.export(model, torch.zeros(1, 1, 8, 8), buffer, input_names=["input"],
                      output_names=["logits"], opset_version=13,
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    return buffer.getvalue()


def print_report(r) -> None:
    """One line per quantized tensor, as the server reports it."""
    # Activations have no stored values, hence no SQNR: their scale comes
    # from the calibrated range.
    error = f"SQNR {r.sqnr_db:6.2f} dB" if r.num_elements > 0 else "calibrated range"
    print(f"  {r.tensor_name:<20} {r.op_type:<8} {r.scheme.storage_type:<5} "
          f"scale {r.scale_min:.3g}..{r.scale_max:.3g}  {error}", flush=True)


def ort_accuracy(model_path: str, x_path: str, y_path: str) -> float:
    """Accuracy under ONNX Runtime (scripts/ort_eval.js, onnxruntime-node)."""
    out = subprocess.run(["node", os.path.join(REPO, "scripts", "ort_eval.js"), "accuracy",
                          "--model", model_path, "--x", x_path, "--y", y_path],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["accuracy"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051", help="quantd gRPC target")
    parser.add_argument("--output", required=True, help="where to write the int8 ONNX model")
    parser.add_argument("--float_output", help="also write the float ONNX model here")
    parser.add_argument("--data", choices=["digits", "synthetic"], default="digits")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--calibration_batches", type=int, default=8,
                        help="stream the inputs of the last N training batches to Calibrate")
    parser.add_argument("--calibration_method", default="min_max")
    parser.add_argument("--token_file", help="bearer token for a server with --auth_token_file")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--ort_eval", action="store_true",
                        help="compare float and int8 accuracy with ONNX Runtime (node)")
    args = parser.parse_args()

    # Imported here so --help works without the generated stubs.
    from quantd_client import QuantdClient

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_data(args.data, args.seed)
    model = make_model()
    start = time.perf_counter()
    observed = train(model, x_train, y_train, args.steps, args.batch_size,
                     args.calibration_batches, args.seed)
    model.eval()
    with torch.no_grad():
        float_acc = (model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean()
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.2f} s; "
          f"float test accuracy (torch) {float_acc:.4f}")
    onnx_bytes = export_onnx(model)

    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    with QuantdClient(args.server, timeout=args.timeout, token=token) as client:
        # The job streams what it observed, batch by batch: the generator is
        # pulled only as fast as the server takes the batches.
        def batches() -> Iterator[dict]:
            for xb in observed:
                yield {"input": xb}

        start = time.perf_counter()
        calibration = client.calibrate(onnx_bytes, batches(), method=args.calibration_method)
        print(f"calibrated {calibration.batch_count} batches "
              f"({len(calibration.ranges)} tensor ranges, {calibration.method}) in "
              f"{time.perf_counter() - start:.3f} s")
        start = time.perf_counter()
        result = client.quantize(
            onnx_bytes, {"quantization_method": {"experimental_method": "STATIC_RANGE"}},
            calibration=calibration,
            on_tensor_report=print_report)
        print(f"quantized in {time.perf_counter() - start:.3f} s: "
              f"{result.summary.quantized_tensors} tensors, "
              f"{result.summary.quantized_nodes} nodes, "
              f"weights {result.summary.weight_bytes_before} -> "
              f"{result.summary.weight_bytes_after} bytes, "
              f"model {result.summary.input_bytes} -> {result.summary.output_bytes} bytes")
    result.save(args.output)
    print(f"wrote {args.output}")
    if args.float_output:
        with open(args.float_output, "wb") as f:
            f.write(onnx_bytes)

    if args.ort_eval:
        if shutil.which("node") is None:
            print("--ort_eval: node not found", file=sys.stderr)
            return 1
        with tempfile.TemporaryDirectory() as tmp:
            float_path = os.path.join(tmp, "float.onnx")
            with open(float_path, "wb") as f:
                f.write(onnx_bytes)
            x_path, y_path = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
            np.save(x_path, x_test)
            np.save(y_path, y_test)
            print(f"ONNX Runtime test accuracy: float {ort_accuracy(float_path, x_path, y_path):.4f}, "
                  f"int8 {ort_accuracy(args.output, x_path, y_path):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
