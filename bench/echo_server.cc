// The peer that quantize_bench measures quantd's transfer path against: a
// gRPC server with quantd's Quantize method that does nothing but echo. It
// reads the whole request stream (as quantd must before it can answer),
// then writes every model chunk back as a response chunk and a summary with
// the byte count, so quantd's own SDK can call it unchanged. The bytes are
// deserialized and serialized once each, as any protobuf server's are; the
// difference to a quantd pass-through is quantd's own work and copies.
//
// Started like quantd (`--port=0 --metrics_port=0`); prints the same
// "listening on" line so that the tests' ServerProcess can start it.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.grpc.pb.h"

ABSL_FLAG(int, port, 0, "Port to listen on (0: any free port).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, metrics_port, 0, "Ignored (accepted for ServerProcess).");

namespace {

using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

class EchoService final : public quantd::v1::QuantizationService::Service {
  grpc::Status Quantize(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<QuantizeResponse, QuantizeRequest>* stream)
      override {
    std::vector<std::string> chunks;
    QuantizeRequest request;
    while (stream->Read(&request)) {
      if (request.payload_case() == QuantizeRequest::kModelChunk) {
        chunks.push_back(std::move(*request.mutable_model_chunk()));
      }
    }
    uint64_t bytes = 0;
    QuantizeResponse response;
    for (std::string& chunk : chunks) {
      bytes += chunk.size();
      *response.mutable_model_chunk() = std::move(chunk);
      if (!stream->Write(response)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
    }
    response.mutable_summary()->set_output_bytes(bytes);
    response.mutable_summary()->set_model_unchanged(true);
    stream->Write(response);
    return grpc::Status::OK;
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  EchoService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::GetFlag(FLAGS_host) + ":" +
                               std::to_string(absl::GetFlag(FLAGS_port)),
                           grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "echo server did not start\n");
    return 1;
  }
  std::printf("echo listening on %s:%d (metrics on :0)\n",
              absl::GetFlag(FLAGS_host).c_str(), port);
  std::fflush(stdout);
  server->Wait();
  return 0;
}
