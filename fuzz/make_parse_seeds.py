#!/usr/bin/python3
"""Writes the seed corpus of the ParseModel fuzzer: fuzz/corpus/parse_model/.

Run with Debian's python3-onnx:  /usr/bin/python3 fuzz/make_parse_seeds.py

Small models (a few hundred bytes each; the fuzzer runs ParseModel with
pieces of 1 and 16 bytes, so a 64-byte raw_data is already "large") plus
wire-level variants built by hand: the shapes the walker in
core/graph/model_io.cc decides on, and the regression inputs found by
fuzzing (regressions()), so rerunning the script keeps them.
"""

import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "parse_model")


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, payload):
    """One field on the wire; payload is the value bytes (varint, fixed) or
    the contents of a length-delimited field."""
    tag = varint(number << 3 | wire_type)
    if wire_type == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


def matmul_model(n=4):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])
    w = numpy_helper.from_array(
        np.arange(n * n, dtype=np.float32).reshape(n, n), "W")  # raw_data
    b = helper.make_tensor("B", TensorProto.FLOAT, [n], [0.5] * n)  # float_data
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]),
         helper.make_node("Add", ["h", "B"], ["y"])],
        "mm", [x], [y], [w, b])
    model = helper.make_model(graph, producer_name="seed",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def if_model():
    """A subgraph in a node attribute: nesting protobuf parses itself."""
    out = helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])
    then_g = helper.make_graph(
        [helper.make_node("Constant", [], ["o"],
                          value=numpy_helper.from_array(
                              np.ones(2, np.float32)))],
        "then", [], [out])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["o"],
                          value=numpy_helper.from_array(
                              np.zeros(2, np.float32)))],
        "else", [], [out])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["o"], then_branch=then_g,
                          else_branch=else_g)],
        "if", [c], [out])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def unknown_fields():
    """One unknown field of every wire type (group included)."""
    return (field(1000, 0, varint(300)) + field(1001, 1, b"\x01" * 8) +
            field(1002, 5, b"\x02" * 4) + field(1003, 2, b"unknown") +
            varint(1004 << 3 | 3) + field(1, 0, varint(7)) +
            varint(1004 << 3 | 4))


def nested_groups(depth):
    """`depth` unknown groups (field 3) one inside the other."""
    return b"\x1b" * depth + b"\x1c" * depth


# Disagreements with protobuf found by fuzzing (issue 14), fixed in
# model_io.cc; kept as seeds so the corpus test replays them.
def regressions():
    # Over-long tag: field 7 (graph), length-delimited, zero-padded to 6
    # bytes. Protobuf reads tags in at most 5 bytes and rejects it; the walker
    # took it for an empty graph.
    yield "regress_overlong_graph_tag", bytes.fromhex("ba808080800000")
    # The same for the graph's length (0, in 6 bytes).
    yield "regress_overlong_graph_length", bytes.fromhex("3a808080808000")
    # Nesting one level past protobuf's recursion limit (100) counted from
    # the model: 100 groups inside the graph (or 99 inside an initializer,
    # two levels down) make 101 levels, which protobuf rejects. The walker
    # restarted protobuf with a full budget inside the graph (and inside a
    # large initializer) and accepted them. One group less parses on both
    # sides.
    for groups in (99, 100):
        yield "regress_depth_graph_%d_groups" % groups, field(
            7, 2, nested_groups(groups))
    for groups in (98, 99):
        tensor = field(1, 0, varint(4)) + nested_groups(groups)
        yield "regress_depth_initializer_%d_groups" % groups, field(
            7, 2, field(5, 2, tensor))


def seeds():
    mm = matmul_model(4).SerializeToString()
    big = matmul_model(8)  # 256-byte raw_data: several 16-byte pieces.
    graph = big.graph.SerializeToString()
    w = big.graph.initializer[0].SerializeToString()
    yield "matmul", mm
    yield "matmul_large_raw", big.SerializeToString()
    yield "if_subgraphs", if_model().SerializeToString()
    # Two graph fields: protobuf merges the second into the first.
    yield "two_graphs", mm + field(7, 2, field(2, 2, b"renamed") +
                                   field(5, 2, w))
    # Unknown fields at every level the walker looks into.
    tensor = w + unknown_fields() + field(9, 2, b"\x07" * 40)  # 2nd raw_data
    yield "unknown_fields", (
        unknown_fields() + field(1, 0, varint(8)) +
        field(7, 2, graph + unknown_fields() + field(5, 2, tensor)) +
        unknown_fields())
    # The graph's field number with other wire types: not a graph.
    yield "graph_wrong_wire_type", (field(7, 0, varint(1)) + field(
        7, 5, b"\0\0\0\0") + field(7, 2, b""))
    yield "empty_graph", field(7, 2, b"")
    yield "no_graph", field(1, 0, varint(8)) + field(2, 2, b"x")
    # Truncated in the header, in the graph and in the raw_data.
    full = big.SerializeToString()
    for cut in (3, len(full) // 2, len(full) - 5):
        yield "truncated_%d" % cut, full[:cut]
    yield from regressions()


def main():
    os.makedirs(OUT, exist_ok=True)
    total = 0
    for name, data in seeds():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        total += len(data)
    print("wrote %s: %d bytes" % (OUT, total))


if __name__ == "__main__":
    sys.exit(main())
