"""The client against in-process fake servers: its retry policy (UNAVAILABLE
is retried up to `retries` extra attempts, every other code is not), the
request stream it writes, and its checks of the response stream."""

import os
import threading
import unittest
from concurrent import futures

import grpc
import numpy as np

from quantd_client import QuantdClient, QuantdError, options_pb2, service_pb2
from quantd_client._proto import service_pb2_grpc


class FlakyService(service_pb2_grpc.QuantizationServiceServicer):
    """Fails the first `failures` GetServerInfo calls with `code`."""

    def __init__(self, failures: int, code: grpc.StatusCode):
        self.failures = failures
        self.code = code
        self.calls = 0
        self.metadata = []
        self._lock = threading.Lock()

    def GetServerInfo(self, request, context):
        with self._lock:
            self.calls += 1
            self.metadata.append(dict(context.invocation_metadata()))
            failing = self.calls <= self.failures
        if failing:
            context.abort(self.code, f"attempt {self.calls} fails")
        return service_pb2.ServerInfo(version="fake")

    def Quantize(self, request_iterator, context):
        """Records the request stream; echoes the model back reversed."""
        with self._lock:
            self.calls += 1
            failing = self.calls <= self.failures
        if failing:
            context.abort(self.code, f"attempt {self.calls} fails")
        requests = list(request_iterator)
        self.requests = [r.WhichOneof("payload") for r in requests]
        self.config = requests[0].config
        self.chunks = [r.model_chunk for r in requests if r.HasField("model_chunk")]
        self.batches = [r.calibration_batch for r in requests if r.HasField("calibration_batch")]
        model = b"".join(self.chunks)
        yield service_pb2.QuantizeResponse(progress=service_pb2.Progress(stage=1, done=1, total=1))
        yield service_pb2.QuantizeResponse(model_chunk=model[::-1])
        yield service_pb2.QuantizeResponse(summary=service_pb2.QuantizeSummary(
            input_bytes=len(model), output_bytes=len(model)))


class FakeServerTest(unittest.TestCase):

    def serve(self, service: service_pb2_grpc.QuantizationServiceServicer) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service_pb2_grpc.add_QuantizationServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        return f"127.0.0.1:{port}"


class RetryTest(FakeServerTest):

    def test_unavailable_is_retried(self):
        service = FlakyService(failures=2, code=grpc.StatusCode.UNAVAILABLE)
        with QuantdClient(self.serve(service), timeout=30, retries=2, token="t") as client:
            self.assertEqual(client.server_info().version, "fake")
        self.assertEqual(service.calls, 3)
        # Every attempt carries the token.
        self.assertTrue(all(m.get("authorization") == "Bearer t" for m in service.metadata))

    def test_cancelled_by_a_replica_shutting_down_is_retried(self):
        service = FlakyService(failures=1, code=grpc.StatusCode.CANCELLED)
        with QuantdClient(self.serve(service), timeout=30, retries=2) as client:
            self.assertEqual(client.server_info().version, "fake")
        self.assertEqual(service.calls, 2)

    def test_retries_are_bounded(self):
        service = FlakyService(failures=10, code=grpc.StatusCode.UNAVAILABLE)
        with QuantdClient(self.serve(service), timeout=30, retries=1) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.server_info()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(ctx.exception.message, "attempt 2 fails (gave up after 2 attempts)")
        self.assertEqual(service.calls, 2)

    def test_other_codes_are_not_retried(self):
        for code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED,
                     grpc.StatusCode.DEADLINE_EXCEEDED):
            service = FlakyService(failures=1, code=code)
            with QuantdClient(self.serve(service), timeout=30, retries=4) as client:
                with self.assertRaises(QuantdError) as ctx:
                    client.server_info()
            self.assertEqual(ctx.exception.code, code)
            self.assertEqual(service.calls, 1)

    def test_quantize_stream_order_and_retry(self):
        # Config first, then the model in chunks of chunk_bytes, then the
        # batches; the first attempt fails UNAVAILABLE before reading anything
        # and the client sends the whole stream again.
        service = FlakyService(failures=1, code=grpc.StatusCode.UNAVAILABLE)
        model = bytes(range(256)) * 40  # 10240 bytes.
        with QuantdClient(self.serve(service), timeout=30, retries=1, chunk_bytes=4096) as client:
            result = client.quantize(
                model, {"quantization_method": {"experimental_method": "STATIC_RANGE"}},
                calibration_batches=[np.zeros((2, 3), np.float32), {"x": np.ones(4, np.int64)}])
        self.assertEqual(service.calls, 2)
        self.assertEqual(service.requests, ["config"] + ["model_chunk"] * 3 +
                         ["calibration_batch"] * 2)
        self.assertEqual([len(c) for c in service.chunks], [4096, 4096, 2048])
        self.assertEqual(service.config.model_size_bytes, len(model))
        self.assertEqual(service.config.options.quantization_method.experimental_method,
                         options_pb2.QuantizationMethod.STATIC_RANGE)
        self.assertEqual([t.name for b in service.batches for t in b.tensors], ["", "x"])
        self.assertEqual(result.model, model[::-1])

    def test_no_retries(self):
        service = FlakyService(failures=1, code=grpc.StatusCode.UNAVAILABLE)
        with QuantdClient(self.serve(service), timeout=30, retries=0) as client:
            with self.assertRaises(QuantdError):
                client.server_info()
        self.assertEqual(service.calls, 1)
        with self.assertRaises(ValueError):
            QuantdClient("127.0.0.1:1", retries=11)


