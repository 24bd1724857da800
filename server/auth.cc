#include "server/auth.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace quantd::server {
namespace {

constexpr char kAuthorization[] = "authorization";
constexpr absl::string_view kBearer = "Bearer ";

}  // namespace

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of `b` (the secret) is looked at whatever `a` holds, so the
  // time depends on the secret's length only, never on where `a` differs.
  uint8_t diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const uint8_t given = i < a.size() ? static_cast<uint8_t>(a[i]) : 0;
    diff |= given ^ static_cast<uint8_t>(b[i]);
  }
  return diff == 0;
}

std::string TrimToken(absl::string_view contents) {
  return std::string(absl::StripAsciiWhitespace(contents));
}

grpc::Status BearerTokenAuth::Check(
    const grpc::ServerContextBase& context) const {
  if (!enabled()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  // One authorization header, carrying exactly our token.
  const auto [first, last] = metadata.equal_range(kAuthorization);
  bool ok = false;
  if (first != last && std::next(first) == last) {
    const absl::string_view value(first->second.data(), first->second.size());
    if (absl::StartsWith(value, kBearer)) {
      ok = ConstantTimeEquals(value.substr(kBearer.size()), token_);
    }
  }
  if (ok) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or invalid bearer token");
}

}  // namespace quantd::server
