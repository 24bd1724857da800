"""End-to-end tests of the Python client against a real quantd."""

import os
import shutil
import subprocess
import tempfile
import unittest

import grpc
import numpy as np
import onnx
from onnx import numpy_helper

from quantd_client._proto import options_pb2
from quantd_client import external_data
from quantd_client import (NpyBatches, QuantdClient, QuantdError, ServingStatus, TlsOptions,
                           inline_external_data, inline_streamed_data, open_for_streaming,
                           options_pb2, service_pb2, uses_external_data)
from quantd_server import DIGITS_DIR, QuantdServer, Stopwatch, measured

MODEL = os.path.join(DIGITS_DIR, "model.onnx")
CALIB_X = os.path.join(DIGITS_DIR, "calib_x.npy")
DYNAMIC = {"quantization_method": {"experimental_method": "DYNAMIC_RANGE"}}
STATIC = {"quantization_method": {"experimental_method": "STATIC_RANGE"}}
# Every weight quantized: the first convolution's (72 elements) would stay
# float with the default minimum, and so would its input.
STATIC_ALL_WEIGHTS = dict(STATIC, min_num_elements_for_weights=-1)
INT8, UINT8 = onnx.TensorProto.INT8, onnx.TensorProto.UINT8

_server = None


def setUpModule():
    global _server
    _server = QuantdServer()


def tearDownModule():
    if _server is not None:
        _server.stop()


def initializers(model: onnx.ModelProto):
    return {i.name: i for i in model.graph.initializer}


def nodes_of(model: onnx.ModelProto, op_type: str):
    return [n for n in model.graph.node if n.op_type == op_type]


