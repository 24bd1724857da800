#!/usr/bin/python3
"""Writes the torch golden values read by tests/core/executor/ops_activation_test.cc
and ops_elementwise_test.cc.

Run with Debian's interpreter (python3-torch 1.13 lives there):

    /usr/bin/python3 scripts/make_activation_golden.py

Output: tests/data/executor_ops/golden.txt. '#' lines are comments; every
other line is one array: `<case> <name> <dims|scalar> <values...>`, dims
comma-separated. A case has its inputs (x, slope, y2, ...) and its expected
output `out`. Floats are printed with 9 significant digits (float32
round-trips exactly); 16-bit float results are given as their bits (`bits`).

Torch (torch.nn.functional and friends) is the independent oracle; numpy
gives the one thing torch does not do in one rounding: double -> float16.
"""

import math
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                   "tests", "data", "executor_ops", "golden.txt")

lines = []


def put(case, name, arr, as_int=False, as_double=False):
    a = np.asarray(arr)
    dims = ",".join(str(d) for d in a.shape) if a.ndim else "scalar"
    if as_int:
        vals = " ".join(str(int(v)) for v in a.ravel())
    elif as_double:
        vals = " ".join("%.17g" % float(v) for v in a.ravel())
    else:
        vals = " ".join("%.9g" % float(np.float32(v)) for v in a.ravel())
    lines.append("%s %s %s %s" % (case, name, dims, vals))


def unary(case, x, fn):
    t = torch.tensor(x, dtype=torch.float32)
    put(case, "x", x)
    put(case, "out", fn(t).numpy())


rng = np.random.default_rng(20240611)
# Normal values plus the edges: zeros of both signs, tiny and large
# magnitudes, the kinks of the hard activations (+-3, +-1, +-0.5).
edges = [0.0, -0.0, 1e-4, -1e-4, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 2.5,
         -2.5, 10.0, -10.0, 25.0, -25.0, 90.0, -90.0]
X = np.concatenate([rng.normal(0, 3, 46), edges]).astype(np.float32)

unary("hardsigmoid_torch", X, F.hardsigmoid)
unary("hardswish", X, F.hardswish)
unary("gelu", X, F.gelu)
unary("gelu_tanh", X, lambda t: F.gelu(t, approximate="tanh"))
unary("elu_a05", X, lambda t: F.elu(t, alpha=0.5))
unary("selu", X, F.selu)
unary("celu_a2", X, lambda t: F.celu(t, alpha=2.0))
unary("leaky_relu_a02", X, lambda t: F.leaky_relu(t, 0.2))
unary("softplus", X, F.softplus)
unary("softsign", X, F.softsign)
unary("mish", X, F.mish)
unary("thresholded_relu_a1", X, lambda t: F.threshold(t, 1.0, 0.0))
unary("softshrink_05", X, lambda t: F.softshrink(t, 0.5))
unary("hardshrink_05", X, lambda t: F.hardshrink(t, 0.5))

# PRelu with a per-channel slope (ONNX: slope [C,1,1] broadcast to NCHW).
xp = rng.normal(0, 2, (2, 3, 2, 4)).astype(np.float32)
wp = np.array([0.25, -0.5, 2.0], dtype=np.float32)
put("prelu_channel", "x", xp)
put("prelu_channel", "slope", wp.reshape(3, 1, 1))
put("prelu_channel", "out",
    F.prelu(torch.tensor(xp), torch.tensor(wp)).numpy())

# LogSoftmax along an axis (opset 13) and coerced to 2-D (opset < 13).
xl = (rng.normal(0, 4, (2, 3, 4))).astype(np.float32)
xl[1, 2, 3] = 80.0  # exp would overflow without the max shift.
put("log_softmax_axis1", "x", xl)
put("log_softmax_axis1", "out", F.log_softmax(torch.tensor(xl), dim=1).numpy())
put("log_softmax_2d_axis1", "x", xl)
put("log_softmax_2d_axis1", "out",
    F.log_softmax(torch.tensor(xl).reshape(2, 12), dim=1).reshape(2, 3, 4)
    .numpy())
