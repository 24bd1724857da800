// A Quantize/Calibrate call refused before anything is read (bad token,
// server busy or draining).
#ifndef QUANTD_SERVER_REFUSED_CALL_H_
#define QUANTD_SERVER_REFUSED_CALL_H_

#include "grpcpp/grpcpp.h"
#include "server/call_record.h"
#include "server/metrics.h"

namespace quantd::server {

// A Quantize/Calibrate call refused before anything is read (bad token,
// server busy): finishes at once with `status`, counted and logged like any
// other call.
class RefusedReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RefusedReactor(const char* method, grpc::CallbackServerContext* context,
                 Metrics* metrics, const grpc::Status& status) {
    CallRecord call;
    call.Begin(method, context);
    RecordCall(metrics, call, status);
    this->Finish(status);
  }
  void OnDone() override { delete this; }
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_REFUSED_CALL_H_
