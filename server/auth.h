// Bearer-token authentication of quantd.v1.QuantizationService calls.
//
// Checked by each handler before anything else (the callback API of gRPC
// 1.51 has no interceptor that can fail a call, and an AuthMetadataProcessor
// only runs on secure ports and for every service alike): a call without
// `authorization: Bearer <token>` is finished at once with UNAUTHENTICATED.
// grpc.health.v1 and server reflection are not checked, so probes and
// grpcurl's schema discovery work without the token.
#ifndef QUANTD_SERVER_AUTH_H_
#define QUANTD_SERVER_AUTH_H_

#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace quantd::server {

class BearerTokenAuth {
 public:
  // An empty token turns authentication off (every call is let through).
  explicit BearerTokenAuth(std::string token) : token_(std::move(token)) {}

  bool enabled() const { return !token_.empty(); }

  // OK, or UNAUTHENTICATED "missing or invalid bearer token".
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  const std::string token_;
};

// Whether `given` == `secret`, in time that depends only on the secret's
// length, not on where the strings first differ.
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

// A token file's contents without surrounding whitespace (the trailing
// newline editors add).
std::string TrimToken(absl::string_view contents);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_AUTH_H_
