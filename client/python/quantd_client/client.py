"""QuantdClient: the Python SDK of quantd (quantd.v1.QuantizationService).

It follows the C++ SDK (client/quantd_client.cc): the same request streams
(config, then the model in chunks, then calibration batches), the same
protocol checks on the response streams, the same channel setup
(round_robin over every resolved address, keepalive), the same retries
(its own, of calls that failed with UNAVAILABLE or CANCELLED before any
response, and nothing else), and the same bearer token rules.
"""

import collections.abc
import enum
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import (Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, Union)

import grpc
from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from . import external_data
from ._proto import options_pb2, service_pb2, service_pb2_grpc
from .batches import BatchLike, PathLike, to_tensor_batch

Progress = service_pb2.Progress
TensorReport = service_pb2.TensorReport
QuantizeSummary = service_pb2.QuantizeSummary
ServerInfo = service_pb2.ServerInfo

# An options argument: the message, its protobuf JSON form as a dict
# ({"quantization_method": {"experimental_method": "DYNAMIC_RANGE"}}), or
# protobuf text format (what quantctl --options reads).
OptionsLike = Union[options_pb2.QuantizationOptions, Mapping, str]
ModelLike = Union[bytes, bytearray, memoryview, PathLike]
_T = TypeVar("_T")

# Keepalive agreed with the server (server/server.cc accepts pings every
# 10 s): detects a dead connection during a long job.
_KEEPALIVE_TIME_MS = 30 * 1000
_KEEPALIVE_TIMEOUT_MS = 10 * 1000

# Backoff between attempts, as in the C++ SDK: 0.2 s doubling up to 2 s,
# each with a random jitter of +-20%.
_INITIAL_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 2.0
# Retried before any response: a replica refusing (draining, restarting) or
# cancelling the call as it shuts down.
_RETRIED_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
_MAX_RETRIES = 10


