// A Quantize or Calibrate stream driven message by message from a test, for
// the sequences a well-behaved client never sends.
#ifndef QUANTD_TESTS_E2E_RAW_CALL_H_
#define QUANTD_TESTS_E2E_RAW_CALL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.grpc.pb.h"

namespace quantd::testing {

// One streaming call driven step by step from the test.
template <typename Request, typename Response>
class RawCall {
 public:
  using Stream = grpc::ClientReaderWriter<Request, Response>;

  // Sends config (filled by the caller; model_size_bytes set here unless
  // it already is) and the model in 1 MiB chunks.
  template <typename Config, typename Start>
  RawCall(Start start, const Config& config, const std::string& model,
          absl::Duration deadline = absl::InfiniteDuration()) {
    if (deadline != absl::InfiniteDuration()) {
      context_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    }
    stream_ = start(&context_);
    Request request;
    *request.mutable_config() = config;
    // A config that declares its own size (a test of a client that lies or
    // stalls) keeps it.
    if (config.model_size_bytes() == 0) {
      request.mutable_config()->set_model_size_bytes(model.size());
    }
    ok_ = stream_->Write(request);
    constexpr size_t kChunk = size_t{1} << 20;
    for (size_t offset = 0; ok_ && offset < model.size(); offset += kChunk) {
      request.set_model_chunk(model.substr(offset, kChunk));
      ok_ = stream_->Write(request);
    }
  }

  bool Write(const Request& request) {
    ok_ = ok_ && stream_->Write(request);
    return ok_;
  }
  void Cancel() { context_.TryCancel(); }
  // Half-closes (unless told not to: then only the server can end the
  // call), reads to the end and returns the status.
  grpc::Status Finish(std::vector<Response>* responses = nullptr,
                      bool half_close = true) {
    if (ok_ && half_close) stream_->WritesDone();
    Response response;
    while (stream_->Read(&response)) {
      if (responses != nullptr) responses->push_back(response);
    }
    return stream_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<Stream> stream_;
  bool ok_ = true;
};

using QuantizeCall =
    RawCall<quantd::v1::QuantizeRequest, quantd::v1::QuantizeResponse>;
using CalibrateCall =
    RawCall<quantd::v1::CalibrateRequest, quantd::v1::CalibrateResponse>;

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_E2E_RAW_CALL_H_
