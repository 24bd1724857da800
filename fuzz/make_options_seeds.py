#!/usr/bin/python3
"""Writes the seed corpus of the options fuzzer: fuzz/corpus/options/.

Run with Debian's python3-protobuf and protoc:
  /usr/bin/python3 fuzz/make_options_seeds.py

Each seed is one flags byte (fuzz/options_fuzzer.cc: bit 0 CalibrateConfig,
bit 1 text format, bit 2 batch_stream) and a config: valid and near-valid
QuantizeConfigs (no method, DYNAMIC_RANGE, STATIC_RANGE with ranges or
batches, unit-wise entries, search fields, every QuantOpParams field) and a
CalibrateConfig for each observer core accepts
(core/calibration/observers.cc), each in binary and in text format.
"""

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus", "options")
PROTOS = ["tensorflow/quantization/quantization_options.proto",
          "quantd/v1/quantization_service.proto"]

CALIBRATE, TEXT, BATCHES = 1, 2, 4


def load_messages():
    """Generates the Python modules of our protos into a temporary directory
    (nothing generated is committed) and imports them."""
    gen = tempfile.mkdtemp(prefix="quantd-seeds-")
    subprocess.check_call(["protoc", "--proto_path=" + os.path.join(ROOT, "proto"),
                           "--python_out=" + gen] + PROTOS)
    sys.path.insert(0, gen)
    from quantd.v1 import quantization_service_pb2 as qs
    from tensorflow.quantization import quantization_options_pb2 as qo
    return qs, qo


def quantize_configs(qs, qo):
    """(name, config, batch_stream) of QuantizeConfigs."""
    M = qo.QuantizationMethod

    def config(method=None, precision=None, op_set=None, size=1000):
        c = qs.QuantizeConfig(model_size_bytes=size)
        if method is not None:
            c.options.quantization_method.experimental_method = method
        if precision is not None:
            c.options.quantization_precision = precision
        if op_set is not None:
            c.options.op_set = op_set
        return c

    yield "q_no_method", config(), False
    yield "q_dynamic", config(M.DYNAMIC_RANGE), False
    yield "q_dynamic_w4a8", config(M.DYNAMIC_RANGE, qo.PRECISION_W4A8), False
    yield "q_dynamic_w4a4", config(M.DYNAMIC_RANGE, qo.PRECISION_W4A4), False
    yield "q_dynamic_xla", config(M.DYNAMIC_RANGE, op_set=qo.XLA), False
    yield "q_dynamic_uniform", config(M.DYNAMIC_RANGE,
                                      op_set=qo.UNIFORM_QUANTIZED), False
    yield "q_dynamic_with_batches", config(M.DYNAMIC_RANGE), True
    yield "q_full", config(M.STATIC_RANGE, qo.PRECISION_FULL), False
    yield "q_method_unspecified_oneof", qs.QuantizeConfig(
        options=qo.QuantizationOptions(
            quantization_method=M(method=M.METHOD_UNSPECIFIED))), False

    c = config(M.STATIC_RANGE)
    r = c.calibration.ranges.add(tensor_name="x", min=-1, max=1)
    yield "q_static_ranges", c, False
    r.channel_min.extend([-1, -2])
    r.channel_max.extend([1, 2])
    r.axis = 1
    yield "q_static_channel_ranges", c, False

    yield "q_static_batches", config(M.STATIC_RANGE), True
    yield "q_static_w4a4_batches", config(M.STATIC_RANGE,
                                          qo.PRECISION_W4A4), True

    c = config(M.STATIC_RANGE)
    c.target_sqnr_db = 30
    c.holdout_batches = 2
    yield "q_static_search", c, True
    c = config(M.STATIC_RANGE)
    c.target_sqnr_db = 0
    yield "q_static_search_zero", c, True

    c = config(M.STATIC_RANGE, qo.PRECISION_W8A8)
    c.options.unit_wise_quantization_precision.add(
        unit_type=qo.UnitWiseQuantizationPrecision.UNIT_NODE,
        unit_name="conv1", quantization_precision=qo.PRECISION_FULL)
    c.options.unit_wise_quantization_precision.add(
        unit_type=qo.UnitWiseQuantizationPrecision.UNIT_OP,
        unit_name="MatMul", func_name="main",
        quantization_precision=qo.PRECISION_W4A8)
    c.options.min_num_elements_for_weights = -1
    yield "q_static_unit_wise", c, True
    c = config(M.DYNAMIC_RANGE, qo.PRECISION_FULL)
    c.options.unit_wise_quantization_precision.add(
        unit_type=qo.UnitWiseQuantizationPrecision.UNIT_OP, unit_name="Gemm",
        quantization_precision=qo.PRECISION_W8A8)
    yield "q_dynamic_full_unit_w8a8", c, False

    c = config(M.DYNAMIC_RANGE)
    w = c.weight_params
    w.bits = 4
    w.symmetric = True
    w.narrow_range = True
    w.per_channel = True
    w.block_size = 32
    w.range = qs.WEIGHT_RANGE_MSE
    w.producer_scope = "enc/"
    w.consumer_scope = "enc/"
    yield "q_dynamic_weight_params", c, False

    c = config(M.STATIC_RANGE)
    a = c.activation_params
    a.bits = 8
    a.symmetric = False
    a.narrow_range = False
    a.moving_avg = True
    a.ema_decay = 0.99
    a.init_min = -6
    a.init_max = 6
    a.quant_delay = 10
    c.calibration_config.method = "percentile"
    c.calibration_config.percentile = 99.99
    c.calibration_config.num_bins = 2048
    yield "q_static_activation_params", c, True

    c = config(M.STATIC_RANGE)
    c.weight_params.moving_avg = True
    yield "q_static_weight_tracking", c, False
    c = config(M.STATIC_RANGE)
    c.activation_params.per_channel = True
    yield "q_static_activation_per_channel", c, False
    c = config(M.STATIC_RANGE)
    c.activation_params.init_min = 1
    c.activation_params.init_max = -1
    yield "q_static_init_inverted", c, True

    # The weight algorithms and the search, with either method: batches are
    # accepted with DYNAMIC_RANGE only when one of them reads them.
    for name, algorithm in [("gptq", qs.WEIGHT_ALGORITHM_GPTQ),
                            ("awq", qs.WEIGHT_ALGORITHM_AWQ),
                            ("awq_gptq", qs.WEIGHT_ALGORITHM_AWQ_GPTQ)]:
        c = config(M.DYNAMIC_RANGE, qo.PRECISION_W4A8)
        c.weight_algorithm = algorithm
        c.weight_params.block_size = 32
        yield "q_dynamic_%s_batches" % name, c, True
    c = config(M.STATIC_RANGE, qo.PRECISION_W4A8)
    c.weight_algorithm = qs.WEIGHT_ALGORITHM_GPTQ
    c.gptq.dampening = 0.01
    c.gptq.act_order = True
    c.bias_correction = True
    c.equalize = True
    c.cross_check = True
    yield "q_static_gptq_bias_equalize", c, True
    c = config(M.STATIC_RANGE)
    c.cross_check = True  # Without GPTQ or AWQ: refused.
    yield "q_static_cross_check_rtn", c, True
    c = config(M.STATIC_RANGE)
    c.smoothquant.alpha = 0.5
    yield "q_static_smoothquant", c, True
    c = config(M.DYNAMIC_RANGE)
    c.smoothquant.auto_alpha = True
    yield "q_dynamic_smoothquant_auto", c, True
    c = config(M.DYNAMIC_RANGE)
    c.bias_correction = True
    yield "q_dynamic_bias_correction", c, True
    c = config(M.STATIC_RANGE, qo.PRECISION_W4A8)
    c.target_agreement = 0.99
    c.allowed_precisions.extend([qo.PRECISION_W4A8, qo.PRECISION_W8A8])
    c.holdout_batches = 2
    yield "q_static_target_agreement", c, True


