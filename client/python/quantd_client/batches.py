"""Calibration batches: NumPy arrays (or .npy / ONNX TensorProto files) to
quantd.v1.TensorBatch messages.

The rules are those of the C++ SDK (client/calibration_data.cc) and quantctl:
the first axis of every array is the sample axis unless `sample_axes` says
otherwise (a recurrent state [layers, batch, hidden] has it at 1; None: the
array goes whole with every batch, as a scalar such as a sample rate always
does); several arrays are zipped sample by sample (their sample axes must be
as long) and cut into batches of `batch_size` samples, the last one possibly
smaller. A tensor without a name
("") feeds the model's only graph input; a name is a graph input or, to send
observed activations instead (no model run for that batch), any other tensor
of the model. Integers (8 to 64 bits, signed and unsigned) and bool are sent
as they are; floating data (float32, float64, float16) as float32, the type
quantd calibrates in (it widens float32 exactly for a DOUBLE input).
"""

import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._proto import service_pb2

# ONNX TensorProto.DataType values of the element types calibration takes.
_ONNX_TYPES: Dict[np.dtype, int] = {
    np.dtype(np.float32): 1,  # FLOAT
    np.dtype(np.uint8): 2,  # UINT8
    np.dtype(np.int8): 3,  # INT8
    np.dtype(np.uint16): 4,  # UINT16
    np.dtype(np.int16): 5,  # INT16
    np.dtype(np.int32): 6,  # INT32
    np.dtype(np.int64): 7,  # INT64
    np.dtype(np.bool_): 9,  # BOOL
    np.dtype(np.uint32): 12,  # UINT32
    np.dtype(np.uint64): 13,  # UINT64
}
# Sent as float32.
_FLOATING = (np.dtype(np.float64), np.dtype(np.float16))
_SUPPORTED = "float32, float64, float16, signed and unsigned integers of 8 to 64 bits, bool"

PathLike = Union[str, "os.PathLike[str]"]
# What quantize()/calibrate() take as one batch: a TensorBatch as is, one
# array for the model's only input, or arrays by tensor name.
BatchLike = Union[service_pb2.TensorBatch, np.ndarray, Mapping[str, np.ndarray]]


def _native(dtype: np.dtype) -> np.dtype:
    """The dtype in this machine's byte order, for type comparisons."""
    return np.dtype(dtype).newbyteorder("=")


def named_tensor(name: str, array: np.ndarray, label: str = "") -> service_pb2.NamedTensor:
    """One tensor of a batch; `label` names the source in errors."""
    array = np.asarray(array)
    label = label or name or "(unnamed input)"
    if _native(array.dtype) in _FLOATING:
        array = array.astype(np.float32)
    onnx_type = _ONNX_TYPES.get(_native(array.dtype))
    if onnx_type is None:
        raise ValueError(f"{label}: element type {array.dtype} is not supported for "
                         f"calibration data ({_SUPPORTED})")
    # Little-endian, contiguous: the wire layout NamedTensor.data documents.
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return service_pb2.NamedTensor(name=name, data_type=onnx_type,
                                   shape=list(array.shape), data=data)


def to_tensor_batch(batch: BatchLike) -> service_pb2.TensorBatch:
    """A TensorBatch from any BatchLike."""
    if isinstance(batch, service_pb2.TensorBatch):
        return batch
    if isinstance(batch, np.ndarray):
        return service_pb2.TensorBatch(tensors=[named_tensor("", batch)])
    if isinstance(batch, Mapping):
        return service_pb2.TensorBatch(
            tensors=[named_tensor(name, array) for name, array in batch.items()])
    raise TypeError("a calibration batch is a quantd.v1.TensorBatch, a numpy array "
                    f"(the model's only input) or a dict name -> array, not {type(batch).__name__}")


def read_tensor_file(path: PathLike) -> Tuple[np.ndarray, str]:
    """A .npy file (by its magic bytes, memory-mapped: only the batches being
    sent are read) or an ONNX TensorProto (.pb, needs the onnx package).
    Returns the array and the TensorProto's name ("" for .npy)."""
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic == b"\x93NUMPY":
        return np.load(path, mmap_mode="r", allow_pickle=False), ""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:
        raise ValueError(f"{path}: not a .npy file, and reading an ONNX TensorProto "
                         f"needs the onnx package ({e})") from e
    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        try:
            proto.ParseFromString(f.read())
        except Exception as e:  # DecodeError; message varies by runtime.
            raise ValueError(f"{path}: neither a .npy file nor an ONNX TensorProto (.pb)") from e
    return numpy_helper.to_array(proto), proto.name


@dataclass
class _Source:
    name: str
    label: str
    array: np.ndarray
    axis: Optional[int] = 0  # The sample axis; None: sent whole.


