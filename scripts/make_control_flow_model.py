#!/usr/bin/python3
"""Writes tests/data/executor/control_flow.onnx: a small CNN with real
control flow (opset 13), for checking quantd's executor against ONNX Runtime.

  x [N, 3, 8, 8] -> Relu(Conv) -> Loop (trip count 5, its condition turns
  false after iteration 2): Conv on the carried value, then an If on
  "iteration == 1" whose branches read outer values (the Loop body's Conv
  output and carried value, main-graph initializers): then = Relu(MatMul +
  Add), else = carried * Sigmoid(conv); scan output = spatial mean [N, 4].
  -> MatMul + Add head on the final value, a Scan (reverse direction, axis 1)
  with MatMul/Add/Relu over the stacked means, all concatenated: [N, 34].

Only x is an input, so scripts/ort_eval.js (one input, first output with a
leading batch axis) can run it. Weights are seeded random: the file is
reproducible. Usage: make_control_flow_model.py [OUT.onnx]
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
        "executor", "control_flow.onnx")
    rng = np.random.default_rng(7)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    inits = [
        init("W1", w(4, 3, 3, 3)), init("B1", w(4)),
        init("W2", w(4, 4, 3, 3)), init("B2", w(4)),
        init("Wm", w(8, 8)), init("Bm", w(1, 4, 1, 1)),
        init("W3", w(256, 10)), init("B3", w(10)),
        init("Wq", w(4, 4)), init("Bq", w(4) + 0.5),
        init("M", np.array(5, dtype=np.int64)),
        init("cond0", np.array(True)),
        init("one", np.array(1, dtype=np.int64)),
        init("two", np.array(2, dtype=np.int64)),
        init("zero", np.array(0, dtype=np.int64)),
    ]

    # If branches: no inputs, read conv / h_in (Loop body values) and Wm, Bm
    # (main-graph initializers) by name.
    then_branch = helper.make_graph(
        [
            helper.make_node("MatMul", ["conv", "Wm"], ["t_mm"]),
            helper.make_node("Add", ["t_mm", "h_in"], ["t_add"]),
            helper.make_node("Add", ["t_add", "Bm"], ["t_bias"]),
            helper.make_node("Relu", ["t_bias"], ["t_out"]),
        ],
        "then_body", [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    else_branch = helper.make_graph(
        [
            helper.make_node("Sigmoid", ["conv"], ["e_sig"]),
            helper.make_node("Mul", ["e_sig", "h_in"], ["e_out"]),
        ],
        "else_body", [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])

    loop_body = helper.make_graph(
        [
            helper.make_node("Conv", ["h_in", "W2", "B2"], ["conv"],
                             pads=[1, 1, 1, 1]),
            helper.make_node("Equal", ["i", "one"], ["is_one"]),
            helper.make_node("If", ["is_one"], ["h_next"],
                             then_branch=then_branch,
                             else_branch=else_branch),
            # Continue while i != 2: three of the five allowed iterations.
            helper.make_node("Equal", ["i", "two"], ["is_two"]),
            helper.make_node("Cast", ["is_two"], ["is_two_i"],
                             to=TensorProto.INT64),
            helper.make_node("Equal", ["is_two_i", "zero"], ["c_out"]),
            helper.make_node("ReduceMean", ["h_next"], ["mean"], axes=[2, 3],
                             keepdims=0),
        ],
        "loop_body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_next", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("mean", TensorProto.FLOAT,
                                          ["N", 4]),
        ])

    # ONNX Runtime wants the rank of Scan body outputs declared.
    scan_body = helper.make_graph(
        [
            helper.make_node("MatMul", ["s_in", "Wq"], ["s_mm"]),
            helper.make_node("Add", ["s_mm", "Bq"], ["s_add"]),
            helper.make_node("Relu", ["s_add"], ["s_out"]),
        ],
        "scan_body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, ["N", 4])])

    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["h0"]),
        helper.make_node("Loop", ["M", "cond0", "h0"], ["h_final", "means"],
                         body=loop_body),
        helper.make_node("Flatten", ["h_final"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "W3"], ["mm"]),
        helper.make_node("Add", ["mm", "B3"], ["logits"]),
        # means [3, N, 4] -> [N, 3, 4]
        helper.make_node("Transpose", ["means"], ["means_t"], perm=[1, 0, 2]),
        helper.make_node("Flatten", ["means_t"], ["means_flat"], axis=1),
        # Over the 3 steps of axis 1, last step first; outputs stacked on
        # axis 1 again: [N, 3, 4].
        helper.make_node("Scan", ["means_t"], ["scanned"], body=scan_body,
                         num_scan_inputs=1, scan_input_axes=[1],
                         scan_input_directions=[1], scan_output_axes=[1]),
        helper.make_node("Flatten", ["scanned"], ["scanned_flat"], axis=1),
        helper.make_node("Concat", ["logits", "means_flat", "scanned_flat"],
                         ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "control_flow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                       ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 34])],
        inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="quantd make_control_flow_model.py")
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, out)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
