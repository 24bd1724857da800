#!/usr/bin/python3
"""Writes the control-flow model the subgraph-body quantization tests use.

  x[N,16] -> MatMul(W0) "m0" -> h
  cond = mean(x) <= 0
  If "branch" (cond):
    then: MatMul(h, W1) "then_mm" -> Relu          (W1: a main-graph initializer)
    else: MatMul(h, W2) "else_mm"                  (W2: an initializer of the branch)
  Loop "loop" (3 trips), carried v:
    body: MatMul(v, W3) "loop_mm" -> Add(b3) -> Tanh  (W3, b3 from the main graph)
  MatMul(v_final, W4) "m_out" -> y[N,8]

Weights are 16x16 (256 elements: tests set min_num_elements_for_weights to
quantize them). Also writes 64 inputs (both signs of the mean, so both
branches run) and 64 calibration inputs. Deterministic (fixed seed).
Writes tests/data/passes/control_flow.onnx, control_flow_x.npy and
control_flow_calib.npy. Checked with onnx.checker; run with
/usr/bin/python3 scripts/make_control_flow_quant_model.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20261130


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.join(repo, "tests", "data", "passes")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.RandomState(SEED)

    def w(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.randn(*shape) * scale).astype(np.float32), name)

    f = TensorProto.FLOAT
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["h", "W1"], ["t"], name="then_mm"),
         helper.make_node("Relu", ["t"], ["t_relu"], name="then_relu")],
        "then", [], [helper.make_tensor_value_info("t_relu", f, ["N", 16])])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["h", "W2"], ["e"], name="else_mm")],
        "else", [], [helper.make_tensor_value_info("e", f, ["N", 16])],
        initializer=[w("W2", (16, 16))])
    loop_body = helper.make_graph(
        [helper.make_node("MatMul", ["v_in", "W3"], ["u"], name="loop_mm"),
         helper.make_node("Add", ["u", "b3"], ["ub"], name="loop_add"),
         helper.make_node("Tanh", ["ub"], ["v_out"], name="loop_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond")],
        "loop_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", f, ["N", 16])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", f, ["N", 16])])
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["h"], name="m0"),
        # cond = mean(x) <= 0, from ops the executor runs.
        helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", keepdims=0),
        helper.make_node("Relu", ["mean"], ["mean_pos"], name="mean_relu"),
        helper.make_node("Equal", ["mean_pos", "zero"], ["cond"], name="not_positive"),
        helper.make_node("If", ["cond"], ["branch_out"], name="branch",
                         then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "branch_out"], ["v_final"], name="loop",
                         body=loop_body),
        helper.make_node("MatMul", ["v_final", "W4"], ["y"], name="m_out"),
    ]
    graph = helper.make_graph(
        nodes, "control_flow",
        [helper.make_tensor_value_info("x", f, ["N", 16])],
        [helper.make_tensor_value_info("y", f, ["N", 8])],
        initializer=[w("W0", (16, 16)), w("W1", (16, 16)), w("W3", (16, 16)),
                     w("b3", (16,), 0.1), w("W4", (16, 8)),
                     numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                     numpy_helper.from_array(np.array(3, np.int64), "trips")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="quantd-tests")
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(out_dir, "control_flow.onnx")
    onnx.save(model, path)

    # One sample per run (the mean covers the whole batch): the tests feed
    # these one at a time, half with a positive mean, half negative.
    x = rng.randn(64, 16).astype(np.float32)
    x[::2] += 0.5
    x[1::2] -= 0.5
    np.save(os.path.join(out_dir, "control_flow_x.npy"), x)
    calib = rng.randn(64, 16).astype(np.float32)
    calib[::2] += 0.5
    calib[1::2] -= 0.5
    np.save(os.path.join(out_dir, "control_flow_calib.npy"), calib)
    sums = x.mean(1)
    print(f"wrote {path} ({os.path.getsize(path)} bytes); x {x.shape} "
          f"({int((sums > 0).sum())} positive means), calib {calib.shape}")


if __name__ == "__main__":
    main()
