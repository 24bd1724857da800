// Server reflection is on: a client that knows nothing of our protos can
// list the services. Debian ships no reflection client stubs, so the request
// is encoded by hand (ServerReflectionRequest.list_services = field 7) and
// sent through gRPC's generic (bytes-only) stub.
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {
namespace {

// Waits for the next completion of `cq`; false when the operation failed.
bool Next(grpc::CompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  return cq->Next(&tag, &ok) && ok;
}

std::string BufferToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return "";
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

TEST(ReflectionE2eTest, ListsTheQuantizationAndHealthServices) {
  ServerProcess server;
  ASSERT_TRUE(server.ok()) << server.startup_output();
  auto channel =
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  call->StartCall(nullptr);
  ASSERT_TRUE(Next(&cq));

  const std::string request = {0x3a, 0x00};  // list_services: "".
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, nullptr);
  ASSERT_TRUE(Next(&cq));
  call->WritesDone(nullptr);
  ASSERT_TRUE(Next(&cq));

  grpc::ByteBuffer in;
  call->Read(&in, nullptr);
  ASSERT_TRUE(Next(&cq));
  const std::string response = BufferToString(in);
  EXPECT_THAT(response, ::testing::HasSubstr("quantd.v1.QuantizationService"));
  EXPECT_THAT(response, ::testing::HasSubstr("grpc.health.v1.Health"));

  grpc::Status status;
  call->Finish(&status, nullptr);
  ASSERT_TRUE(Next(&cq));
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace quantd::testing