class QuantdClientTest(unittest.TestCase):

    def setUp(self):
        # Small chunks: the 547 KB model goes out as 9 model_chunk messages.
        self.client = QuantdClient(_server.target, timeout=60, chunk_bytes=64 << 10)
        self.addCleanup(self.client.close)
        with open(MODEL, "rb") as f:
            self.model_bytes = f.read()
        self.float_model = onnx.load_from_string(self.model_bytes)

    def save_with_external_data(self, path, location):
        """The float model at `path`, its tensors of 256 bytes and more in
        one data file `location` beside it."""
        onnx.save_model(self.float_model, path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=location,
                        size_threshold=256)

    def test_health(self):
        self.assertEqual(self.client.health(), ServingStatus.SERVING)
        self.assertEqual(self.client.health("quantd.v1.QuantizationService"),
                         ServingStatus.SERVING)
        with self.assertRaises(QuantdError) as ctx:
            self.client.health("no.such.Service")
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_server_info(self):
        info = self.client.server_info()
        self.assertTrue(info.version)
        self.assertIn("DYNAMIC_RANGE", info.methods)
        self.assertIn("STATIC_RANGE", info.methods)
        self.assertIn("Conv", info.quantizable_op_types)
        self.assertGreater(info.limits.model_chunk_bytes, 0)
        self.assertGreater(info.limits.max_calibration_batches, 0)
        supported = [(c.method, c.op_set, c.precision) for c in info.capabilities if c.supported]
        self.assertIn(("DYNAMIC_RANGE", options_pb2.TF, options_pb2.PRECISION_W8A8), supported)
        self.assertIn(("STATIC_RANGE", options_pb2.TF, options_pb2.PRECISION_W8A8), supported)

    def test_quantize_dynamic_range_int8_weights(self):
        progress = []
        streamed_reports = []
        with Stopwatch() as sw:
            result = self.client.quantize(self.model_bytes, DYNAMIC,
                                          on_progress=progress.append,
                                          on_tensor_report=streamed_reports.append)
        measured("python client DYNAMIC_RANGE digits", sw.seconds)
        self.assertEqual(result.summary.method, "DYNAMIC_RANGE")
        self.assertFalse(result.summary.model_unchanged)
        self.assertEqual(result.summary.input_bytes, len(self.model_bytes))
        self.assertEqual(result.summary.output_bytes, len(result.model))
        self.assertIn(service_pb2.STAGE_QUANTIZE, {p.stage for p in progress})
        self.assertEqual(streamed_reports, result.reports)
        # Default threshold 1024 elements: 2.weight and 5.weight (README).
        self.assertEqual(sorted(r.tensor_name for r in result.reports), ["2.weight", "5.weight"])
        self.assertEqual(result.summary.quantized_tensors, 2)

        model = onnx.load_from_string(result.model)
        onnx.checker.check_model(model)
        inits = initializers(model)
        originals = initializers(self.float_model)
        dequantize = {n.input[0]: n for n in nodes_of(model, "DequantizeLinear")}
        for report in result.reports:
            q_name = dequantize_input = None
            for name, node in dequantize.items():
                if name in inits and inits[name].data_type == INT8 and \
                        name.startswith(report.tensor_name):
                    q_name, dequantize_input = name, node
            self.assertIsNotNone(q_name, f"no INT8 initializer for {report.tensor_name}")
            self.assertNotIn(report.tensor_name, inits, "the float weight is still there")
            q = numpy_helper.to_array(inits[q_name]).astype(np.float64)
            scale = numpy_helper.to_array(inits[dequantize_input.input[1]]).astype(np.float64)
            axis = next((a.i for a in dequantize_input.attribute if a.name == "axis"), 1)
            w = numpy_helper.to_array(originals[report.tensor_name]).astype(np.float64)
            # Per-channel symmetric narrow range: [-127, 127], zero point 0.
            self.assertLessEqual(np.abs(q).max(), 127)
            shape = [1] * w.ndim
            shape[axis] = -1
            dq = q * scale.reshape(shape)
            self.assertTrue(np.all(np.abs(w - dq) <= scale.reshape(shape) / 2 * (1 + 1e-5)))
            sqnr = 10 * np.log10(np.sum(w ** 2) / np.sum((w - dq) ** 2))
            print(f"measured: {report.tensor_name} SQNR {sqnr:.2f} dB "
                  f"(server reported {report.sqnr_db:.2f})")
            self.assertAlmostEqual(sqnr, report.sqnr_db, delta=0.05)

    def test_quantize_from_path_with_text_options(self):
        # A path and text-format options, like quantctl --options.
        result = self.client.quantize(
            MODEL, 'quantization_method { experimental_method: DYNAMIC_RANGE } '
                   'min_num_elements_for_weights: -1')
        self.assertEqual(sorted(r.tensor_name for r in result.reports),
                         ["0.weight", "2.weight", "5.weight", "7.weight"])

    def test_no_method_returns_the_model_unchanged(self):
        result = self.client.quantize(self.model_bytes)
        self.assertTrue(result.summary.model_unchanged)
        self.assertEqual(result.model, self.model_bytes)

    def test_quantize_static_range_with_npy_batches(self):
        batches = NpyBatches(CALIB_X, batch_size=16)
        self.assertEqual(batches.num_batches, 4)
        progress = []
        with Stopwatch() as sw:
            inline = self.client.quantize(self.model_bytes, STATIC_ALL_WEIGHTS,
                                          calibration_batches=batches,
                                          on_progress=progress.append)
        measured("python client STATIC_RANGE digits, 64 samples inline", sw.seconds)
        self.assertEqual(inline.summary.method, "STATIC_RANGE")
        self.assertIn(service_pb2.STAGE_CALIBRATE, {p.stage for p in progress})
        model = onnx.load_from_string(inline.model)
        onnx.checker.check_model(model)
        inits = initializers(model)
        quantize_nodes = nodes_of(model, "QuantizeLinear")
        self.assertGreater(len(quantize_nodes), 0)
        # Activations: uint8 (asymmetric) with calibrated scales.
        for node in quantize_nodes:
            zero_point = inits[node.input[2]]
            if zero_point.data_type == UINT8:
                break
        else:
            self.fail("no uint8 activation QuantizeLinear")
        graph_input = self.float_model.graph.input[0].name
        input_q = [n for n in quantize_nodes if n.input[0] == graph_input]
        self.assertEqual(len(input_q), 1, "the graph input is not quantized")
        x = np.load(CALIB_X)
        scale = float(numpy_helper.to_array(inits[input_q[0].input[1]]))
        # The [0, max] range of the images, on 255 steps.
        self.assertAlmostEqual(scale, (x.max() - min(x.min(), 0.0)) / 255, delta=1e-6)

        # The same ranges through Calibrate give the same model.
        calibration = self.client.calibrate(self.model_bytes, NpyBatches(CALIB_X, batch_size=16))
        two_calls = self.client.quantize(self.model_bytes, STATIC_ALL_WEIGHTS,
                                         calibration=calibration)
        self.assertEqual(two_calls.model, inline.model)

    def test_quantize_with_gptq(self):
        reports = []
        result = self.client.quantize(self.model_bytes, STATIC,
                                      calibration_batches=NpyBatches(CALIB_X, batch_size=16),
                                      weight_algorithm="gptq", gptq_act_order=True,
                                      cross_check=True, on_tensor_report=reports.append)
        gptq = [r for r in reports if r.weight_algorithm == "gptq"]
        rounded = [r for r in reports if r.weight_algorithm == "rtn"]
        self.assertGreater(len(gptq), 0)
        for r in gptq:
            self.assertGreater(r.input_rows, 0)
            self.assertGreaterEqual(r.output_sqnr_db, r.rtn_output_sqnr_db - 0.5)
            # The cross-check ran and GPTQ won it.
            self.assertGreater(r.held_out_output_sqnr_db, r.held_out_rtn_output_sqnr_db)
        for r in rounded:  # GPTQ could not run, or lost its cross-check.
            self.assertTrue("GPTQ was asked for but not applied" in r.note
                            or "on the other half" in r.note, r.note)
        self.assertTrue(any("GPTQ" in v for v in result.summary.validations))
        unchecked = []
        self.client.quantize(self.model_bytes, STATIC,
                             calibration_batches=NpyBatches(CALIB_X, batch_size=16),
                             weight_algorithm="gptq", on_tensor_report=unchecked.append)
        self.assertGreaterEqual(len([r for r in unchecked if r.weight_algorithm == "gptq"]),
                                len(gptq))
        for r in unchecked:
            self.assertEqual(r.held_out_output_sqnr_db, 0)
        with self.assertRaises(ValueError):
            self.client.quantize(self.model_bytes, STATIC, weight_algorithm="hqq")

    def test_quantize_with_an_agreement_target(self):
        result = self.client.quantize(self.model_bytes, STATIC,
                                      calibration_batches=NpyBatches(CALIB_X, batch_size=16),
                                      target_agreement=1.0, allowed_precisions="w8a8,full")
        search = result.summary.accuracy_search
        self.assertEqual(search.target_agreement, 1.0)
        self.assertEqual(list(search.allowed_precisions),
                         [options_pb2.PRECISION_W8A8, options_pb2.PRECISION_FULL])
        self.assertGreaterEqual(len(search.rounds), 1)
        for r in search.rounds:
            self.assertGreaterEqual(r.top1_agreement, 0.0)
            self.assertLessEqual(r.top1_agreement, 1.0)
        chosen = search.rounds[search.chosen_round]
        self.assertEqual(search.met, chosen.top1_agreement >= 1.0)
        with self.assertRaises(ValueError):
            self.client.quantize(self.model_bytes, STATIC, target_agreement=0.9,
                                 allowed_precisions=["w8a8", "int4"])

    def test_quantize_with_smoothquant_and_equalize(self):
        for smoothquant in (True, 0.75, "auto"):
            result = self.client.quantize(self.model_bytes, STATIC,
                                          calibration_batches=NpyBatches(CALIB_X, batch_size=16),
                                          smoothquant=smoothquant, equalize=True)
            notes = " ".join(result.summary.validations)
            self.assertIn("smoothquant", notes)
            self.assertIn("equalize", notes)
            algorithms = {c.algorithm for c in result.summary.channel_scalings}
            self.assertIn("equalize", algorithms)
            for c in result.summary.channel_scalings:
                if c.algorithm == "smoothquant" and smoothquant != "auto":
                    self.assertAlmostEqual(c.alpha, 0.5 if smoothquant is True else 0.75)
        for bad in (1.5, -0.1, "sometimes"):
            with self.assertRaises(ValueError):
                self.client.quantize(self.model_bytes, STATIC, smoothquant=bad)

    def test_calibrate_ranges(self):
        x = np.load(CALIB_X)
        progress = []
        result = self.client.calibrate(MODEL, NpyBatches(CALIB_X, batch_size=10),
                                       on_progress=progress.append)
        self.assertEqual(result.method, "min_max")
        self.assertEqual(result.batch_count, 7)  # 64 samples by 10.
        graph_input = self.float_model.graph.input[0].name
        self.assertEqual(result.ranges[graph_input].min, float(x.min()))
        self.assertEqual(result.ranges[graph_input].max, float(x.max()))
        relu = [n.output[0] for n in self.float_model.graph.node if n.op_type == "Relu"]
        for name in relu:
            self.assertEqual(result.ranges[name].min, 0.0)
            self.assertGreater(result.ranges[name].max, 0.0)
        self.assertEqual(result.proto.batch_count, 7)

    def test_calibrate_observed_activations_and_method(self):
        # A training job that already ran the model sends what it observed.
        relu = next(n.output[0] for n in self.float_model.graph.node if n.op_type == "Relu")
        rng = np.random.default_rng(7)
        observed = [rng.uniform(0.0, 1.0 + i, size=(4, 16, 8, 8)).astype(np.float32)
                    for i in range(3)]
        result = self.client.calibrate(self.model_bytes, ({relu: a} for a in observed),
                                       method="last_value")
        self.assertEqual(result.method, "last_value")
        self.assertEqual(result.batch_count, 3)
        self.assertEqual(result.ranges[relu].max, float(observed[-1].max()))
        self.assertFalse(result.ranges[relu].unbounded)

    def test_calibrate_reports_a_masked_activation_unbounded(self):
        # An activation holding -inf (an additive attention mask) is reported
        # as unbounded, not as a range and not as an error.
        relu = next(n.output[0] for n in self.float_model.graph.node if n.op_type == "Relu")
        a = np.ones((4, 16, 8, 8), np.float32)
        a[0, 0, 0, 0] = -np.inf
        result = self.client.calibrate(self.model_bytes, [{relu: a}])
        self.assertTrue(result.ranges[relu].unbounded)
        self.assertTrue(next(r for r in result.proto.ranges if r.tensor_name == relu).unbounded)

    def test_bad_options_are_invalid_argument(self):
        with self.assertRaises(QuantdError) as ctx:
            self.client.quantize(self.model_bytes,
                                 {"quantization_method": {"method": "METHOD_UNSPECIFIED"}})
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("METHOD_UNSPECIFIED", ctx.exception.message)
        self.assertTrue(str(ctx.exception).startswith("INVALID_ARGUMENT: "))

    def test_dynamic_range_with_activation_params_is_invalid_argument(self):
        with self.assertRaises(QuantdError) as ctx:
            self.client.quantize(self.model_bytes, DYNAMIC, activation_params={"bits": 8})
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("activation_params", ctx.exception.message)

    def test_bad_model_is_invalid_argument(self):
        with self.assertRaises(QuantdError) as ctx:
            self.client.quantize(b"this is not an ONNX model", DYNAMIC)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(ctx.exception.message)

    def test_static_range_without_ranges_is_failed_precondition(self):
        with self.assertRaises(QuantdError) as ctx:
            self.client.quantize(self.model_bytes, STATIC)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_unknown_option_field_is_refused_before_sending(self):
        with self.assertRaises(ValueError) as ctx:
            self.client.quantize(self.model_bytes, {"quantisation_method": {}})
        self.assertIn("quantisation_method", str(ctx.exception))

    def test_batch_source_error_cancels_the_call_and_is_raised_as_is(self):
        def batches():
            yield np.load(CALIB_X)[:8]
            raise OSError("dataset shard went away")
        with self.assertRaisesRegex(OSError, "dataset shard went away"):
            self.client.calibrate(self.model_bytes, batches())
        # The channel is still usable.
        self.assertEqual(self.client.health(), ServingStatus.SERVING)

    def test_bad_batch_is_invalid_argument_naming_the_tensor(self):
        with self.assertRaises(QuantdError) as ctx:
            self.client.calibrate(self.model_bytes, [{"no_such_tensor": np.zeros((1, 3), np.float32)}])
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("no_such_tensor", ctx.exception.message)

    def test_results_save_atomically(self):
        result = self.client.quantize(self.model_bytes, DYNAMIC)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.onnx")
            result.save(path)
            self.assertEqual(os.listdir(tmp), ["out.onnx"])
            onnx.checker.check_model(onnx.load(path))

    def test_external_data_is_read_in_and_can_be_written_out(self):
        with tempfile.TemporaryDirectory() as tmp:
            saved = os.path.join(tmp, "model", "digits.onnx")
            os.makedirs(os.path.dirname(saved))
            self.save_with_external_data(saved, "weights.bin")
            with open(saved, "rb") as f:
                self.assertTrue(uses_external_data(f.read()))
            self.assertFalse(uses_external_data(self.model_bytes))
            inline = self.client.quantize(self.model_bytes, DYNAMIC)
            self.assertEqual(inline.external_data, b"")
            # Sent with its data streamed beside it, and returned that way.
            external = self.client.quantize(saved, DYNAMIC)
            self.assertGreater(len(external.external_data), 0)
            self.assertTrue(uses_external_data(external.model))
            self.assertEqual(inline_streamed_data(external.model, external.external_data),
                             inline.model)
            one_file = os.path.join(tmp, "one.onnx")
            external.save(one_file, save_as_external_data=False)
            with open(one_file, "rb") as f:
                self.assertEqual(f.read(), inline.model)

            out = os.path.join(tmp, "out", "w8.onnx")
            os.makedirs(os.path.dirname(out))
            external.save(out, save_as_external_data=True)
            self.assertEqual(sorted(os.listdir(os.path.dirname(out))), ["w8.onnx", "w8.onnx.data"])
            with open(out, "rb") as f:
                self.assertTrue(uses_external_data(f.read()))
            # ONNX's own reader takes it back to the same model (it marks the
            # tensors it read in DEFAULT explicitly).
            loaded = onnx.load(out)
            for t in loaded.graph.initializer:
                t.ClearField("data_location")
            self.assertEqual(loaded.SerializeToString(), inline.model)

            # Locations that leave the model's directory are refused by name.
            model = onnx.load(saved, load_external_data=False)
            tensor = next(t for t in model.graph.initializer
                          if t.data_location == onnx.TensorProto.EXTERNAL)
            for bad, fragment in (("../model/weights.bin", "no '..'"),
                                  (os.path.join(tmp, "model", "weights.bin"), "no absolute"),
                                  ("missing.bin", "not a readable file")):
                for e in tensor.external_data:
                    if e.key == "location":
                        e.value = bad
                for read in (inline_external_data, open_for_streaming):
                    with self.assertRaises(ValueError) as cm:
                        read(model.SerializeToString(), os.path.dirname(saved))
                    self.assertIn(fragment, str(cm.exception))
                    self.assertIn(f"'{tensor.name}'", str(cm.exception))

    def test_save_to_writes_external_data_as_it_arrives(self):
        with tempfile.TemporaryDirectory() as tmp:
            saved = os.path.join(tmp, "digits.onnx")
            self.save_with_external_data(saved, "w.bin")
            held = self.client.quantize(saved, DYNAMIC)
            out_dir = os.path.join(tmp, "out")
            os.makedirs(out_dir)
            out = os.path.join(out_dir, "w8.onnx")
            result = self.client.quantize(saved, DYNAMIC, save_to=out)
            self.assertEqual(result.saved_to, out)
            self.assertEqual(result.external_data, b"")  # Never held.
            self.assertEqual(result.external_data_bytes, len(held.external_data))
            self.assertEqual(sorted(os.listdir(out_dir)), ["w8.onnx", "w8.onnx.data"])
            with open(out + ".data", "rb") as f:
                self.assertEqual(f.read(), held.external_data)
            loaded = onnx.load(out)
            for t in loaded.graph.initializer:
                t.ClearField("data_location")
            self.assertEqual(loaded.SerializeToString(),
                             inline_streamed_data(held.model, held.external_data))
            with self.assertRaises(ValueError):
                result.save(os.path.join(tmp, "again.onnx"))
            # Inlined by request; an inline model is saved as it came.
            one = os.path.join(tmp, "one.onnx")
            self.client.quantize(saved, DYNAMIC, save_to=one, save_as_external_data=False)
            with open(one, "rb") as f:
                self.assertEqual(f.read(), inline_streamed_data(held.model, held.external_data))
            plain = os.path.join(tmp, "plain.onnx")
            r = self.client.quantize(self.model_bytes, DYNAMIC, save_to=plain)
            with open(plain, "rb") as f:
                self.assertEqual(f.read(), r.model)
            # A failed call leaves nothing behind, not even a temporary file.
            before = sorted(os.listdir(tmp))
            with self.assertRaises(QuantdError):
                self.client.quantize(saved, {"quantization_method": {"experimental_method":
                                                                     "STATIC_RANGE"}},
                                     save_to=os.path.join(tmp, "never.onnx"))
            self.assertEqual(sorted(os.listdir(tmp)), before)
            # Chunks written, then the call broke: the writer is discarded.
            writer = external_data.StreamedModelWriter(os.path.join(tmp, "broken.onnx"))
            writer.write(b"part of a stream")
            self.assertEqual(len(os.listdir(tmp)), len(before) + 1)  # The temporary file.
            writer.discard()
            self.assertEqual(sorted(os.listdir(tmp)), before)
            # A model naming bytes past those received: nothing written.
            writer = external_data.StreamedModelWriter(os.path.join(tmp, "short.onnx"))
            writer.write(b"x" * 100)
            with self.assertRaises(ValueError):
                writer.finish(held.model, write=lambda path, data: None)
            self.assertEqual(sorted(os.listdir(tmp)), before)

    def test_a_streamed_model_reads_its_data_on_demand(self):
        with tempfile.TemporaryDirectory() as tmp:
            saved = os.path.join(tmp, "digits.onnx")
            self.save_with_external_data(saved, "w.bin")
            with open(saved, "rb") as f:
                streamed = open_for_streaming(f.read(), tmp)
            self.assertGreater(streamed.counts["tensors"], 0)
            self.assertEqual(streamed.size, streamed.counts["bytes"])
            whole = b"".join(streamed.read(at, min(1000, streamed.size - at))
                             for at in range(0, streamed.size, 1000))
            back = onnx.load_from_string(inline_streamed_data(streamed.model, whole))
            self.assertFalse(uses_external_data(back.SerializeToString()))
            self.assertEqual({t.name: numpy_helper.to_array(t).tobytes()
                              for t in back.graph.initializer},
                             {t.name: numpy_helper.to_array(t).tobytes()
                              for t in onnx.load_from_string(self.model_bytes).graph.initializer})
            with self.assertRaises(ValueError):
                streamed.read(streamed.size - 1, 2)
            # Calibrate takes the path the same way.
            result = self.client.calibrate(saved, NpyBatches(CALIB_X, batch_size=16),
                                           method="min_max")
            self.assertGreater(result.batch_count, 0)
            self.assertGreater(len(result.ranges), 0)


