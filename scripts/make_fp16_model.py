#!/usr/bin/python3
"""Writes the float16 model that ops_activation_test.cc runs in the executor
and in ONNX Runtime: tests/data/executor_ops/fp16_cnn.onnx and its input
fp16_cnn_x.npy (float32).

Run with Debian's interpreter (python3-onnx, python3-numpy):

    /usr/bin/python3 scripts/make_fp16_model.py

The graph takes float32, casts to FLOAT16 and computes in FLOAT16 from there
(all weights are FLOAT16 initializers): Conv -> HardSwish -> PRelu -> Conv ->
Add (residual) -> Elu -> HardSigmoid * x -> GlobalAveragePool -> Flatten ->
Gemm -> Gelu -> Sum(y, Softplus(y), Mish(y)) -> LogSoftmax; a BFLOAT16
initializer joins through Cast. The output is cast back to float32 (so
ort_eval.js can write it). Opset 20 (Gelu). The onnx 1.12 checker does not
know opset 20, so it is not run here; ONNX Runtime loads the model.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                       "tests", "data", "executor_ops")

rng = np.random.default_rng(7)


def f16(name, shape, scale):
    return nh.from_array(
        (rng.normal(0, scale, shape)).astype(np.float16), name)


def bf16(name, values):
    # numpy has no bfloat16: the top 16 bits of float32 (these values are
    # exact in bfloat16).
    f = np.asarray(values, dtype=np.float32)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)
    t = h.make_tensor(name, TP.BFLOAT16, f.shape, bits.tobytes(), raw=True)
    return t


inits = [
    f16("w1", (8, 3, 3, 3), 0.4),
    f16("b1", (8,), 0.1),
    nh.from_array(np.array([0.25, -0.1, 0.5, 0.05, 0.3, 0.2, -0.2, 0.1],
                           dtype=np.float16).reshape(8, 1, 1), "slope"),
    f16("w2", (8, 8, 3, 3), 0.2),
    f16("b2", (8,), 0.1),
    f16("wg", (8, 10), 0.5),
    f16("bg", (10,), 0.1),
    bf16("shift_bf16", [0.5, -0.25, 0.0, 1.0, 0.125, -1.0, 0.75, 0.0, 0.25,
                        -0.5]),
]

nodes = [
    h.make_node("Cast", ["x"], ["xh"], to=TP.FLOAT16),
    h.make_node("Conv", ["xh", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
    h.make_node("HardSwish", ["c1"], ["a1"]),
    h.make_node("PRelu", ["a1", "slope"], ["p1"]),
    h.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
    h.make_node("Add", ["c2", "p1"], ["r"]),
    h.make_node("Elu", ["r"], ["e"], alpha=0.5),
    h.make_node("HardSigmoid", ["e"], ["gate"]),
    h.make_node("Mul", ["e", "gate"], ["m"]),
    h.make_node("GlobalAveragePool", ["m"], ["gap"]),
    h.make_node("Flatten", ["gap"], ["flat"]),
    h.make_node("Gemm", ["flat", "wg", "bg"], ["logits"]),
    h.make_node("Gelu", ["logits"], ["g"], approximate="tanh"),
    h.make_node("Softplus", ["g"], ["sp"]),
    h.make_node("Mish", ["g"], ["mi"]),
    h.make_node("Cast", ["shift_bf16"], ["shift"], to=TP.FLOAT16),
    h.make_node("Sum", ["g", "sp", "mi", "shift"], ["s"]),
    h.make_node("LogSoftmax", ["s"], ["ls"], axis=1),
    h.make_node("Cast", ["ls"], ["y"], to=TP.FLOAT),
]
graph = h.make_graph(
    nodes, "fp16_cnn",
    [h.make_tensor_value_info("x", TP.FLOAT, ["N", 3, 8, 8])],
    [h.make_tensor_value_info("y", TP.FLOAT, ["N", 10])], inits)
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 20)],
                     producer_name="make_fp16_model.py")
model.ir_version = 9

os.makedirs(OUT_DIR, exist_ok=True)
onnx.save(model, os.path.join(OUT_DIR, "fp16_cnn.onnx"))
x = rng.normal(0, 1, (6, 3, 8, 8)).astype(np.float32)
np.save(os.path.join(OUT_DIR, "fp16_cnn_x.npy"), x)
print("wrote fp16_cnn.onnx and fp16_cnn_x.npy to", os.path.normpath(OUT_DIR))