class QuantdError(Exception):
    """A failed call: the gRPC status code and the server's message.

    str() is "CODE: message", like quantctl's errors. Protocol violations by
    the server (no summary, bytes that do not add up) are INTERNAL."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> "QuantdError":
        return cls(error.code(), error.details() or "")


class ServingStatus(enum.IntEnum):
    """grpc.health.v1.HealthCheckResponse.ServingStatus."""
    UNKNOWN = 0
    SERVING = 1
    NOT_SERVING = 2
    SERVICE_UNKNOWN = 3


@dataclass(frozen=True)
class TlsOptions:
    """Transport security: PEM contents. The server is verified against
    `root_certs` (None: the system's roots); `cert_chain` and `private_key`
    (both or neither) are the client certificate for mutual TLS."""
    root_certs: Optional[bytes] = None
    cert_chain: Optional[bytes] = None
    private_key: Optional[bytes] = None

    @classmethod
    def from_files(cls, ca_file: Optional[PathLike] = None, cert_file: Optional[PathLike] = None,
                   key_file: Optional[PathLike] = None) -> "TlsOptions":
        def read(path):
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()
        return cls(read(ca_file), read(cert_file), read(key_file))


@dataclass
class QuantizeResult:
    """A successful Quantize: the output model, one report per quantized
    tensor (in the order the server sent them), and the summary."""
    model: bytes
    summary: QuantizeSummary
    reports: List[TensorReport] = field(default_factory=list)
    # The output's external data stream: not empty when the model's large
    # tensors came back beside it (always for a model sent with external
    # data) and quantize() was not given save_to; save() writes both.
    external_data: bytes = b""
    # The stream's size, also when it went straight to a file (save_to).
    external_data_bytes: int = 0
    # Where quantize(save_to=...) wrote the result.
    saved_to: Optional[str] = None

    def save(self, path: PathLike, save_as_external_data: Optional[bool] = None) -> None:
        """Writes the model atomically (a temporary file renamed in place).
        save_as_external_data: tensors of 1 KiB and more go to path + ".data"
        beside it, as onnx.save_model(..., save_as_external_data=True) writes
        them (quantctl --save_as_external_data; needs the onnx package);
        None (the default) keeps the form the result came in. ValueError for
        a result whose external data went straight to a file (save_to):
        it is there already."""
        if self.external_data_bytes and not self.external_data:
            raise ValueError(f"this result's external data was written to {self.saved_to}.data "
                             f"as it arrived; the model is {self.saved_to}")
        if save_as_external_data is None:
            save_as_external_data = bool(self.external_data)
        if self.external_data:
            if save_as_external_data:
                external_data.write_streamed_model(self.model, self.external_data, path,
                                                   write=_write_atomically)
            else:
                _write_atomically(path, external_data.inline_streamed_data(
                    self.model, self.external_data))
        elif save_as_external_data:
            external_data.write_model_with_external_data(self.model, path,
                                                         write=_write_atomically)
        else:
            _write_atomically(path, self.model)


@dataclass(frozen=True)
class TensorRange:
    min: float
    max: float
    axis: int = 0
    channel_min: Tuple[float, ...] = ()
    channel_max: Tuple[float, ...] = ()
    # An infinity or a value of magnitude >= 1e30 was seen (an additive
    # mask): min and max carry no range, and STATIC_RANGE leaves it float.
    unbounded: bool = False


@dataclass
class CalibrationResult:
    """Activation ranges from Calibrate, by tensor name. `proto` is what
    quantize(calibration=...) sends back (it takes this object too)."""
    method: str
    batch_count: int
    ranges: Dict[str, TensorRange]
    proto: service_pb2.CalibrationResult

    @classmethod
    def from_proto(cls, proto: service_pb2.CalibrationResult) -> "CalibrationResult":
        ranges = {r.tensor_name: TensorRange(r.min, r.max, r.axis, tuple(r.channel_min),
                                             tuple(r.channel_max), r.unbounded)
                  for r in proto.ranges}
        return cls(proto.method, proto.batch_count, ranges, proto)

    def save(self, path: PathLike) -> None:
        """Binary CalibrationResult, the file quantctl --calibration reads."""
        _write_atomically(path, self.proto.SerializeToString())


def _write_atomically(path: PathLike, data: bytes) -> None:
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _to_message(value, message_type, what: str) -> Message:
    """A message from itself, a protobuf-JSON dict or text format."""
    if isinstance(value, message_type):
        return value
    try:
        if isinstance(value, Mapping):
            return json_format.ParseDict(value, message_type())
        if isinstance(value, str):
            return text_format.Parse(value, message_type())
    except (json_format.ParseError, text_format.ParseError) as e:
        raise ValueError(f"{what}: {e}") from e
    raise TypeError(f"{what} is a {message_type.DESCRIPTOR.full_name}, a dict or text format, "
                    f"not {type(value).__name__}")


def _read_model(model: ModelLike) -> Tuple[bytes, Optional["external_data.StreamedModel"]]:
    """The model's bytes and, for a path to a model saved with external
    data, the stream its tensors are sent in (read from beside it while it
    is sent: external_data.py)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), None
    with open(model, "rb") as f:
        data = f.read()
    if external_data.uses_external_data(data):
        streamed = external_data.open_for_streaming(
            data, os.path.dirname(os.path.abspath(os.fspath(model))))
        return streamed.model, streamed
    return data, None


def _stream_chunks(streamed: Optional["external_data.StreamedModel"],
                   chunk_bytes: int) -> Iterator[bytes]:
    if streamed is None:
        return
    for at in range(0, streamed.size, chunk_bytes):
        yield streamed.read(at, min(chunk_bytes, streamed.size - at))


def _channel_target(target: Union[str, Sequence[str]]) -> str:
    """A gRPC target from one target or a list of IP:PORT addresses (balanced
    round-robin). Host names cannot be listed (gRPC resolves one name per
    target): use "dns:///name:port", which reaches every address of the
    name (e.g. a headless Kubernetes service)."""
    if isinstance(target, str):
        return target
    addresses = list(target)
    if not addresses:
        raise ValueError("no server address")
    if len(addresses) == 1:
        return addresses[0]
    if all(a.startswith("[") for a in addresses):
        return "ipv6:" + ",".join(addresses)
    import ipaddress
    for a in addresses:
        host, _, port = a.rpartition(":")
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"server address '{a}' is not IPv4:PORT; list IP addresses, or use "
                             "one target such as dns:///NAME:PORT") from None
        if not port.isdigit():
            raise ValueError(f"server address '{a}' has no port")
    return "ipv4:" + ",".join(addresses)


