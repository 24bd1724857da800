// The raw grpc.health.v1 Check of a whole server, without the health
// service's generated stubs (Debian's gRPC ships none for C++).
#ifndef QUANTD_TESTS_SUPPORT_HEALTH_H_
#define QUANTD_TESTS_SUPPORT_HEALTH_H_

#include <memory>

#include "grpcpp/grpcpp.h"

namespace quantd::testing {

// True when the server answers Check("") with SERVING.
bool IsServing(const std::shared_ptr<grpc::Channel>& channel);

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_HEALTH_H_
