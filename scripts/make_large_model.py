#!/usr/bin/python3
"""Writes an LLM-shaped ONNX model of several GB, saved with external data.

    /usr/bin/python3 scripts/make_large_model.py OUT_DIR [--dtype float32|float16]
        [--gib 3] [--hidden 4096] [--ffn 16384] [--seed 1]

OUT_DIR/model.onnx + OUT_DIR/model.onnx.data (every weight in the data file,
64-byte aligned, as onnx.save_model(save_as_external_data=True) lays it out)
and OUT_DIR/x.npy, an input batch [4, hidden] (float64; ort_eval.js casts it). The graph is a stack of MLP
blocks, x = x + MatMul(Relu(MatMul(x, W_up[hidden, ffn])), W_down[ffn, hidden]),
enough blocks for --gib GiB of weights; a model over 2 GiB cannot be one
protobuf message, which is what it is for (issue 13, goal 5). The weights are
Gaussian with variance 1/fan_in (activations keep their scale through the
stack) and written block by block, so generating takes little memory.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

ALIGN = 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    ap.add_argument("--gib", type=float, default=3.0)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    np_type = np.float32 if args.dtype == "float32" else np.float16
    onnx_type = TensorProto.FLOAT if args.dtype == "float32" else TensorProto.FLOAT16
    d, f = args.hidden, args.ffn
    block_bytes = 2 * d * f * np.dtype(np_type).itemsize
    blocks = max(1, int(np.ceil(args.gib * (1 << 30) / block_bytes)))
    os.makedirs(args.out, exist_ok=True)
    data_name = "model.onnx.data"
    rng = np.random.default_rng(args.seed)

    nodes, initializers = [], []
    x = "x"
    offset = 0
    with open(os.path.join(args.out, data_name), "wb") as data:

        def weight(name, rows, cols):
            nonlocal offset
            pad = (-offset) % ALIGN
            data.write(b"\0" * pad)
            offset += pad
            w = rng.standard_normal((rows, cols), dtype=np.float32)
            w *= 1.0 / np.sqrt(rows)
            raw = w.astype(np_type).tobytes()
            data.write(raw)
            t = TensorProto()
            t.name = name
            t.data_type = onnx_type
            t.dims.extend([rows, cols])
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", data_name), ("offset", str(offset)),
                         ("length", str(len(raw)))):
                e = t.external_data.add()
                e.key, e.value = k, v
            offset += len(raw)
            initializers.append(t)
            return name

        for b in range(blocks):
            up = weight(f"block{b}.up", d, f)
            down = weight(f"block{b}.down", f, d)
            nodes += [
                helper.make_node("MatMul", [x, up], [f"h{b}"], name=f"up{b}"),
                helper.make_node("Relu", [f"h{b}"], [f"r{b}"], name=f"relu{b}"),
                helper.make_node("MatMul", [f"r{b}", down], [f"y{b}"],
                                 name=f"down{b}"),
                helper.make_node("Add", [x, f"y{b}"], [f"x{b + 1}"],
                                 name=f"add{b}"),
            ]
            x = f"x{b + 1}"
    nodes.append(helper.make_node("Identity", [x], ["out"], name="out"))
    graph = helper.make_graph(
        nodes, "llm_shaped_mlp",
        [helper.make_tensor_value_info("x", onnx_type, ["n", d])],
        [helper.make_tensor_value_info("out", onnx_type, ["n", d])],
        initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="quantd make_large_model.py")
    model.ir_version = 8
    with open(os.path.join(args.out, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    np.save(os.path.join(args.out, "x.npy"),
            rng.standard_normal((4, d)))  # float64: ort_eval casts it.
    print(f"{args.out}: {blocks} blocks, {len(initializers)} weights, "
          f"{offset / 1e9:.2f} GB of {args.dtype} weights")


if __name__ == "__main__":
    main()