def calibrate_configs(qs):
    # Every observer core accepts (kObserverMethods), and its parameters.
    for method in ["min_max", "last_value", "moving_average", "percentile",
                   "mse", "entropy"]:
        c = qs.CalibrateConfig(method=method, model_size_bytes=1000)
        yield "c_" + method, c
    c = qs.CalibrateConfig(method="moving_average", model_size_bytes=1)
    c.activation_params.ema_decay = 0.9
    c.activation_params.bits = 4
    c.activation_params.symmetric = True
    c.activation_params.narrow_range = True
    c.activation_params.quant_delay = 3
    c.per_channel = True
    yield "c_moving_average_params", c
    yield "c_percentile_params", qs.CalibrateConfig(
        method="percentile", percentile=99.9, num_bins=64)
    yield "c_entropy_bins", qs.CalibrateConfig(method="entropy", num_bins=16)
    yield "c_mse_too_few_bins", qs.CalibrateConfig(method="mse", num_bins=8)
    yield "c_unknown_method", qs.CalibrateConfig(method="kl_divergence")
    yield "c_no_method", qs.CalibrateConfig()
    c = qs.CalibrateConfig()
    c.activation_params.moving_avg = True
    yield "c_moving_avg_flag", c
    c = qs.CalibrateConfig(method="min_max")
    c.activation_params.init_min = float("nan")
    yield "c_init_nan", c


def main():
    qs, qo = load_messages()
    from google.protobuf import text_format
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)

    def write(name, flags, config):
        for text in (False, True):
            data = (text_format.MessageToString(config).encode()
                    if text else config.SerializeToString())
            path = os.path.join(OUT, name + ("_text" if text else ""))
            with open(path, "wb") as f:
                f.write(bytes([flags | (TEXT if text else 0)]) + data)

    for name, config, batches in quantize_configs(qs, qo):
        write(name, BATCHES if batches else 0, config)
    for name, config in calibrate_configs(qs):
        write(name, CALIBRATE, config)
    print("wrote %d seeds to %s" % (len(os.listdir(OUT)), OUT))


if __name__ == "__main__":
    main()
