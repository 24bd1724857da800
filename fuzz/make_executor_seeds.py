#!/usr/bin/python3
"""Writes the seed corpus of the executor fuzzer: fuzz/corpus/executor/.

  python3 fuzz/make_executor_seeds.py

An input of fuzz/executor_fuzzer.cc is decoded front to back (fuzz_reader.h):
an opset choice, a flags byte, a node count, then per node a 2-byte index into
the fuzzer's op table followed by whatever that op's spec reads (inputs,
attributes, shapes, values). Any bytes decode to some graph, so the seeds are
the header and op index written exactly, followed by bytes from a fixed-seed
PRNG biased towards small values (small ranks and dims, sensible attribute
modes, float values from the interesting table): several per op of the table,
which this script reads from executor_fuzzer.cc (MakeOps, in order), so every
op family has seeds; plus chains of several nodes. regress_* seeds reproduce
bugs the fuzzer found (kept as hex below).
"""

import os
import random
import re
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "fuzz", "executor_fuzzer.cc")
OUT = os.path.join(ROOT, "fuzz", "corpus", "executor")

# Inputs that once failed a check, fixed since; name -> hex.
REGRESS = {
    # ConvTranspose with a scalar weight at opset 11: the opset upgrade's
    # ONNX shape inference (libonnx 1.12) read past W's dims and crashed;
    # graph::DropNodesUnsafeForInference keeps such nodes out of inference.
    "regress_convtranspose_scalar_weight":
        "0400003f000404030000ae02ff000004590703020505",
    # DynamicQuantizeLinear on a tensor holding -inf: its zero point was NaN
    # converted to int (UBSan, libFuzzer's first minute); now
    # INVALID_ARGUMENT, the range has no finite scale.
    "regress_dynamicquantize_infinite_range": (
        "02000083000600c30448060468010005034a7c060006020119070340046a02ae"
        "060072620004050203d000070403038500a8056607050001000500000000006f"
        "03020702000104070dec0502050601de03020006038e147304040503504ffc02"
        "0006064e07e8c4ea00003d0334eed44c01b803bb00d1000002010105040400c9"
        "04a50203b7010305e304be0106050235009b00050605050e0225bf0402030000"
        "0406020107"
    ),
    # Cast of a NaN float to INT64: undefined in C++ (UBSan); the executor
    # now maps NaN to 0 and saturates out-of-range values.
    "regress_cast_nan_to_int64": (
        "0100002424242424242424242424242424242406000000070004920524000507"
        "83000201020646065e00c6520407000102cb05220505f58d030004000504ad40"
        "0459078205e2010007a207007b06818a6307000304046d010202740400047cfa"
        "5f75a30603050006033f0500000100000a07ff0607ca00b801a1728004060000"
        "041200010500073006074c041e000b0041035d03066005058c0307"
    ),
    # EyeLike (with dtype) after a Trilu of a scalar: ONNX 1.12's EyeLike
    # inference dereferenced the untyped input's null type (a segfault in
    # PrepareGraph's constant folding; the server died in Calibrate). Now
    # EyeLike is kept out of inference (DropNodesUnsafeForInference).
    "regress_eyelike_untyped_input": (
        "0202052600020305000101009d07060102bd06076501b461079901606d000400"
        "0094030283060010010002010406040401030703ff88010b01d607c7ce010504"
        "072a000601040e0003860205008e07062bb0068c01010401020406b600ff0703"
        "0003020600048300c200040104d5dc06180307020302040701044f0003c70039"
        "00039b00010404058406005103b238d80705068777ea07063a0301000700f502"
        "a1e10005027c0402025b0204c7074703ee0097963900d2070601000306490002"
        "0038038e0200000000067d0e0206e9c50248000700e90100040316e701024701"
        "06c90407680701030700000306070207001896580707a6000706037500030002"
        "5d5c05800403069a03c30000d500065605000500817d0306dd040506088d0007"
        "3e06000300060702ba010026000602010404010307050500078c000107230702"
        "0326060484de030104005b03ea05060063044202c10507020005040205070405"
        "0203e0073f0505f7050704cca90000050105a8f8060304"
    ),
    # LayerNormalization with axis -2 on a vector (a Shape's output): ONNX
    # 1.12's inference indexed dims with the axis still negative after
    # adding the rank once (a segfault in PrepareGraph). InferShapesGuarded
    # skips an axis below minus the rank.
    "regress_layernorm_axis_below_rank": (
        "010042005d00e50214050239070405054d630607041701d5c8f6010607003803"
        "0158040102017706bd01053504c86a0006d00307010e14023d06000303040500"
        "05d4000107030404000004c0057d00030406320603e686050161070442740001"
        "0005020605013c0102520300040160021e0207ec140405010003460627050704"
        "040301bc050704bb02b3ec0407003f01030407b6000103b5442c03b703050500"
        "03021603021f"
    ),
    # Add of an INT64 input holding INT64_MIN to itself: a signed overflow
    # in Eigen's sum (UBSan, libFuzzer after 47,350 executions). Integer
    # Add/Sub/Mul/Neg/Abs now wrap around, computed unsigned.
    "regress_int64_add_overflow": "023000000000f60202070602300000006b020200e8054b77cd07287d03",
    # LayerNormalization of a scalar with its default axis (-1): the same
    # negative index, reached without an axis attribute; the guard now
    # reads the schema's default.
    "regress_layernorm_scalar_default_axis": (
        "010042005d00e50214050239070405054d630607041701d5c8f6010407003803"
        "0158040102017706bd01053503c86a0006d00307010e14023d06000303040500"
        "05d4000107030404000004c0057d00030406320603e686050161070442740005"
        "013c0102520300040160021e0207ec140405010003460627050704040301bc05"
        "0704bb02b3ec0407003f01030407b6000103b5442c03b7030505000302160302"
        "1f"
    ),
    # Shrink of INT64_MAX with bias -2.5: x - bias converted back to int64
    # was out of range (UBSan); now saturating, as Cast.
    "regress_shrink_integer_saturates": (
        "0501033700056a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a"
        "6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a"
        "6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a"
        "6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a6a0006ffff60400101ce40020401"
        "77037600000303d201040704050503030706043104b76600d601010202050500"
        "0ccd060501b7040204047006000307430204050601050004065e01b705050104"
        "030004027200008c0788018bb204691c030101d2060405020202e40630060701"
        "000407050505000100009c00d20306f200e006060304000205b504049b030644"
        "05b003"
    ),
    # A Mul (opset 14 and up) of a Shape with no elements and a
    # one-element value: ONNX 1.12's data propagation read past the empty
    # one (a segfault in MathOpDataPropagator; libFuzzer after 10,180
    # executions, and the schema probe). GuardOnnxInference skips it.
    "regress_mul_empty_data_propagation": (
        "0200070607c90323020000000000000000d004c00000d1743231000000000000"
        "d2061dcb0106538b00000000060200a400efefef03015f05070307"
    ),
    # Reshape to a shape with INT64_MAX in it: the product of the known
    # dims overflowed (UBSan, libFuzzer run 5 after 5,540 executions); now
    # saturating, and no tensor's non-zero dims may multiply past int64.
    "regress_reshape_shape_overflow": (
        "02eaeaeaeaeaeaeab0020aa77b03020700006124001bc0436f6e7374616e7444"
        "03d5db00680100070111030004cb3402042507037c28eaeaeaeaeaeaeaeaeaea"
        "eaeaffff53470503ff"
    ),
    # LogSoftmax over the zero-length axis of an empty [0, 6, 3] input: the
    # line's maximum was read from no values (ASan heap-buffer-overflow,
    # libFuzzer run 6 after 19,111 executions).
    "regress_logsoftmax_empty_axis": "0200403c0000fdfdfffdd2020003040002",
    # Tile of [7, 1, 6] by [0, 1, INT64_MAX]: the output is empty, but its
    # last dim multiplied past int64 (UBSan, libFuzzer run 7 after 34,770
    # executions).
    "regress_tile_dim_overflow": (
        "ffff6060002b3b802e880d0000000006030200ffff6060002b3b802e880d000000"
        "0006039a30feec3a04025e"
    ),
    # A BOOL graph input fed the byte 190: Loop read its condition as a C++
    # bool (UBSan "not a valid value for type bool", libFuzzer run 8 after
    # 8,065 executions); BOOL bytes now enter as 0 or 1.
    "regress_bool_byte_not_0_or_1": (
        "009aa12e0060610000072ea801057f06016f7574745f706101d900000000044c8b"
    ),
    # Split sizes summed past int64 (2 + INT64_MAX + ...) into a match of
    # the length (UBSan, libFuzzer run 9 after ~15,500 executions, through
    # constant folding); negative and wrapping sizes are now refused.
    "regress_split_sizes_overflow": "020205ef000060000000000000b6ff",
    # GatherND's batch_dims 2^32 - 1 narrowed to int -1 and passed the rank
    # check, then read shape[-1] (UBSan, libFuzzer run 10 after ~29,300
    # executions, through constant folding).
    "regress_gathernd_batch_dims_narrowed": "00000454006a00065bca42c905051f02f7050507000500050063020057000005040007030302840201d1000700f7fffbfffbfdfdfb510a040606040e03",
    # Pad's output dims summed INT64_MAX pads with the dim (UBSan, libFuzzer
    # run 13 after ~4,800 executions); pads beyond +-2^40 are now refused.
    "regress_pad_sum_overflow": (
        "020205efef00006000003b000000b601000000000000000202052600020060ffff03"
        "050003020600048300c200040104d5dc061803070230030240d63b0020613b000000"
        "b6ff0205ef00000000040701044f0003c7003900039b000104043d8406005103b238"
        "d80705068777ea00067d0e0206e9c5025d5c05800403067a03c360000000d5000656"
        "0500050081740306dd040507088d"
    ),
    # Slice multiplied a stride by a step of INT64_MAX (UBSan, libFuzzer run
    # 14 after ~84,400 executions); a step longer than the dim is clamped to
    # it (it takes at most one element either way).
    "regress_slice_step_overflow": (
        "0000000002a4a4a4a4a4a5a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4ada4a4a4a4a4a4a4"
        "a4a4a4a4a4a4a4a4a4ffffffffffffffffffffffffffffffffffffffffffffffffff"
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
        "ffffffffffffffffffffffffffffffffffffffffa4a4a494280000012b476b2a0402"
        "04f2000303f1a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a494280000012b476b2a0402"
        "04f2000303f1000000065b9aa12e44029607005702fbfdcafbfffdfd1fd2ffff0000"
        "030206bc8c525a5a5a5a5a5a5ae1910105ac5a5a5affffffffffffffffffffffffff"
        "ffffffffffffff0107"
    ),
    # CastLike with a target of element type 21 (UINT4, unknown to libonnx
    # 1.12): asking ONNX's schema whether the type is allowed threw from
    # libonnx (libFuzzer run 15 at once, on the schema check's first
    # version); types libonnx does not know are no longer asked about.
    "regress_castlike_unknown_type": "0100008600c64c53544d0725030701b4060000001e07000400fc06000600b1e20402",
    # GridSample with reflection padding: a finite grid value scaled past
    # float range made an infinite coordinate, which reflected to NaN and
    # was cast to int64 (UBSan, libFuzzer run 12 after ~38,500 executions);
    # an infinite coordinate now folds to the low edge.
    "regress_gridsample_reflect_infinite": (
        "01000089000e05954d610700030a8e0007511004020200060400050604d3522d86"
        "020570070006b601dd04016d007806050504"
    ),
    # GroupNormalization-21 of zero channels divided by c / groups = 0
    # (UBSan, libFuzzer run 16 after ~129,000 executions); an empty input
    # is an empty output.
    "regress_groupnorm_zero_channels": (
        "03040589000307373737373737373737373737373737373737373737373737373737"
        "37373737373737373737373737373737373737373737373737373737373737373737"
        "3737373737373737373737373737040707df0206000701069ea8000601300706c803"
        "057938040407f50001c8064c020207060614075b035ff6059428000001fb476b2a04"
        "0204f2000303f15702fb05350400020253544600030206bc8c3ad30204a207eb0000"
        "0202000307e2420600030003074c00060404010004020034df0573047f9700000000"
        "00000000000000000000000000cf450000017ee5014e02032d030018000101000049"
        "b5050302032c06e8e400400044b204020516000307e6910207040000028ffa000556"
        "440000010700050004b9d046054c0001000003020401010b0c"
    ),
    # Trilu with k = INT64_MAX overflowed i + k + 1 (UBSan, libFuzzer run
    # 18 after ~35,200 executions); k is clamped to just past the matrix.
    "regress_trilu_k_overflow": (
        "020007060700000000f4f4f4f4f4f42bf4f4fbf4f4f4f4f4f4f4f4f4f4f4f4f4f4f4"
        "f4f4f4f4f4f4f4f4f4f4f4f4f4f4f425f4f4f4f4f4f4f4fafffffff4f4f4f4f42cf4"
        "f4f4ff07f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4000000436f6e76"
        "5472616e73212121212121212121212100f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4"
        "f4f4f4f4f4f4f4f4f425f4f4f4f4f4f4f4fafffffff4f4f4f4f42cf4f4f4ff07f4f4"
        "f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4000000436f6e765472616e7321"
        "2121212121212121212100001e000000000000000000000000000000000000001e00"
        "00000000000000000000000000000000000000000000000000000000000000000000"
        "41000000000000fffffffffffffffa000000000000000007"
    ),
    # RoiAlign with a spatial scale taking finite RoIs past float range:
    # inf - inf made NaN sample positions, cast to int64 (UBSan, libFuzzer
    # run 19 after ~79,500 executions); they now sample nothing.
    "regress_roialign_nan_position": (
        "02003cf713c874747474747474747474747474747474747474747474747474747474"
        "74c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8c8"
        "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e7e5e"
        "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e0200ff0300ff62"
        "ff6260002b3b802e880d00008080808080808080808080808080000330feec3a285e"
        "5e5e5e5e5e5e5e5e5e5e5e5e5e"
    ),
    # RoiAlign with adaptive sampling over RoIs of constant inputs: constant
    # folding (which no deadline stops) ran up to 2^34 samples for minutes
    # (libFuzzer timeout, run 20 after ~61,000 executions); the bound is
    # 2^30 samples x channels and 2^20 per bin now, and a run checks
    # cancellation between RoIs.
    "regress_roialign_unbounded_fold": (
        "020007060700000000f4f4f4f4f4f4f4f40009f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4"
        "f4f4f4f4f4f4f4f4f4f4f4f4f4f4d4f4f4f4f4f4f4f4fafffffff4f4f4f4f4f4f4f4"
        "f4436f6e7374f400007431350000001af4f4f4f4f4f4f4f40009f4f4f4f4f4f4f4f4"
        "f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4d4f4f4f4f4f4f4f4fafffffff4"
        "f4f4f4f4f4f4f4f4436f6e7374f40000003d00f4f4f4f4f4f4f4f4f4f4f4f4f40009"
        "f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4d4f4f426f4"
        "f4f4f4fafffffff4f4f4f4f4f4f4f4f4f4000000c9f40000003d00f4f4f4f4f4f4f4"
        "f4f4f4f44400c06000009bf6f99b1d04fd332c0a0100f9ee090500000000000000d0"
        "0400edd4"
    ),
    # Resize with sizes of INT64_MAX: out * taps overflowed before any
    # tensor was allocated (UBSan, libFuzzer run 21 after ~20,250
    # executions); an output shape that overflows is refused first.
    "regress_resize_sizes_overflow": (
        "050606d31900f57060abf2b524130202000570030a8e0007511004020300064545f3"
        "636c00d06000004545454545454545454545454545454553756d454545030405ffff"
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffff89000345454545"
        "4545454545454545454545454c6f6f70070c070745"
    ),
    # Resize with a scale of ~1e36: floor(scale * in) was cast to int64
    # (UBSan, libFuzzer run 22 after ~136,700 executions); an axis longer
    # than 2^62 is refused.
    "regress_resize_scale_overflow": (
        "0200346f47656d26a4a4a46d26a4a4a4a40000002ea45374313372756e74696d655f"
        "a4a4a4a40500000052ffffff6020007b4cc90204f20303f100"
    ),
    # Resize-18 with keep_aspect_ratio_policy and a size near INT64_MAX:
    # the policy's common scale times another axis's length was cast to
    # int64 (UBSan, libFuzzer run 24 after ~48,800 executions); that axis
    # is refused past 2^62 too.
    "regress_resize_keep_aspect_overflow": (
        "026b0429d20105fd1e06060000020001c67e04030106050005050000e305ffffffff"
        "ff000000502d00cf0006021e00001202000600040407c40606c8dc02eb0200060306"
        "060407020000040201010506047200040201010506047200000403040105523200"
        "010706c8dc02eb0200060306060407020403040105523200010706c8dc02eb0200"
        "06040304010504"
    ),
}


