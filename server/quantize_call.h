// The Quantize RPC: its stream's messages mapped onto the shared JobReactor,
// the core job it submits, and what it sends back.
#ifndef QUANTD_SERVER_QUANTIZE_CALL_H_
#define QUANTD_SERVER_QUANTIZE_CALL_H_

#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.pb.h"
#include "server/job_reactor.h"

namespace quantd::server {

// A started call (reading its first message); gRPC owns the reactor.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartQuantizeCall(
    grpc::CallbackServerContext* context, const CallDeps& deps);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_QUANTIZE_CALL_H_
