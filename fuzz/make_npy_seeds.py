#!/usr/bin/python3
"""Writes the seed corpus of the .npy fuzzer: fuzz/corpus/npy/.

Run with Debian's python3-numpy and python3-onnx:
  /usr/bin/python3 fuzz/make_npy_seeds.py

Each seed is a whole file as quantctl's --data reads it
(client/calibration_data.h, ReadTensorFile): valid .npy files written by
numpy itself (np.save / np.lib.format.write_array into BytesIO) in format
versions 1.0, 2.0 and 3.0, every element type the reader takes, 0-d and
empty arrays; arrays it refuses (Fortran order, big-endian, other types);
near misses built by editing those bytes (truncated, bad magic, headers
that declare huge or malformed shapes); and two TensorProto (.pb) files,
the reader's other branch. regress_* seeds reproduce bugs these targets found
(fixed; replayed in CI).
"""

import io
import os
import shutil
import struct

import numpy as np
from onnx import TensorProto, helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "npy")


def npy(array, version=None):
    f = io.BytesIO()
    if version is None:
        np.save(f, array, allow_pickle=False)
    else:
        np.lib.format.write_array(f, array, version=version,
                                  allow_pickle=False)
    return f.getvalue()


def with_header(header, data=b"", version=1):
    """A .npy file with a hand-written header dict (padded as numpy pads)."""
    text = header.encode("latin1")
    prefix = 10 if version == 1 else 12
    pad = (64 - (prefix + len(text) + 1) % 64) % 64
    text += b" " * pad + b"\n"
    size = struct.pack("<H", len(text)) if version == 1 else struct.pack(
        "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + size + text + data


def valid_seeds():
    rng = np.random.default_rng(14)
    yield "f32_1d", npy(np.arange(6, dtype=np.float32))
    yield "f32_2d", npy(rng.standard_normal((3, 4)).astype(np.float32))
    yield "f32_3d_batch", npy(rng.standard_normal((5, 2, 3)).astype(
        np.float32))
    yield "f64_2d", npy(rng.standard_normal((4, 2)))
    yield "i64_1d", npy(np.array([-1, 0, 1, 2**62], dtype=np.int64))
    yield "i32_2d", npy(np.arange(8, dtype=np.int32).reshape(2, 4))
    yield "i8_1d", npy(np.array([-128, 0, 127], dtype=np.int8))
    yield "u8_image", npy(np.arange(48, dtype=np.uint8).reshape(2, 4, 2, 3))
    yield "bool_2d", npy(np.array([[True, False], [False, True]]))
    yield "f32_scalar", npy(np.array(3.5, dtype=np.float32))
    yield "i64_scalar", npy(np.array(7, dtype=np.int64))
    yield "f32_empty_0x3", npy(np.zeros((0, 3), dtype=np.float32))
    yield "f32_empty_3x0", npy(np.zeros((3, 0), dtype=np.float32))
    yield "u8_empty_1d", npy(np.zeros((0,), dtype=np.uint8))
    yield "f32_v2", npy(np.arange(4, dtype=np.float32).reshape(2, 2), (2, 0))
    yield "i8_v3", npy(np.arange(6, dtype=np.int8).reshape(3, 2), (3, 0))
    # Rank 6 and a long first axis: batching cuts along it.
    yield "f32_rank6", npy(np.ones((2, 1, 2, 1, 2, 1), dtype=np.float32))
    yield "u8_long_axis", npy(np.arange(200, dtype=np.uint8).reshape(100, 2))


def refused_seeds():
    yield "f32_fortran", npy(np.asfortranarray(
        np.arange(6, dtype=np.float32).reshape(2, 3)))
    yield "f32_big_endian", npy(np.arange(3, dtype=">f4"))
    yield "f16", npy(np.arange(3, dtype=np.float16))
    yield "u16", npy(np.arange(3, dtype=np.uint16))
    yield "c64", npy(np.arange(2, dtype=np.complex64))
    yield "structured", npy(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    yield "unicode", npy(np.array(["ab", "c"]))


def near_misses():
    base = npy(np.arange(6, dtype=np.float32).reshape(2, 3))
    yield "miss_truncated_data", base[:-3]
    yield "miss_extra_data", base + b"\0\0\0\0"
    yield "miss_truncated_header", base[:40]
    yield "miss_magic_only", base[:8]
    yield "miss_bad_magic", b"\x93NUMPZ" + base[6:]
    yield "miss_version_4", base[:6] + b"\x04" + base[7:]
    yield "miss_header_len_past_end", base[:8] + b"\xff\xff" + base[10:]
    v2 = npy(np.arange(4, dtype=np.float32), (2, 0))
    yield "miss_v2_header_len_4g", v2[:8] + b"\xff\xff\xff\xff" + v2[12:]
    f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"
    # 2^60 elements from a 128-byte file: refused before allocating.
    yield "miss_shape_2p60", with_header(f4 % "(1152921504606846976,)")
    yield "miss_shape_2p40_x_2p30", with_header(
        f4 % "(1099511627776, 1073741824)", b"\0" * 16)
    yield "miss_shape_overflow", with_header(
        f4 % "(4611686018427387904, 4611686018427387904)")
    # No values but 2^62 samples: CalibrationData cuts 2^62 / batch_size
    # empty batches (found by fuzzing; see the report of issue 14).
    yield "shape_2p62_x_0", with_header(f4 % "(4611686018427387904, 0)")
    yield "miss_shape_overflow_zero", with_header(
        f4 % "(0, 4611686018427387904, 4611686018427387904)")
    yield "miss_shape_int64_max", with_header(
        "{'descr': '|u1', 'fortran_order': False, "
        "'shape': (9223372036854775807,), }")
    yield "miss_shape_negative", with_header(f4 % "(-1, 3)", b"\0" * 12)
    yield "miss_shape_not_number", with_header(f4 % "(2, x)", b"\0" * 8)
    yield "miss_shape_unclosed", with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, }")
    yield "miss_shape_many_dims", with_header(f4 % ("(" + "1, " * 40 + ")"),
                                              b"\0" * 4)
    yield "miss_no_descr", with_header(
        "{'fortran_order': False, 'shape': (1,), }", b"\0" * 4)
    yield "miss_no_fortran", with_header("{'descr': '<f4', 'shape': (1,), }",
                                         b"\0" * 4)
    yield "miss_descr_unclosed", with_header("{'descr': '<f4")
    yield "miss_descr_equals_byte", with_header(
        "{'descr': '=u1', 'fortran_order': False, 'shape': (2,), }", b"ab")
    yield "miss_descr_lt_bool", with_header(
        "{'descr': '<b1', 'fortran_order': False, 'shape': (2,), }",
        b"\x01\x00")
    yield "miss_empty_header", with_header("")


def proto_seeds():
    """The reader's other branch: a file without the .npy magic is parsed as
    an ONNX TensorProto (Tensor::FromProto)."""
    yield "pb_float", helper.make_tensor(
        "x", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0]).SerializeToString()
    yield "pb_int8_raw", helper.make_tensor(
        "y", TensorProto.INT8, [3], b"\x01\x02\xff", raw=True
    ).SerializeToString()


def regressions():
    """Reproducers of bugs found by fuzzing, fixed, replayed in CI (the UB
    itself shows under the libFuzzer build's UBSan)."""
    # Tensor::FromProto -> FourBitFromProto -> numerics::PackedInt4Bytes
    # computed (n + 1) / 2 with n = INT64_MAX: signed overflow (UBSan).
    t = TensorProto(name="q", data_type=22, dims=[2**63 - 1])
    t.raw_data = b""
    yield "regress_pb_int4_int64_max_dim", t.SerializeToString()


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    for group in (valid_seeds, refused_seeds, near_misses, proto_seeds,
                  regressions):
        for name, data in group():
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(data)
    print("wrote %d seeds to %s" % (len(os.listdir(OUT)), OUT))


if __name__ == "__main__":
    main()
