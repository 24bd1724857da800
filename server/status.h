// The one place where core's absl::Status becomes the grpc::Status a client
// sees, and where a status code gets its name for logs and metric labels.
#ifndef QUANTD_SERVER_STATUS_H_
#define QUANTD_SERVER_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace quantd::server {

// Same code, same message. absl and gRPC number their codes identically
// (both follow google.rpc.Code); codes outside that range become UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ...: a bounded set, safe as a metric label.
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_STATUS_H_