class ReadThenFailService(service_pb2_grpc.QuantizationServiceServicer):
    """Reads the whole request stream, then fails the first `failures`
    calls with UNAVAILABLE, after sending `progress_first` progress events;
    later calls succeed (the model echoed back)."""

    def __init__(self, failures: int, progress_first: int = 0):
        self.failures = failures
        self.progress_first = progress_first
        self.calls = 0
        self.batch_counts = []

    def Quantize(self, request_iterator, context):
        requests = list(request_iterator)
        self.calls += 1
        self.batch_counts.append(sum(r.HasField("calibration_batch") for r in requests))
        model = b"".join(r.model_chunk for r in requests if r.HasField("model_chunk"))
        if self.calls <= self.failures:
            for _ in range(self.progress_first):
                yield service_pb2.QuantizeResponse(progress=service_pb2.Progress(stage=1))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"attempt {self.calls} fails")
        yield service_pb2.QuantizeResponse(model_chunk=model)
        yield service_pb2.QuantizeResponse(summary=service_pb2.QuantizeSummary(
            input_bytes=len(model), output_bytes=len(model)))


class ClientRetryTest(FakeServerTest):
    """What gRPC's own retry policy could not do: retry a stream bigger
    than its 256 KiB replay buffer, after the server read all of it."""

    def test_a_big_stream_read_to_the_end_is_sent_again(self):
        service = ReadThenFailService(failures=2)
        model = os.urandom(3 << 20)  # 3 chunks of 1 MiB.
        batches = [np.full((2, 3), i, np.float32) for i in range(4)]
        with QuantdClient(self.serve(service), timeout=60, retries=2) as client:
            result = client.quantize(model, calibration_batches=batches)
        self.assertEqual(service.calls, 3)
        self.assertEqual(service.batch_counts, [4, 4, 4])
        self.assertEqual(result.model, model)

    def test_a_generator_already_read_is_not_retried(self):
        service = ReadThenFailService(failures=1)
        batches = (np.zeros((2, 3), np.float32) for _ in range(2))
        with QuantdClient(self.serve(service), timeout=60, retries=2) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.quantize(b"model", calibration_batches=batches)
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("not retried: the batch source is a one-shot iterator",
                      ctx.exception.message)
        self.assertEqual(service.calls, 1)

    def test_a_call_that_has_responded_is_not_retried(self):
        # Its progress already reached the caller's callback.
        service = ReadThenFailService(failures=1, progress_first=1)
        seen = []
        with QuantdClient(self.serve(service), timeout=60, retries=2) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.quantize(b"model", on_progress=seen.append)
        self.assertEqual(ctx.exception.message, "attempt 1 fails")
        self.assertEqual((service.calls, len(seen)), (1, 1))

    def test_the_deadline_covers_the_retries(self):
        service = FlakyService(failures=10, code=grpc.StatusCode.UNAVAILABLE)
        with QuantdClient(self.serve(service), timeout=0.3, retries=10) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.server_info()
        self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("not retried: the deadline falls before the next attempt",
                      ctx.exception.message)
        self.assertLess(service.calls, 4)


class ScriptedService(service_pb2_grpc.QuantizationServiceServicer):
    """Answers every Quantize with `responses`, after reading the stream."""

    def __init__(self, responses):
        self.responses = responses

    def Quantize(self, request_iterator, context):
        for _ in request_iterator:
            pass
        yield from self.responses


class ProtocolTest(FakeServerTest):

    def quantize(self, responses):
        with QuantdClient(self.serve(ScriptedService(responses)), timeout=30) as client:
            with self.assertRaises(QuantdError) as ctx:
                client.quantize(b"model")
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INTERNAL)
        return ctx.exception.message

    def test_protocol_errors_are_internal(self):
        summary = service_pb2.QuantizeResponse(
            summary=service_pb2.QuantizeSummary(output_bytes=5))
        chunk = service_pb2.QuantizeResponse(model_chunk=b"model")
        self.assertIn("sent 0 summaries", self.quantize([chunk]))
        self.assertIn("sent 2 summaries", self.quantize([chunk, summary, summary]))
        self.assertIn("messages after one", self.quantize([summary, chunk]))
        self.assertIn("received 10 model bytes but the summary says 5",
                      self.quantize([chunk, chunk, summary]))


if __name__ == "__main__":
    unittest.main()
