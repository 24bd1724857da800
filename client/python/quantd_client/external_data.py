"""Models saved with ONNX external data: tensor bytes in files beside the
.onnx (onnx.save_model(..., save_as_external_data=True), exporters of large
models). The server never opens a path a request names, so the SDK reads the
files: it streams their bytes after the model (the request's external_data
stream, where each tensor is located at "quantd:external_data" by offset and
length; any size, so models over 2 GB go through), or reads them inline, and
writes a returned model out either way. The same rules as the C++ SDK's
client/external_data.h.

Detecting external data reads only protobuf field headers; reading it in
and writing it out need the `onnx` package (Debian python3-onnx)."""

import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

_EXTERNAL = 1
_MAX_MESSAGE_BYTES = 2**31 - 1
STREAM_LOCATION = "quantd:external_data"
_ALIGN = 64
_MAX_DEPTH = 128

# (message, field number) -> the message that field holds, for the fields on
# the way from a ModelProto to its tensors (onnx.proto's numbers).
_CHILD = {
    ("model", 7): "graph", ("model", 20): "training", ("model", 25): "function",
    ("training", 1): "graph", ("training", 2): "graph",
    ("function", 7): "node",
    ("graph", 1): "node", ("graph", 5): "tensor", ("graph", 15): "sparse",
    ("node", 5): "attribute",
    ("attribute", 5): "tensor", ("attribute", 10): "tensor",
    ("attribute", 6): "graph", ("attribute", 11): "graph",
    ("attribute", 22): "sparse", ("attribute", 23): "sparse",
    ("sparse", 1): "tensor", ("sparse", 2): "tensor",
}
_TENSOR_DATA_LOCATION = 14

# Bits per element of TensorProto.DataType; STRING (8) has no fixed size.
_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64,
         12: 32, 13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8,
         21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2}


class _Malformed(Exception):
    pass


