"""Python client of quantd, the ONNX quantization service.

    from quantd_client import QuantdClient, NpyBatches

    with QuantdClient("127.0.0.1:50051", timeout=60) as client:
        result = client.quantize("model.onnx", {
            "quantization_method": {"experimental_method": "STATIC_RANGE"}},
            calibration_batches=NpyBatches("calib_x.npy", batch_size=32))
        result.save("model.int8.onnx")
        print(result.summary)

The generated stubs (quantd_client_proto) must be on PYTHONPATH: see
client/python/README.md.
"""

from ._proto import options_pb2, service_pb2
from .batches import ArrayBatches, BatchLike, NpyBatches, named_tensor, read_tensor_file, to_tensor_batch
from .external_data import (StreamedModel, inline_external_data, inline_streamed_data,
                            open_for_streaming, uses_external_data, write_model_with_external_data)
from .client import (CalibrationResult, QuantdClient, QuantdError, QuantizeResult, ServingStatus,
                     TensorRange, TlsOptions)

__all__ = [
    "ArrayBatches", "BatchLike", "CalibrationResult", "NpyBatches", "QuantdClient", "QuantdError",
    "QuantizeResult", "ServingStatus", "TensorRange", "TlsOptions", "named_tensor", "options_pb2",
    "read_tensor_file", "service_pb2", "to_tensor_batch", "inline_external_data",
    "uses_external_data", "write_model_with_external_data", "StreamedModel",
    "inline_streamed_data", "open_for_streaming",
]