def op_table():
    """The op names of MakeOps() in table order."""
    text = open(SRC).read()
    body = text[text.index("std::vector<OpSpec> MakeOps()"):]
    body = body[:body.index("\n}\n")]
    names = []
    pending = None
    pattern = re.compile(
        r'for \(const char\* op\s*:\s*\{([^}]*)\}\)|'
        r'ops\.push_back\(\s*\{\s*(op|"(\w+)")')
    for m in pattern.finditer(body):
        if m.group(1) is not None:
            pending = re.findall(r'"(\w+)"', m.group(1))
        elif m.group(2) == "op":
            names.extend(pending)
        else:
            names.append(m.group(3))
    return names


def body_bytes(rng, n):
    """Bytes that decode to mostly small, sensible choices."""
    out = bytearray()
    for _ in range(n):
        x = rng.random()
        if x < 0.55:
            out.append(rng.choice([1, 2, 3, 4, 5, 6, 7]))
        elif x < 0.7:
            out.append(0)
        else:
            out.append(rng.randrange(256))
    return bytes(out)


def main():
    ops = op_table()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    rng = random.Random(14)
    count = 0

    def write(name, data):
        nonlocal count
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        count += 1

    # One node of each op, at opsets 13, 17, 18 and 21 (choices 0-3 of the
    # fuzzer's kOpsets), with and without a graph output in the middle.
    for index, op in enumerate(ops):
        for variant in range(3):
            header = bytes([variant % 4, 0, 0])  # one node
            data = header + index.to_bytes(2, "little") + body_bytes(rng, 160)
            write("op_%s_%d" % (op, variant), data)
    # Chains of 2-8 nodes over random ops, some with a wrong or missing
    # feed (flags bits 1, 2).
    for i in range(40):
        nodes = 2 + i % 7
        flags = [0, 1, 2, 4][i % 4]
        data = bytes([i % 8, flags, nodes - 1])
        for _ in range(nodes):
            data += rng.randrange(len(ops)).to_bytes(2, "little")
            data += body_bytes(rng, 60)
        write("chain_%02d" % i, data)
    for name, hexdata in REGRESS.items():
        write(name, bytes.fromhex(hexdata))
    print("wrote %d seeds (%d ops) to %s" % (count, len(ops), OUT))


if __name__ == "__main__":
    main()
