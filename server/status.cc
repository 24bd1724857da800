#include "server/status.h"

#include <string>

namespace quantd::server {
namespace {

bool IsKnownCode(int code) {
  return code >= static_cast<int>(absl::StatusCode::kOk) &&
         code <= static_cast<int>(absl::StatusCode::kUnauthenticated);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  return grpc::Status(IsKnownCode(code) ? static_cast<grpc::StatusCode>(code)
                                        : grpc::StatusCode::UNKNOWN,
                      std::string(status.message()));
}

std::string StatusCodeName(grpc::StatusCode code) {
  const int value = static_cast<int>(code);
  if (!IsKnownCode(value)) return "UNKNOWN";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(value));
}

}  // namespace quantd::server