def _service_config(lb_policy: str) -> str:
    # Retries are the client's own (QuantdClient._with_retries), not a gRPC
    # retryPolicy: gRPC stops retrying a stream once its 256 KiB replay
    # buffer is full, i.e. for any real model, and gRPC 1.51 was seen to
    # replay a short stream (the last calibration batch missing, 1 run in
    # 25 of fake_server_test on a loaded machine): a silent wrong answer.
    return json.dumps({"loadBalancingConfig": [{lb_policy: {}}]})


class _Batches:
    """A call's batch source, and whether a retry can send it again: a
    re-iterable one (a list, NpyBatches) always can; a one-shot iterator (a
    generator) only while none of its batches has been taken."""

    def __init__(self, source: Optional[Iterable[BatchLike]]):
        self._source = source if source is not None else ()
        self._one_shot = isinstance(self._source, collections.abc.Iterator)
        self._taken = False

    def __iter__(self) -> Iterator[BatchLike]:
        for batch in self._source:
            self._taken = True
            yield batch

    def replayable(self) -> bool:
        return not (self._one_shot and self._taken)


# grpc.health.v1 has no stubs in Debian's python3-grpcio (grpcio-health-
# checking is not packaged), so its two tiny messages are encoded here:
# HealthCheckRequest {string service = 1}, HealthCheckResponse
# {ServingStatus status = 1}.
def _encode_health_request(service: str) -> bytes:
    data = service.encode()
    if not data:
        return b""
    return b"\x0a" + _varint(len(data)) + data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _decode_health_response(data: bytes) -> ServingStatus:
    from google.protobuf.internal import decoder  # Stable since protobuf 3.0.
    status, pos = 0, 0
    try:
        while pos < len(data):
            tag, pos = decoder._DecodeVarint(data, pos)
            number, wire_type = tag >> 3, tag & 7
            if wire_type == 0:
                value, pos = decoder._DecodeVarint(data, pos)
                if number == 1:
                    status = value
            elif wire_type == 2:
                length, pos = decoder._DecodeVarint(data, pos)
                pos += length
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            else:
                raise ValueError(f"wire type {wire_type}")
    except (IndexError, ValueError) as e:
        raise QuantdError(grpc.StatusCode.INTERNAL,
                          f"unparsable grpc.health.v1 response: {e}") from e
    try:
        return ServingStatus(status)
    except ValueError:
        return ServingStatus.UNKNOWN


class _Requests:
    """The request stream of one call, pulled by gRPC's sending thread one
    message at a time: each is made only once the previous one was written
    (gRPC flow control paces the batch source, and a large dataset never
    sits in memory at once). An exception from the batch source cancels
    the call, and the caller re-raises it as it is (not as gRPC's UNKNOWN)."""

    def __init__(self, messages: Iterator[Message]):
        self._messages = messages
        self._call_ready = threading.Event()
        self._call = None
        self.error: Optional[BaseException] = None

    def set_call(self, call) -> None:
        self._call = call
        self._call_ready.set()

    def __iter__(self) -> Iterator[Message]:
        try:
            yield from self._messages
        except Exception as e:  # Reported by the caller, after cancelling.
            self.error = e
            self._call_ready.wait()
            self._call.cancel()