def make_pki(directory: str) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    def run(*argv):
        subprocess.run(argv, check=True, capture_output=True, cwd=directory)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=quantd test ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for serial, (name, ext) in enumerate([
            ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
            ("client", "extendedKeyUsage=clientAuth\n")], start=2):
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write(ext)
        run("openssl", "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem",
            "-extfile", f"{name}.ext")


class ConnectionTest(unittest.TestCase):

    def test_unreachable_server_is_unavailable(self):
        # A port nobody listens on (the server's, after it stopped).
        server = QuantdServer()
        target = server.target
        server.stop()
        with QuantdClient(target, timeout=10, retries=1) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.server_info()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_address_list_is_balanced(self):
        with QuantdClient([_server.target, _server.target], timeout=30) as client:
            self.assertTrue(client.target.startswith("ipv4:"))
            self.assertEqual(client.health(), ServingStatus.SERVING)
        with self.assertRaises(ValueError):
            QuantdClient(["quantd-a:50051", "quantd-b:50051"])

    def test_bearer_token(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory())
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write("s3cret\n")
        server = QuantdServer([f"--auth_token_file={token_file}"])
        self.addCleanup(server.stop)
        with QuantdClient(server.target, timeout=30) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.server_info()
            self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(client.health(), ServingStatus.SERVING)  # Health stays open.
        with QuantdClient(server.target, timeout=30, token="s3cret") as client:
            self.assertTrue(client.server_info().version)
            result = client.quantize(MODEL, DYNAMIC)
            self.assertEqual(result.summary.quantized_tensors, 2)

    @unittest.skipIf(shutil.which("openssl") is None, "needs the openssl CLI")
    def test_mutual_tls(self):
        pki = self.enterContext(tempfile.TemporaryDirectory())
        make_pki(pki)
        server = QuantdServer([f"--tls_cert_file={pki}/server.pem",
                               f"--tls_key_file={pki}/server.key",
                               f"--tls_client_ca_file={pki}/ca.pem"])
        self.addCleanup(server.stop)
        tls = TlsOptions.from_files(f"{pki}/ca.pem", f"{pki}/client.pem", f"{pki}/client.key")
        with QuantdClient(server.target, timeout=30, tls=tls) as client:
            self.assertEqual(client.health(), ServingStatus.SERVING)
            self.assertEqual(client.quantize(MODEL, DYNAMIC).summary.quantized_tensors, 2)
        # No client certificate, or no TLS at all: the handshake fails.
        for tls in (TlsOptions.from_files(f"{pki}/ca.pem"), None):
            with QuantdClient(server.target, timeout=10, tls=tls, retries=0) as client:
                with self.assertRaises(QuantdError) as ctx:
                    client.server_info()
                self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    unittest.main()