class ArrayBatches:
    """Re-iterable batches of `batch_size` samples from arrays.

    `arrays` is one array (the model's only input) or a mapping tensor name ->
    array ("" = the only input); `sample_axes` maps a tensor name to the
    axis its samples lie on (default 0) or None (sent whole with every
    batch; scalars always are). `unbatched`: the model takes one sample at a
    time with no batch axis (torchvision's detection models take an image
    [3, H, W]); each batch is one sample sent without its sample axis, and
    batch_size (default 1 then) must be 1 (quantctl --unbatched). Iterating
    yields TensorBatch messages, each made only when asked for (the arrays
    may be memory-mapped). Raises ValueError when the arrays do not fit
    together."""

    def __init__(self, arrays: Union[np.ndarray, Mapping[str, np.ndarray]],
                 batch_size: Optional[int] = None, *,
                 sample_axes: Optional[Mapping[str, Optional[int]]] = None,
                 unbatched: bool = False):
        if not isinstance(arrays, Mapping):
            arrays = {"": arrays}
        sources = [_Source(name, name or "(unnamed input)", np.asarray(a))
                   for name, a in arrays.items()]
        self._init(sources, batch_size, sample_axes, unbatched)

    def _init(self, sources: List[_Source], batch_size: Optional[int],
              sample_axes: Optional[Mapping[str, Optional[int]]],
              unbatched: bool) -> None:
        if batch_size is None:
            batch_size = 1 if unbatched else 32
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch size must be >= 1, not {batch_size}")
        if unbatched and batch_size != 1:
            raise ValueError("unbatched calibration data is sent one sample per batch "
                             "without its sample axis; the batch size must be 1, not "
                             f"{batch_size}")
        self.unbatched = bool(unbatched)
        if not sources:
            raise ValueError("no calibration data")
        sample_axes = dict(sample_axes or {})
        for name in sample_axes:
            if not any(s.name == name for s in sources):
                raise ValueError(f"sample_axes names tensor '{name}', which no calibration "
                                 "input is given for")
        for s in sources:
            axis = sample_axes.get(s.name, 0)
            if axis is not None and (not isinstance(axis, int) or axis < 0):
                raise ValueError(f"{s.label}: sample axis {axis!r} is not an int >= 0 or None")
            if s.array.ndim == 0:
                if axis:
                    raise ValueError(f"{s.label}: sample axis {axis} is out of range for an "
                                     "array of rank 0")
                axis = None
            elif axis is not None and axis >= s.array.ndim:
                raise ValueError(f"{s.label}: sample axis {axis} is out of range for an "
                                 f"array of rank {s.array.ndim}")
            s.axis = axis
            native = _native(s.array.dtype)
            if native not in _FLOATING and native not in _ONNX_TYPES:
                raise ValueError(f"{s.label}: element type {s.array.dtype} is not supported "
                                 f"for calibration data ({_SUPPORTED})")
        sampled = [s for s in sources if s.axis is not None]
        if not sampled:
            raise ValueError("every calibration input goes whole with each batch (a scalar, "
                             "or sample_axes NAME: None): at least one needs a sample axis to "
                             "cut batches along")
        num_samples = sampled[0].array.shape[sampled[0].axis]
        if num_samples == 0:
            raise ValueError(f"{sampled[0].label} has no samples (sample axis "
                             f"{sampled[0].axis} is 0 long)")
        # Samples of no values (an empty `axes` input) go beside an input whose
        # samples hold values, which bounds their count; alone, a tiny file
        # could declare 2^62 of them and make an endless stream of batches.
        if not any(s.array.size > 0 for s in sampled):
            raise ValueError(f"{sampled[0].label}: an array of shape {sampled[0].array.shape} "
                             f"has {num_samples} samples on axis {sampled[0].axis} but no "
                             "values, and no other input's samples hold any: every batch "
                             "would be empty")
        if any(s.array.shape[s.axis] != num_samples for s in sampled):
            sizes = ", ".join(f"{s.label} has {s.array.shape[s.axis]} on axis {s.axis}"
                              for s in sampled)
            raise ValueError("calibration inputs must have as many samples (along their "
                             f"sample axes) as each other: {sizes}")
        self._sources = sources
        self.batch_size = batch_size
        self.num_samples = int(num_samples)

    @property
    def num_batches(self) -> int:
        return (self.num_samples + self.batch_size - 1) // self.batch_size

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[service_pb2.TensorBatch]:
        for first in range(0, self.num_samples, self.batch_size):
            last = min(first + self.batch_size, self.num_samples)
            # An int index drops the sample axis (unbatched: one sample).
            at = first if self.unbatched else slice(first, last)
            yield service_pb2.TensorBatch(tensors=[
                named_tensor(s.name, s.array if s.axis is None else
                             s.array[(slice(None),) * s.axis + (at,)], s.label)
                for s in self._sources])


class NpyBatches(ArrayBatches):
    """Batches from files, like quantctl's --data flags.

    `inputs`: one path (the model's only input); a mapping tensor name ->
    path; or a sequence of paths and (name, path) pairs. An unnamed .pb file
    uses its TensorProto's name. `sample_axes` and `unbatched` as for
    ArrayBatches (quantctl's --sample_axis, --unbatched). Raises ValueError naming the files when
    they do not fit together (two unnamed inputs, one tensor twice,
    different sample counts, unsupported element types), OSError when a
    file cannot be read."""

    def __init__(self, inputs: Union[PathLike, Mapping[str, PathLike],
                                     Sequence[Union[PathLike, Tuple[str, PathLike]]]],
                 batch_size: Optional[int] = None, *,
                 sample_axes: Optional[Mapping[str, Optional[int]]] = None,
                 unbatched: bool = False):
        if isinstance(inputs, (str, os.PathLike)):
            entries = [("", inputs)]
        elif isinstance(inputs, Mapping):
            entries = list(inputs.items())
        else:
            entries = [e if isinstance(e, tuple) else ("", e) for e in inputs]
        sources: List[_Source] = []
        for name, path in entries:
            array, proto_name = read_tensor_file(path)
            label = f"{name}={os.fspath(path)}" if name else os.fspath(path)
            name = name or proto_name
            for other in sources:
                if other.name == name:
                    raise ValueError(
                        f"two unnamed calibration inputs ({other.label}, {label}): only a "
                        "model with one input may leave it unnamed; name them"
                        if not name else
                        f"two calibration inputs for tensor '{name}' ({other.label}, {label})")
            sources.append(_Source(name, label, array))
        self._init(sources, batch_size, sample_axes, unbatched)
