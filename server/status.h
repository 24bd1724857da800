// The one place where core's absl::Status becomes the grpc::Status a client
// sees, and where a status code gets its name for logs and metric labels.
#ifndef QUANTD_SERVER_STATUS_H_
#define QUANTD_SERVER_STATUS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace quantd::server {

// Longest status message a client is sent. gRPC carries the message in
// trailing metadata, and a default client refuses metadata past about 8 KiB
// (it then sees RESOURCE_EXHAUSTED instead of the reason), so messages that
// list a client's input are cut well below that.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// Same code, same message (cut by CapStatusMessage). absl and gRPC number
// their codes identically (both follow google.rpc.Code); codes outside that
// range become UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

// `message` when it fits in `max_bytes`, else its head cut after the last
// list separator ("; ", ", " or a newline) that fits, followed by how many
// items and bytes were cut. Never splits a UTF-8 character.
std::string CapStatusMessage(absl::string_view message,
                             size_t max_bytes = kMaxStatusMessageBytes);

// "OK", "INVALID_ARGUMENT", ...: a bounded set, safe as a metric label.
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_STATUS_H_
