#!/usr/bin/python3
"""Writes the seed corpus of the TensorProto fuzzer: fuzz/corpus/tensor_proto/.

Run with Debian's python3-onnx and python3-numpy:
  /usr/bin/python3 fuzz/make_tensor_proto_seeds.py

Each seed is one serialized onnx.TensorProto (fuzz/tensor_proto_fuzzer.cc):
tensors the readers accept (float in raw_data and float_data, the integer
types, int4 packed in raw_data and int32_data, fp16/bf16 bits in
int32_data, double, string, 0-d and empty) and ones they refuse (external
data, negative dims, dims whose product overflows or that promise 2^40
elements with no data, data of the wrong size, element types that are no
ONNX type, segments). Written with onnx.helper / numpy_helper, or field by
field where the helpers refuse what we want to send. regress_* seeds
reproduce bugs these targets found (fixed; replayed in CI).
"""

import os
import shutil

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "tensor_proto")

INT4 = 22
UINT4 = 21
FLOAT8E4M3FN = 17
UINT2 = 25


def raw(name, data_type, dims, data):
    t = TensorProto(name=name, data_type=data_type, dims=dims)
    t.raw_data = data
    return t


def accepted():
    rng = np.random.default_rng(14)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    yield "float_raw", numpy_helper.from_array(w, "w")
    yield "float_data", helper.make_tensor("w", TensorProto.FLOAT, [2, 3],
                                           w.flatten().tolist())
    yield "float_scalar", numpy_helper.from_array(np.array(1.5, np.float32),
                                                  "s")
    yield "float_empty", numpy_helper.from_array(
        np.zeros((0, 4), np.float32), "e")
    yield "float_nan_inf", numpy_helper.from_array(
        np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), "n")
    yield "double", numpy_helper.from_array(np.arange(3, dtype=np.float64),
                                            "d")
    yield "double_data", helper.make_tensor("d", TensorProto.DOUBLE, [2],
                                            [0.5, -2.0])
    yield "int8_raw", numpy_helper.from_array(
        np.array([-128, 0, 127], np.int8), "q")
    yield "int8_data", helper.make_tensor("q", TensorProto.INT8, [3],
                                          [-128, 0, 127])
    yield "uint8_data", helper.make_tensor("z", TensorProto.UINT8, [2], [0,
                                                                         255])
    yield "int32_data", helper.make_tensor("i", TensorProto.INT32, [2],
                                           [-5, 7])
    yield "int64_data", helper.make_tensor("shape", TensorProto.INT64, [3],
                                           [1, -1, 2**40])
    yield "uint64_data", helper.make_tensor("u", TensorProto.UINT64, [2],
                                            [0, 2**63])
    yield "uint32_data", helper.make_tensor("u", TensorProto.UINT32, [2],
                                            [0, 2**32 - 1])
    yield "bool_data", helper.make_tensor("b", TensorProto.BOOL, [3],
                                          [True, False, True])
    yield "int16_raw", numpy_helper.from_array(np.array([-3, 3], np.int16),
                                               "h")
    yield "fp16_raw", numpy_helper.from_array(
        np.array([1.0, -2.5, 65504.0], np.float16), "f16")
    # make_tensor stores fp16 bits one per int32_data entry.
    yield "fp16_data", helper.make_tensor(
        "f16", TensorProto.FLOAT16, [2], np.array([0.5, 1.0], np.float16))
    yield "bf16_data", TensorProto(name="bf", data_type=TensorProto.BFLOAT16,
                                   dims=[2], int32_data=[0x3F80, 0xC000])
    # 4-bit: two values per byte, low nibble first; 3 values in 2 bytes.
    yield "int4_raw", raw("q4", INT4, [3], bytes([0x7F, 0x08]))
    yield "uint4_raw", raw("u4", UINT4, [2, 2], bytes([0x21, 0xF0]))
    yield "int4_int32_data", TensorProto(name="q4", data_type=INT4, dims=[3],
                                         int32_data=[0x7F, 0x08])
    yield "float8_raw", raw("f8", FLOAT8E4M3FN, [2], b"\x38\xb8")
    yield "uint2_raw", raw("u2", UINT2, [5], b"\xe4\x01")
    yield "string", helper.make_tensor("s", TensorProto.STRING, [2],
                                       [b"ab", b""])
    yield "complex64", TensorProto(name="c", data_type=TensorProto.COMPLEX64,
                                   dims=[1], float_data=[1.0, 2.0])
    yield "no_dims_no_data", TensorProto(name="x",
                                         data_type=TensorProto.FLOAT)


