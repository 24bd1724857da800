#include "tests/support/health.h"

#include <string>
#include <utility>

#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"

namespace quantd::testing {

bool IsServing(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  grpc::ByteBuffer request(nullptr, 0);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return false;
  grpc::Slice slice;
  if (!response.DumpToSingleSlice(&slice).ok()) return false;
  // The response bytes of {status = SERVING}.
  return std::string(reinterpret_cast<const char*>(slice.begin()),
                     slice.size()) == std::string("\x08\x01", 2);
}

}  // namespace quantd::testing