class QuantdClient:
    """A client of one quantd target (or a list of addresses).

    target: any gRPC target ("host:port", "dns:///host:port",
        "ipv4:10.0.0.1:50051,10.0.0.2:50051") or a list of "IP:PORT".
    timeout: per call, in seconds, retries included (None: no deadline).
    tls: TlsOptions to use TLS (None: plaintext).
    token: sent as "authorization: Bearer <token>" on every call. With TLS
        as call credentials; without TLS as plain metadata, readable by
        anyone on the path (only for loopback or a network you trust).
    retries: extra attempts of a call that failed with UNAVAILABLE or
        CANCELLED before any response (a replica draining, restarting or
        shutting down as the call arrived; the client itself never cancels a
        call it would retry), 0..10; no other
        code is retried, nor a call whose one-shot batch source (a
        generator) was already read.
    chunk_bytes: size of the model chunks sent (the C++ SDK's 1 MiB).
    max_message_bytes: must match the server's (16 MiB by default).

    Calls raise QuantdError (code, message). Use as a context manager, or
    call close().
    """

    def __init__(self, target: Union[str, Sequence[str]], *, timeout: Optional[float] = None,
                 tls: Optional[TlsOptions] = None, token: Optional[str] = None,
                 retries: int = 2, chunk_bytes: int = 1 << 20,
                 max_message_bytes: int = 16 << 20, load_balancing_policy: str = "round_robin"):
        if not 0 <= retries <= _MAX_RETRIES:
            raise ValueError(f"retries must be in [0, {_MAX_RETRIES}], not {retries}")
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, not {chunk_bytes}")
        self.target = _channel_target(target)
        self.timeout = timeout
        self.retries = retries
        self.chunk_bytes = chunk_bytes
        self._token = (token or "").strip()
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.service_config", _service_config(load_balancing_policy)),
            ("grpc.keepalive_time_ms", _KEEPALIVE_TIME_MS),
            ("grpc.keepalive_timeout_ms", _KEEPALIVE_TIMEOUT_MS),
        ]
        self._metadata: Tuple[Tuple[str, str], ...] = ()
        if tls is None:
            if self._token:
                # gRPC refuses call credentials on an insecure channel.
                self._metadata = (("authorization", f"Bearer {self._token}"),)
            self._channel = grpc.insecure_channel(self.target, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(tls.root_certs, tls.private_key,
                                                       tls.cert_chain)
            if self._token:
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(self._token))
            self._channel = grpc.secure_channel(self.target, credentials, options=options)
        self._stub = service_pb2_grpc.QuantizationServiceStub(self._channel)
        self._health_check = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_encode_health_request,
            response_deserializer=_decode_health_response)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "QuantdClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- Quantize --------------------------------------------------------

    def quantize(self, model: ModelLike, options: Optional[OptionsLike] = None, *,
                 calibration: Union[CalibrationResult, service_pb2.CalibrationResult, None] = None,
                 calibration_batches: Optional[Iterable[BatchLike]] = None,
                 calibration_config: Union[service_pb2.CalibrateConfig, Mapping, str, None] = None,
                 weight_params: Union[service_pb2.QuantOpParams, Mapping, str, None] = None,
                 activation_params: Union[service_pb2.QuantOpParams, Mapping, str, None] = None,
                 block_size: Optional[int] = None,
                 weight_range: Optional[str] = None,
                 target_sqnr_db: Optional[float] = None,
                 target_agreement: Optional[float] = None,
                 allowed_precisions: Optional[Iterable[str]] = None,
                 holdout_batches: Optional[int] = None,
                 weight_algorithm: Optional[str] = None,
                 gptq_dampening: Optional[float] = None,
                 gptq_act_order: bool = False,
                 cross_check: bool = False,
                 bias_correction: bool = False,
                 smoothquant: Union[bool, float, str, None] = None,
                 equalize: bool = False,
                 on_progress: Optional[Callable[[Progress], None]] = None,
                 on_tensor_report: Optional[Callable[[TensorReport], None]] = None,
                 save_to: Optional[PathLike] = None,
                 save_as_external_data: Optional[bool] = None) -> QuantizeResult:
        """Quantizes `model` (bytes, or the path of an ONNX file).

        options: QuantizationOptions (message, JSON dict or text format);
            None leaves quantization_method unset: the model comes back
            unchanged, the summary says so.
        calibration: ranges from calibrate(), for STATIC_RANGE.
        calibration_batches: STATIC_RANGE in one call: batches (TensorBatch,
            array, or dict name -> array; e.g. NpyBatches) sent after the
            model; the server calibrates with `calibration_config` first
            ({"method": "auto"} tries min_max, percentile, mse, entropy and
            entropy_unguarded and keeps the one whose quantized model is
            closest to float at the outputs; summary.observer_choice lists
            them; with holdout_batches it also tries min_max widened by 1.1
            to 2. {"headroom": 1.5} widens every calibrated range by 1.5;
            {"auto_headroom": True} chooses that factor by cross-validation
            over the batches).
        block_size: weight_params.block_size (quantctl --block_size): one
            weight scale per block of this many values along the input axis
            of MatMul / Gemm weights and of 4-bit Conv weights (that many
            input channels at each kernel tap); 0 or None: per output
            channel.
        weight_range: weight_params.range (quantctl --weight_range):
            "min_max" (each channel's or block's extremes, the default) or
            "mse" (the range with the least squared rounding error, clipping
            a few outliers; helps 4-bit weights most).
        target_sqnr_db: STATIC_RANGE with calibration_batches: the worst
            output SQNR to reach (quantctl --target_sqnr_db); the nodes that
            add the most error stay float until it is met. The summary's
            accuracy_search says what was tried and chosen.
        target_agreement: the worst top-1 agreement with float (0..1] over
            the outputs with a class axis (quantctl --target_agreement);
            same search, and with target_sqnr_db both must be met.
        allowed_precisions: the precisions the search may raise a node to,
            e.g. ["w4a8", "w8a8", "full"] (quantctl --allowed_precisions);
            must include the request's own precision. None: all.
        holdout_batches: the first N calibration_batches are kept back from
            calibration; fidelity (and the targets) is measured on them.
        weight_algorithm: "rtn" (round to nearest, the default), "gptq" or
            "awq" (quantctl --weight_algorithm): GPTQ rounds each weight using
            the inputs its layer saw on calibration_batches; AWQ rescales the
            input channels of each layer by factors chosen from them, then
            rounds to nearest; "awq+gptq" applies AWQ's factors, then GPTQ
            (either method).
        gptq_dampening, gptq_act_order: config.gptq (quantctl
            --gptq_dampening, --gptq_act_order).
        cross_check: config.cross_check (quantctl --cross_check): keep
            GPTQ's rounding and AWQ's factors only where they beat
            rounding on the calibration samples they were not fitted to.
        bias_correction: add each Conv / Gemm weight's expected output shift
            on calibration_batches to its bias (quantctl --bias_correction).
        smoothquant: True (alpha 0.5), an alpha in [0, 1] or "auto" (each
            value's alpha chosen by predicted noise; quantctl
            --smoothquant[=ALPHA|auto]): migrate activation outliers into
            the weights, from calibration_batches. The summary's
            channel_scalings lists each rescaled value.
        equalize: cross-layer equalization of consecutive layers' weight
            ranges (quantctl --equalize; data-free).
        on_progress, on_tensor_report: called on this thread as the events
            arrive.
        save_to, save_as_external_data: write the result to this path as
            QuantizeResult.save(save_to, save_as_external_data) would, except
            that external data (a model sent with external data, e.g. over 2
            GB) goes to save_to + ".data" chunk by chunk as it arrives and
            never sits in memory (unless save_as_external_data is False: then
            it is inlined). The returned result's saved_to names the path.
        """
        data, streamed = _read_model(model)
        config = service_pb2.QuantizeConfig(
            model_size_bytes=len(data), external_data_bytes=streamed.size if streamed else 0)
        if options is not None:
            config.options.CopyFrom(_to_message(options, options_pb2.QuantizationOptions, "options"))
        if calibration is not None:
            if isinstance(calibration, CalibrationResult):
                calibration = calibration.proto
            config.calibration.CopyFrom(calibration)
        for name, value, kind in (("weight_params", weight_params, service_pb2.QuantOpParams),
                                  ("activation_params", activation_params, service_pb2.QuantOpParams),
                                  ("calibration_config", calibration_config, service_pb2.CalibrateConfig)):
            if value is not None:
                getattr(config, name).CopyFrom(_to_message(value, kind, name))
        if block_size:
            config.weight_params.block_size = int(block_size)
        if weight_range is not None:
            ranges = {"min_max": service_pb2.WEIGHT_RANGE_MIN_MAX,
                      "mse": service_pb2.WEIGHT_RANGE_MSE}
            if weight_range not in ranges:
                raise ValueError(f"weight_range is {weight_range!r}; it must be min_max or mse")
            config.weight_params.range = ranges[weight_range]
        if target_sqnr_db is not None:
            config.target_sqnr_db = float(target_sqnr_db)
        if target_agreement is not None:
            config.target_agreement = float(target_agreement)
        if allowed_precisions is not None:
            if isinstance(allowed_precisions, str):
                allowed_precisions = allowed_precisions.split(",")
            precisions = {"w4a4": options_pb2.PRECISION_W4A4,
                          "w4a8": options_pb2.PRECISION_W4A8,
                          "w8a8": options_pb2.PRECISION_W8A8,
                          "full": options_pb2.PRECISION_FULL}
            for p in allowed_precisions:
                key = str(p).strip().lower()
                if key not in precisions:
                    raise ValueError(f"allowed_precisions entries must be among "
                                     f"{sorted(precisions)}, not {p!r}")
                config.allowed_precisions.append(precisions[key])
        if holdout_batches:
            config.holdout_batches = int(holdout_batches)
        if weight_algorithm is not None:
            algorithms = {"rtn": service_pb2.WEIGHT_ALGORITHM_RTN,
                          "gptq": service_pb2.WEIGHT_ALGORITHM_GPTQ,
                          "awq": service_pb2.WEIGHT_ALGORITHM_AWQ,
                          "awq+gptq": service_pb2.WEIGHT_ALGORITHM_AWQ_GPTQ}
            if weight_algorithm not in algorithms:
                raise ValueError(f"weight_algorithm must be one of {sorted(algorithms)}, "
                                 f"not {weight_algorithm!r}")
            config.weight_algorithm = algorithms[weight_algorithm]
        if gptq_dampening is not None:
            config.gptq.dampening = float(gptq_dampening)
        if gptq_act_order:
            config.gptq.act_order = True
        if cross_check:
            config.cross_check = True
        if bias_correction:
            config.bias_correction = True
        if smoothquant == "auto":
            config.smoothquant.auto_alpha = True
        elif smoothquant is not None and smoothquant is not False:
            alpha = 0.5 if smoothquant is True else float(smoothquant)
            if not 0.0 <= alpha <= 1.0:
                raise ValueError(f"smoothquant must be True, 'auto' or an alpha in [0, 1], "
                                 f"not {smoothquant!r}")
            config.smoothquant.alpha = alpha
        if equalize:
            config.equalize = True

        batches = _Batches(calibration_batches)

        def requests() -> Iterator[service_pb2.QuantizeRequest]:
            yield service_pb2.QuantizeRequest(config=config)
            for chunk in self._chunks(data):
                yield service_pb2.QuantizeRequest(model_chunk=chunk)
            for chunk in _stream_chunks(streamed, self.chunk_bytes):
                yield service_pb2.QuantizeRequest(external_data_chunk=chunk)
            for batch in batches:
                yield service_pb2.QuantizeRequest(calibration_batch=to_tensor_batch(batch))

        writer = None
        if save_to is not None and save_as_external_data is not False:
            writer = external_data.StreamedModelWriter(save_to)
        try:
            result = self._with_retries(
                lambda timeout, responded: self._quantize_attempt(
                    requests(), timeout, responded, on_progress, on_tensor_report, writer),
                batches)
            if save_to is not None:
                if result.external_data_bytes and not result.external_data:
                    writer.finish(result.model, write=_write_atomically)
                else:
                    result.save(save_to, save_as_external_data)
                result.saved_to = os.fspath(save_to)
            return result
        finally:
            if writer is not None:
                writer.discard()

    def _quantize_attempt(self, requests: Iterator[service_pb2.QuantizeRequest],
                          timeout: Optional[float], responded: Callable[[], None],
                          on_progress: Optional[Callable[[Progress], None]],
                          on_tensor_report: Optional[Callable[[TensorReport], None]],
                          writer: Optional["external_data.StreamedModelWriter"] = None
                          ) -> QuantizeResult:
        model_parts: List[bytes] = []
        external_parts: List[bytes] = []
        external_bytes = 0
        if writer is not None:
            writer.discard()  # What an earlier attempt wrote.
        reports: List[TensorReport] = []
        summaries: List[QuantizeSummary] = []
        after_summary = False
        for response in self._stream(self._stub.Quantize, requests, timeout):
            responded()
            if summaries:
                after_summary = True
            event = response.WhichOneof("event")
            if event == "progress":
                if on_progress:
                    on_progress(response.progress)
            elif event == "tensor_report":
                reports.append(response.tensor_report)
                if on_tensor_report:
                    on_tensor_report(response.tensor_report)
            elif event == "model_chunk":
                model_parts.append(response.model_chunk)
            elif event == "external_data_chunk":
                external_bytes += len(response.external_data_chunk)
                if writer is not None:
                    writer.write(response.external_data_chunk)
                else:
                    external_parts.append(response.external_data_chunk)
            elif event == "summary":
                summaries.append(response.summary)
            # Anything else is a newer server's event: skipped.
        if len(summaries) != 1 or after_summary:
            raise QuantdError(grpc.StatusCode.INTERNAL,
                              f"protocol error: the server sent {len(summaries)} summaries"
                              f"{' and messages after one' if after_summary else ''}; "
                              "expected exactly one, last")
        output = b"".join(model_parts)
        external = b"".join(external_parts)
        del external_parts[:]
        if summaries[0].output_bytes != len(output) + external_bytes:
            raise QuantdError(grpc.StatusCode.INTERNAL,
                              f"protocol error: received {len(output)} model bytes"
                              f"{f' and {external_bytes} of external data' if external_bytes else ''}"
                              f" but the summary says {summaries[0].output_bytes}")
        return QuantizeResult(output, summaries[0], reports, external, external_bytes)

    # -- Calibrate -------------------------------------------------------

    def calibrate(self, model: ModelLike, batches: Iterable[BatchLike], *,
                  config: Union[service_pb2.CalibrateConfig, Mapping, str, None] = None,
                  method: Optional[str] = None,
                  on_progress: Optional[Callable[[Progress], None]] = None) -> CalibrationResult:
        """Streams `model` and every batch of `batches` (TensorBatch, array
        or dict name -> array; e.g. NpyBatches, or a generator of observed
        activations), and returns the activation ranges the server
        collected. `method` ("min_max", "moving_average", "percentile",
        "mse", "entropy", "entropy_unguarded", "last_value") overrides
        config.method."""
        data, streamed = _read_model(model)
        cfg = service_pb2.CalibrateConfig()
        if config is not None:
            cfg.CopyFrom(_to_message(config, service_pb2.CalibrateConfig, "config"))
        if method is not None:
            cfg.method = method
        cfg.model_size_bytes = len(data)
        cfg.external_data_bytes = streamed.size if streamed else 0

        source = _Batches(batches)

        def requests() -> Iterator[service_pb2.CalibrateRequest]:
            yield service_pb2.CalibrateRequest(config=cfg)
            for chunk in self._chunks(data):
                yield service_pb2.CalibrateRequest(model_chunk=chunk)
            for chunk in _stream_chunks(streamed, self.chunk_bytes):
                yield service_pb2.CalibrateRequest(external_data_chunk=chunk)
            for batch in source:
                yield service_pb2.CalibrateRequest(batch=to_tensor_batch(batch))

        return self._with_retries(
            lambda timeout, responded: self._calibrate_attempt(
                requests(), timeout, responded, on_progress),
            source)

    def _calibrate_attempt(self, requests: Iterator[service_pb2.CalibrateRequest],
                           timeout: Optional[float], responded: Callable[[], None],
                           on_progress: Optional[Callable[[Progress], None]]
                           ) -> CalibrationResult:
        results: List[service_pb2.CalibrationResult] = []
        after_result = False
        for response in self._stream(self._stub.Calibrate, requests, timeout):
            responded()
            if results:
                after_result = True
            event = response.WhichOneof("event")
            if event == "progress":
                if on_progress:
                    on_progress(response.progress)
            elif event == "result":
                results.append(response.result)
        if len(results) != 1 or after_result:
            raise QuantdError(grpc.StatusCode.INTERNAL,
                              f"protocol error: the server sent {len(results)} results"
                              f"{' and messages after one' if after_result else ''}; "
                              "expected exactly one, last")
        return CalibrationResult.from_proto(results[0])

    # -- Unary calls -----------------------------------------------------

    def server_info(self) -> ServerInfo:
        """What the server supports (capability table) and its limits."""
        return self._with_retries(lambda timeout, _: self._unary(
            self._stub.GetServerInfo, service_pb2.GetServerInfoRequest(), timeout))

    def health(self, service: str = "") -> ServingStatus:
        """The grpc.health.v1 status of `service` ("" is the whole server)."""
        return self._with_retries(lambda timeout, _: self._unary(
            self._health_check, service, timeout))

    # -- Internals -------------------------------------------------------

    def _chunks(self, data: bytes) -> Iterator[bytes]:
        view = memoryview(data)
        for offset in range(0, len(data), self.chunk_bytes):
            yield bytes(view[offset:offset + self.chunk_bytes])

    def _with_retries(self, attempt: Callable[[Optional[float], Callable[[], None]], _T],
                      batches: Optional[_Batches] = None) -> _T:
        """Runs attempt(timeout, responded) again while it fails with
        UNAVAILABLE or CANCELLED before any response (`responded()` not called: no event
        reached the caller's callbacks), `retries` times at most, within one
        deadline for the whole call. The service is stateless, so a retry
        (on another replica, round_robin) is safe."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        attempts = 0
        while True:
            attempts += 1
            responded = False

            def mark() -> None:
                nonlocal responded
                responded = True

            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return attempt(timeout, mark)
            except QuantdError as e:
                if e.code not in _RETRIED_CODES or responded:
                    raise
                error = e
            if batches is not None and not batches.replayable():
                raise QuantdError(error.code, f"{error.message} (not retried: the batch source "
                                  "is a one-shot iterator that was already read)")
            if attempts > self.retries:
                if attempts == 1:
                    raise error
                raise QuantdError(error.code, f"{error.message} (gave up after {attempts} attempts)")
            backoff = min(_INITIAL_BACKOFF_S * 2 ** (attempts - 1), _MAX_BACKOFF_S)
            backoff *= random.uniform(0.8, 1.2)
            if deadline is not None and time.monotonic() + backoff >= deadline:
                raise QuantdError(error.code, f"{error.message} (not retried: the deadline falls "
                                  f"before the next attempt; {attempts} attempt(s) made)")
            time.sleep(backoff)

    def _unary(self, method, request, timeout: Optional[float]):
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise QuantdError.from_rpc_error(e) from None

    def _stream(self, method, messages: Iterator[Message],
                timeout: Optional[float]) -> Iterator[Message]:
        """The responses of one bidi call; errors as QuantdError, an error of
        the request source as itself."""
        requests = _Requests(messages)
        call = method(iter(requests), timeout=timeout, metadata=self._metadata)
        requests.set_call(call)
        try:
            yield from call
        except grpc.RpcError as e:
            if requests.error is not None:
                raise requests.error from None
            raise QuantdError.from_rpc_error(e) from None
        finally:
            call.cancel()  # No-op once finished; stops the call if abandoned.
        if requests.error is not None:
            raise requests.error