def refused():
    t = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[1024])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "0"),
                 ("length", "4096")):
        e = t.external_data.add()
        e.key, e.value = k, v
    yield "external_data", t
    t = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[2])
    e = t.external_data.add()
    e.key, e.value = "location", "w.bin"
    yield "external_entry_not_location", t
    yield "negative_dim", raw("x", TensorProto.FLOAT, [-1, 2], b"\0" * 8)
    yield "negative_dim_zero", raw("x", TensorProto.FLOAT, [0, -3], b"")
    # 2^40 elements with no data: refused, never allocated.
    yield "dims_2p40_no_data", TensorProto(name="x",
                                           data_type=TensorProto.FLOAT,
                                           dims=[2**20, 2**20])
    yield "dims_2p40_raw_empty", raw("x", TensorProto.UINT8, [2**40], b"")
    yield "dims_2p40_int4", raw("x", INT4, [2**40], b"\0")
    yield "dims_overflow", raw("x", TensorProto.FLOAT, [2**62, 2**62], b"")
    yield "dims_overflow_with_zero", raw("x", TensorProto.FLOAT,
                                         [0, 2**62, 2**62], b"")
    yield "dims_int64_max_float", raw("x", TensorProto.FLOAT, [2**63 - 1],
                                      b"")
    yield "raw_too_short", raw("x", TensorProto.FLOAT, [2, 3], b"\0" * 20)
    yield "raw_too_long", raw("x", TensorProto.FLOAT, [2], b"\0" * 12)
    yield "float_data_too_few", TensorProto(
        name="x", data_type=TensorProto.FLOAT, dims=[3], float_data=[1, 2])
    yield "int4_raw_too_long", raw("q4", INT4, [3], b"\0\0\0")
    yield "int4_int32_not_byte", TensorProto(name="q4", data_type=INT4,
                                             dims=[2], int32_data=[256])
    yield "int8_data_in_float_data", TensorProto(
        name="x", data_type=TensorProto.INT8, dims=[2], float_data=[1, 2])
    yield "type_undefined", raw("x", TensorProto.UNDEFINED, [2], b"\0\0")
    yield "type_99", raw("x", 99, [1], b"\0")
    yield "type_99_data", TensorProto(name="x", data_type=99, dims=[1],
                                      int32_data=[1])
    yield "type_negative", TensorProto(name="x", data_type=-1, dims=[1],
                                       float_data=[1])
    t = raw("x", TensorProto.FLOAT, [1], b"\0" * 4)
    t.segment.begin = 0
    t.segment.end = 1
    yield "segment", t
    yield "long_name", raw("n" * 16385, TensorProto.UINT8, [1], b"\0")
    yield "raw_and_float_data", TensorProto(
        name="x", data_type=TensorProto.FLOAT, dims=[1], float_data=[1.0],
        raw_data=b"\0\0\x80\x3f")


def regressions():
    """Reproducers of bugs found by fuzzing, fixed, replayed in CI (the UB
    itself shows under the libFuzzer build's UBSan)."""
    # Tensor::FromProto -> FourBitFromProto -> numerics::PackedInt4Bytes
    # computed (n + 1) / 2 with n = INT64_MAX: signed overflow (UBSan).
    yield "regress_int4_int64_max_dim", raw("q", INT4, [2**63 - 1], b"")
    # graph::ReadFloatTensor memcpyed 0 bytes into an empty vector's data(),
    # a null pointer (UBSan: nonnull-attribute), for FLOAT dims that count 0
    # elements with raw_data present (tensor_util.cc, ReadFloatTensor).
    yield "regress_float_raw_zero_elements", raw("e", TensorProto.FLOAT,
                                                 [0, 4], b"")


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    for group in (accepted, refused, regressions):
        for name, tensor in group():
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(tensor.SerializeToString())
    print("wrote %d seeds to %s" % (len(os.listdir(OUT)), OUT))


if __name__ == "__main__":
    main()
