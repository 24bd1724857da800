// The peer that quantize_bench measures quantd's transfer path against: a
// gRPC server that answers quantd's Quantize method with nothing but an
// echo, as fast as gRPC allows. It reads the whole request stream (as
// quantd must before it can answer), then writes every model chunk back as
// a response chunk, and a summary with the byte count, so quantd's own SDK
// can call it unchanged. No protobuf parse and no copy: each response
// chunk is a one-byte tag plus gRPC sub-slices of the request's payload.
// The difference to a quantd pass-through is quantd's own work.
//
// Started like quantd (`--port=0 --metrics_port=0 --host=H`); prints the
// same "listening on" line so that the tests' ServerProcess can start it.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.pb.h"
#include "server/chunk_wire.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on.");
ABSL_FLAG(int, port, 0, "Port to listen on (0: any free port).");
ABSL_FLAG(int, metrics_port, 0, "Ignored (accepted for ServerProcess).");

namespace {

using quantd::server::FindSoleBytesField;
using quantd::server::kRequestModelChunkField;
using quantd::server::WireField;

// Any method: the SDK calls /quantd.v1.QuantizationService/Quantize.
class EchoReactor final : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // The client half-closed: answer.
      WriteNext();
      return;
    }
    std::vector<grpc::Slice> slices;
    WireField chunk;
    if (in_.Dump(&slices).ok() &&
        FindSoleBytesField(slices, kRequestModelChunkField, &chunk)) {
      out_.push_back(ResponseChunk(slices, chunk));
      bytes_ += chunk.size;
    }
    in_.Clear();
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  // QuantizeResponse.model_chunk (field 3) holding the request's payload.
  static grpc::ByteBuffer ResponseChunk(const std::vector<grpc::Slice>& in,
                                        const WireField& chunk) {
    std::vector<grpc::Slice> out = {quantd::server::SoleBytesFieldHeader(
        quantd::v1::QuantizeResponse::kModelChunkFieldNumber, chunk.size)};
    for (grpc::Slice& piece :
         quantd::server::SubSlices(in, chunk.offset, chunk.size)) {
      out.push_back(std::move(piece));
    }
    return grpc::ByteBuffer(out.data(), out.size());
  }

  void WriteNext() {
    if (!size_sent_) {
      // As quantd does: the output's size first, so the SDK allocates once.
      size_sent_ = true;
      quantd::v1::QuantizeResponse response;
      response.mutable_progress()->set_stage(quantd::v1::STAGE_SEND);
      response.mutable_progress()->set_total(static_cast<int64_t>(bytes_));
      StartWrite(Serialized(response, &progress_));
      return;
    }
    if (next_ < out_.size()) {
      StartWrite(&out_[next_++]);
      return;
    }
    if (!summary_sent_) {
      summary_sent_ = true;
      quantd::v1::QuantizeResponse response;
      response.mutable_summary()->set_output_bytes(bytes_);
      response.mutable_summary()->set_model_unchanged(true);
      StartWrite(Serialized(response, &summary_));
      return;
    }
    Finish(grpc::Status::OK);
  }

  static grpc::ByteBuffer* Serialized(const quantd::v1::QuantizeResponse& r,
                                      grpc::ByteBuffer* out) {
    const std::string bytes = r.SerializeAsString();
    grpc::Slice slice(bytes);
    *out = grpc::ByteBuffer(&slice, 1);
    return out;
  }

  grpc::ByteBuffer in_;
  std::vector<grpc::ByteBuffer> out_;
  size_t next_ = 0;
  uint64_t bytes_ = 0;
  bool size_sent_ = false;
  bool summary_sent_ = false;
  grpc::ByteBuffer progress_;
  grpc::ByteBuffer summary_;
};

class EchoService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* /*context*/) override {
    return new EchoReactor();
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
  builder.RegisterCallbackGenericService(&service);
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
