"""The generated stubs (quantd_client_proto), with a useful error when absent.

They are generated at build time (CMake target `quantd_python_client`, or
client/python/generate_protos.py) into the build directory, which must be on
PYTHONPATH next to this package.
"""

try:
    from quantd_client_proto.quantd.v1 import quantization_service_pb2 as service_pb2
    from quantd_client_proto.quantd.v1 import quantization_service_pb2_grpc as service_pb2_grpc
    from quantd_client_proto.tensorflow.quantization import quantization_options_pb2 as options_pb2
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "quantd_client needs its generated stubs (package quantd_client_proto): "
        "build the CMake target quantd_python_client and put "
        "<build>/client/python/gen on PYTHONPATH, or run "
        "client/python/generate_protos.py --out DIR and put DIR on PYTHONPATH "
        f"({e})") from e

__all__ = ["service_pb2", "service_pb2_grpc", "options_pb2"]
