"""Runs examples/training_job/train_and_quantize.py end to end against a real
quantd: train, Calibrate with the observed batches, STATIC_RANGE Quantize."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import onnx

from quantd_server import SOURCE_DIR, QuantdServer, measured

SCRIPT = os.path.join(SOURCE_DIR, "examples", "training_job", "train_and_quantize.py")
ORT_NODE_MODULES = os.path.join(SOURCE_DIR, "build", "ort", "node_modules", "onnxruntime-node")


class TrainingJobTest(unittest.TestCase):

    def test_trains_calibrates_and_quantizes(self):
        server = QuantdServer()
        self.addCleanup(server.stop)
        tmp = self.enterContext(tempfile.TemporaryDirectory())
        output = os.path.join(tmp, "job.int8.onnx")
        args = [sys.executable, SCRIPT, f"--server={server.target}", f"--output={output}",
                "--steps=100", "--calibration_batches=4", "--timeout=60"]
        ort = shutil.which("node") is not None and os.path.isdir(ORT_NODE_MODULES)
        if ort:
            args.append("--ort_eval")
        start = time.perf_counter()
        run = subprocess.run(args, capture_output=True, text=True, timeout=300)
        measured("training_job example end to end", time.perf_counter() - start)
        print(run.stdout)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("calibrated 4 batches", run.stdout)

        model = onnx.load(output)
        onnx.checker.check_model(model)
        ops = [n.op_type for n in model.graph.node]
        self.assertIn("QuantizeLinear", ops)  # Static activations.
        self.assertIn("DequantizeLinear", ops)
        int8 = [i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8]
        self.assertTrue(int8, "no INT8 weights")
        if ort:
            match = re.search(r"float ([0-9.]+), int8 ([0-9.]+)", run.stdout)
            self.assertIsNotNone(match, run.stdout)
            float_acc, int8_acc = float(match.group(1)), float(match.group(2))
            print(f"measured: ONNX Runtime accuracy float {float_acc}, int8 {int8_acc}")
            # 100 steps reach ~0.9 on digits; int8 must stay close to float.
            self.assertGreater(float_acc, 0.8)
            self.assertGreater(int8_acc, float_acc - 0.03)


if __name__ == "__main__":
    unittest.main()