put("hardmax_axis2", "x", xl)
put("hardmax_axis2", "out",
    F.one_hot(torch.tensor(xl).argmax(dim=2), 4).float().numpy())

# Elementwise math.
R = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.4, -2.6, 7.0,
              -0.0, 1e6 + 0.5], dtype=np.float32)
unary("round", R, torch.round)  # Half to even.
unary("floor", X, torch.floor)
unary("ceil", X, torch.ceil)
unary("reciprocal", X[:46], torch.reciprocal)
U = rng.uniform(-0.99, 0.99, 24).astype(np.float32)
for name, fn in [("sin", torch.sin), ("cos", torch.cos), ("tan", torch.tan),
                 ("asin", torch.asin), ("acos", torch.acos),
                 ("atan", torch.atan), ("sinh", torch.sinh),
                 ("cosh", torch.cosh), ("asinh", torch.asinh),
                 ("atanh", torch.atanh)]:
    unary(name, U, fn)
unary("acosh", (1.0 + np.abs(X[:24])).astype(np.float32), torch.acosh)

# Mod: fmod = 1 is torch.fmod (dividend's sign), fmod = 0 torch.remainder
# (divisor's sign).
a = np.array([-7, -5, -4, -1, 0, 1, 4, 5, 7, 9, -9, 13], dtype=np.int64)
b = np.array([3, -3, 2, 5, -7, -2, 3, -5, 2, -4, 4, 6], dtype=np.int64)
for case, fn in [("mod_int_python", torch.remainder),
                 ("mod_int_fmod", torch.fmod)]:
    put(case, "x", a, as_int=True)
    put(case, "y2", b, as_int=True)
    put(case, "out", fn(torch.tensor(a), torch.tensor(b)).numpy(), as_int=True)
af = rng.normal(0, 5, 12).astype(np.float32)
bf = np.array([3, -3, 2.5, -0.7, 1, -1, 4, 0.3, -5, 6, 2, -2],
              dtype=np.float32)
put("mod_float_fmod", "x", af)
put("mod_float_fmod", "y2", bf)
put("mod_float_fmod", "out", torch.fmod(torch.tensor(af), torch.tensor(bf)))

# 16-bit floats: float32 -> float16 / bfloat16 bits, round to nearest even
# (torch); double -> float16 in one rounding (numpy).
H = np.concatenate([
    X, rng.normal(0, 1e4, 8), rng.normal(0, 1e-6, 8),
    [65504.0, 65519.0, 65520.0, 1e6, -1e6, 6e-8, 3e-8, 2.9e-8,
     1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, float("inf"), float("-inf")]
]).astype(np.float32)
put("float_to_half", "x", H)
put("float_to_half", "bits",
    torch.tensor(H).half().view(torch.int16).numpy().astype(np.uint16),
    as_int=True)
put("float_to_bfloat16", "x", H)
put("float_to_bfloat16", "bits",
    torch.tensor(H).bfloat16().view(torch.int16).numpy().astype(np.uint16),
    as_int=True)

# Doubles whose float rounding lands on a float16 tie: one rounding (numpy)
# and double -> float -> float16 differ there.
D = np.concatenate([
    rng.normal(0, 100, 16),
    [1.0 + 2.0**-11 + 2.0**-40, 1.0 + 2.0**-11 - 2.0**-40,
     -(2.0 + 2.0**-10 + 2.0**-45), 65519.999999, 65520.0, 2.0**-25 + 2.0**-60,
     2.0**-25, 1e300, -1e-300, 0.0, -0.0, 6.097555160522461e-05,
     6.103515625e-05 - 2.0**-40, 5e-324]
]).astype(np.float64)
put("double_to_half", "x", D, as_double=True)
put("double_to_half", "bits", D.astype(np.float16).view(np.uint16),
    as_int=True)

os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w") as f:
    f.write("# Generated by scripts/make_activation_golden.py (torch %s, "
            "numpy %s). Do not edit.\n" % (torch.__version__, np.__version__))
    f.write("\n".join(lines) + "\n")
print("wrote %s (%d arrays)" % (OUT, len(lines)))