def _varint(buf: memoryview, pos: int, end: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed()
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _found(buf: memoryview, pos: int, end: int, kind: str, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        raise _Malformed()
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            if kind == "tensor" and field == _TENSOR_DATA_LOCATION and value == _EXTERNAL:
                return True
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise _Malformed()
            child = _CHILD.get((kind, field))
            if child is not None and _found(buf, pos, pos + length, child, depth + 1):
                return True
            pos += length
        else:
            raise _Malformed()
    if pos != end:
        raise _Malformed()
    return False


def uses_external_data(data: bytes) -> bool:
    """Whether any tensor of the serialized model keeps its bytes outside it
    (graph and subgraph initializers, attribute tensors, sparse tensors,
    function bodies). False for bytes that are no ModelProto."""
    try:
        return _found(memoryview(data), 0, len(data), "model", 0)
    except _Malformed:
        return False


def _onnx():
    try:
        import onnx  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ValueError("the model keeps tensors in external data files; reading them in "
                         "needs the onnx package (Debian python3-onnx), or save the model "
                         "with its weights inside") from e
    return onnx


def _tensors(model) -> Iterator:
    def graph(g):
        yield from g.initializer
        for s in g.sparse_initializer:
            yield from sparse(s)
        for n in g.node:
            yield from node(n)

    def sparse(s):
        if s.HasField("values"):
            yield s.values
        if s.HasField("indices"):
            yield s.indices

    def node(n):
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from graph(a.g)
            for g in a.graphs:
                yield from graph(g)
            if a.HasField("sparse_tensor"):
                yield from sparse(a.sparse_tensor)
            for s in a.sparse_tensors:
                yield from sparse(s)

    if model.HasField("graph"):
        yield from graph(model.graph)
    for info in model.training_info:
        if info.HasField("initialization"):
            yield from graph(info.initialization)
        if info.HasField("algorithm"):
            yield from graph(info.algorithm)
    for f in model.functions:
        for n in f.node:
            yield from node(n)


def _raw_bytes(t) -> int:
    n = 1
    for d in t.dims:
        if d < 0:
            raise ValueError(f"external tensor '{t.name}' has a negative dim")
        n *= d
    bits = _BITS.get(t.data_type)
    if bits is None:
        raise ValueError(f"external tensor '{t.name}' of element type {t.data_type} "
                         "has no fixed size in bytes")
    return (n * bits + 7) // 8


@dataclass
class StreamedModel:
    """A model ready to send with its external data streamed beside it: the
    ModelProto with every external tensor located in one stream (packed, in
    walk order), the stream's size, read(offset, n) -> bytes over the data
    files, and counts {"tensors", "bytes", "files"}."""
    model: bytes
    size: int
    read: Callable[[int, int], bytes]
    counts: Dict[str, int] = field(default_factory=dict)


def open_for_streaming(data: bytes, base_dir: str) -> StreamedModel:
    """Checks every external reference of the serialized model and relocates
    it into the stream; nothing is read yet. ValueError naming the tensor for
    an absolute location, a '..' component, a location that resolves outside
    base_dir (the model file's directory; symlinks too), a missing file, an
    offset or length past the file's end, or a length other than the
    tensor's size."""
    onnx = _onnx()
    model = onnx.ModelProto()
    model.ParseFromString(data)
    root = os.path.realpath(base_dir or ".")
    sizes: Dict[str, int] = {}
    counts = {"tensors": 0, "bytes": 0, "files": 0}
    # (stream offset, length, path, file offset)
    segments: List[Tuple[int, int, str, int]] = []
    size = 0
    for t in _tensors(model):
        if t.data_location != _EXTERNAL:
            continue
        entries = {e.key: e.value for e in t.external_data}
        location = entries.get("location", "")
        if not location:
            raise ValueError(f"external tensor '{t.name}' names no location")
        if os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
            raise ValueError(f"external tensor '{t.name}' has location '{location}': a location "
                             "must be a path below the model's directory (no absolute path, "
                             "no '..')")
        numbers = {}
        for key in ("offset", "length"):
            value = entries.get(key)
            if value is None:
                continue
            if not value.isdigit():
                raise ValueError(f"external tensor '{t.name}' has {key} '{value}', not a "
                                 "non-negative integer")
            numbers[key] = int(value)
        want = _raw_bytes(t)
        if "length" in numbers and numbers["length"] != want:
            raise ValueError(f"external tensor '{t.name}' has length {numbers['length']} but "
                             f"its dims and type need {want} bytes")
        path = os.path.realpath(os.path.join(root, location))
        if not path.startswith(root + os.sep):
            raise ValueError(f"external tensor '{t.name}' has location '{location}', which "
                             f"resolves to {path}, outside the model's directory {root}")
        if not os.path.isfile(path):
            raise ValueError(f"external tensor '{t.name}': {path} is not a readable file")
        if path not in sizes:
            sizes[path] = os.path.getsize(path)
            counts["files"] += 1
        offset = numbers.get("offset", 0)
        if offset > sizes[path] or want > sizes[path] - offset:
            raise ValueError(f"external tensor '{t.name}' reads {want} bytes at offset {offset} "
                             f"of '{location}', which has {sizes[path]}")
        if want:
            segments.append((size, want, path, offset))
        _set_ref(t, STREAM_LOCATION, size, want)
        size += want
        counts["tensors"] += 1
        counts["bytes"] += want

    def read(at: int, n: int) -> bytes:
        if at < 0 or n < 0 or at + n > size:
            raise ValueError(f"external data read of {n} bytes at {at} past the stream "
                             f"({size} bytes)")
        out = bytearray()
        for start, length, path, file_offset in segments:
            if at >= start + length or at + n <= start:
                continue
            lo = max(at, start)
            hi = min(at + n, start + length)
            with open(path, "rb") as f:
                f.seek(file_offset + lo - start)
                piece = f.read(hi - lo)
            if len(piece) != hi - lo:
                raise ValueError(f"cannot read external data from {path}: the file got shorter")
            out += piece
        return bytes(out)

    return StreamedModel(model.SerializeToString(), size, read, counts)


def _set_ref(t, location: str, offset: int, length: int) -> None:
    del t.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        e = t.external_data.add()
        e.key = key
        e.value = value
    t.ClearField("raw_data")
    t.data_location = _EXTERNAL


def inline_external_data(data: bytes, base_dir: str) -> Tuple[bytes, Dict[str, int]]:
    """The model with every external tensor's bytes read into raw_data (the
    checks of open_for_streaming), and counts {"tensors", "bytes", "files"}.
    ValueError also for a model over the 2 GB one message holds."""
    streamed = open_for_streaming(data, base_dir)
    total = len(data) + streamed.size
    if total > _MAX_MESSAGE_BYTES:
        raise ValueError(f"the model with its external data is over {total} bytes; one "
                         "protobuf message holds at most 2 GB: send it with its external "
                         "data streamed (model paths do)")
    return inline_streamed_data(streamed.model, streamed.read(0, streamed.size)), \
        streamed.counts


def inline_streamed_data(data: bytes, stream: bytes) -> bytes:
    """A model whose tensors are located in `stream` (a QuantizeResult's
    external_data) with every tensor's bytes inside it; ValueError for a
    reference outside the stream or a result over 2 GB."""
    onnx = _onnx()
    model = onnx.ModelProto()
    model.ParseFromString(data)
    for t in _tensors(model):
        if t.data_location != _EXTERNAL:
            continue
        offset, length = _stream_ref(t, len(stream))
        t.raw_data = stream[offset:offset + length]
        del t.external_data[:]
        t.ClearField("data_location")
    if model.ByteSize() > _MAX_MESSAGE_BYTES:
        raise ValueError(f"the model with its tensors inline is {model.ByteSize()} bytes; one "
                         "protobuf message holds at most 2 GB: save it with "
                         "save_as_external_data=True")
    return model.SerializeToString()


def _stream_ref(t, stream_size: int) -> Tuple[int, int]:
    entries = {e.key: e.value for e in t.external_data}
    offset = int(entries.get("offset", "0"))
    length = _raw_bytes(t)
    if entries.get("location") != STREAM_LOCATION or offset + length > stream_size:
        raise ValueError(f"tensor '{t.name}' is located outside the external data the "
                         "server returned")
    return offset, length


def _name_data_file(data: bytes, name: str, stream_size: int) -> Tuple[bytes, Dict[str, int]]:
    """The model with every tensor located in a returned stream of
    `stream_size` bytes relocated, at the same offset, to the data file
    `name` (the stream written as it came)."""
    onnx = _onnx()
    model = onnx.ModelProto()
    model.ParseFromString(data)
    counts = {"tensors": 0, "bytes": 0, "files": 1}
    for t in _tensors(model):
        if t.data_location != _EXTERNAL:
            continue
        offset, length = _stream_ref(t, stream_size)
        _set_ref(t, name, offset, length)
        counts["tensors"] += 1
        counts["bytes"] += length
    return model.SerializeToString(), counts


def write_streamed_model(data: bytes, stream: bytes, path, write) -> Dict[str, int]:
    """Writes a result that came with external data as path + path.data: the
    stream is laid out as ONNX's data file (64-byte aligned offsets) and is
    written as it came; the model only names it. The data file first."""
    path = os.fspath(path)
    name = os.path.basename(path) + ".data"
    model, counts = _name_data_file(data, name, len(stream))
    write(os.path.join(os.path.dirname(path), name), stream)
    write(path, model)
    return counts


class StreamedModelWriter:
    """A Quantize result's external data written to path + ".data" chunk by
    chunk as it arrives (so that it never sits in memory, however large the
    model), then the model naming it (finish). The data file appears whole
    when finish renames it into place, before the model; discard (or a
    failed finish) removes the temporary file and leaves any earlier files
    at those paths as they were. The C++ SDK's StreamedModelWriter."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path) + ".data"
        self.data_path = os.path.join(os.path.dirname(self.path), self.name)
        self.size = 0
        self._file = None
        self._temp: Optional[str] = None

    def write(self, chunk: bytes) -> None:
        if self._file is None:
            fd, self._temp = tempfile.mkstemp(prefix=self.name + ".tmp.",
                                              dir=os.path.dirname(self.path) or ".")
            self._file = os.fdopen(fd, "wb")
        self._file.write(chunk)
        self.size += len(chunk)

    def finish(self, data: bytes, write) -> Dict[str, int]:
        """Writes the model (with `write`, e.g. an atomic writer) after the
        data file; ValueError, nothing written, for a tensor outside the
        bytes received."""
        try:
            model, counts = _name_data_file(data, self.name, self.size)
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
                mask = os.umask(0)
                os.umask(mask)
                os.chmod(self._temp, 0o666 & ~mask)
                os.replace(self._temp, self.data_path)
                self._temp = None
            write(self.path, model)
            return counts
        finally:
            self.discard()

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._temp is not None:
            try:
                os.remove(self._temp)
            except FileNotFoundError:
                pass
            self._temp = None
        self.size = 0


def write_model_with_external_data(data: bytes, path, min_bytes: int = 1024,
                                   write=None) -> Dict[str, int]:
    """Writes the serialized model to `path` with every tensor of at least
    `min_bytes` bytes of raw_data moved, in order, into `path` + ".data"
    beside it at 64-byte aligned offsets (ONNX's location/offset/length);
    the data file first. `write(path, bytes)` writes one file atomically."""
    onnx = _onnx()
    model = onnx.ModelProto()
    model.ParseFromString(data)
    path = os.fspath(path)
    name = os.path.basename(path) + ".data"
    chunks = []
    size = 0
    counts = {"tensors": 0, "bytes": 0, "files": 0}
    for t in _tensors(model):
        if not t.HasField("raw_data") or len(t.raw_data) < min_bytes:
            continue
        pad = (-size) % 64
        chunks.append(b"\0" * pad)
        size += pad
        raw = t.raw_data
        for key, value in (("location", name), ("offset", str(size)), ("length", str(len(raw)))):
            e = t.external_data.add()
            e.key = key
            e.value = value
        chunks.append(raw)
        size += len(raw)
        t.ClearField("raw_data")
        t.data_location = _EXTERNAL
        counts["tensors"] += 1
        counts["bytes"] += len(raw)
    if counts["tensors"]:
        counts["files"] = 1
        write(os.path.join(os.path.dirname(path), name), b"".join(chunks))
    write(path, model.SerializeToString())
    return counts
