#include "server/status.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace quantd::server {
namespace {

TEST(ToGrpcStatusTest, OkIsOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(ToGrpcStatusTest, KeepsCodeAndMessageOfEveryCode) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "why");
    const grpc::Status converted = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(converted.error_code()), code);
    EXPECT_EQ(converted.error_message(), "why");
  }
}

TEST(ToGrpcStatusTest, NamedCodesMapOneToOne) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(absl::UnimplementedError("x")).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(ToGrpcStatus(absl::CancelledError("x")).error_code(),
            grpc::StatusCode::CANCELLED);
}

TEST(ToGrpcStatusTest, CodeOutsideTheStandardRangeIsUnknown) {
  const absl::Status odd(static_cast<absl::StatusCode>(42), "odd");
  const grpc::Status converted = ToGrpcStatus(odd);
  EXPECT_EQ(converted.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(converted.error_message(), "odd");
}

TEST(StatusCodeNameTest, NamesAreTheCanonicalOnes) {
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::INVALID_ARGUMENT),
            "INVALID_ARGUMENT");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED),
            "RESOURCE_EXHAUSTED");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED),
            "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
}

TEST(CapStatusMessageTest, ShortMessagesPassUnchanged) {
  EXPECT_EQ(CapStatusMessage("tensor x: bad"), "tensor x: bad");
  const std::string exact(kMaxStatusMessageBytes, 'a');
  EXPECT_EQ(CapStatusMessage(exact), exact);
}

TEST(CapStatusMessageTest, ListIsCutBetweenItemsWithACount) {
  std::vector<std::string> items;
  for (int i = 0; i < 100000; ++i) items.push_back(absl::StrCat("entry_", i));
  const std::string message =
      absl::StrCat("bad unit-wise entries: ", absl::StrJoin(items, "; "));
  const std::string capped = CapStatusMessage(message);
  ASSERT_LE(capped.size(), kMaxStatusMessageBytes);
  EXPECT_EQ(capped.rfind("bad unit-wise entries: entry_0; entry_1; ", 0), 0u);
  // The head ends on a whole item, and the note counts the rest exactly.
  const size_t note = capped.find(" ... and ");
  ASSERT_NE(note, std::string::npos) << capped;
  const std::string head = capped.substr(0, note);
  const size_t last = head.rfind("entry_");
  const int shown = std::stoi(head.substr(last + 6)) + 1;
  EXPECT_NE(capped.find(absl::StrCat(" and ", 100000 - shown, " more (")),
            std::string::npos)
      << capped;
}

TEST(CapStatusMessageTest, TextWithoutSeparatorsIsCutOnACharacter) {
  std::string message;
  for (int i = 0; i < 2000; ++i) message += "\xc3\xa9";  // U+00E9, 2 bytes.
  const std::string capped = CapStatusMessage(message);
  ASSERT_LE(capped.size(), kMaxStatusMessageBytes);
  const size_t note = capped.find(" ... (");
  ASSERT_NE(note, std::string::npos);
  EXPECT_EQ(note % 2, 0u);  // Whole characters only.
  EXPECT_NE(capped.find("bytes cut)"), std::string::npos);
}

TEST(ToGrpcStatusTest, LongMessagesAreCapped) {
  const grpc::Status s =
      ToGrpcStatus(absl::InvalidArgumentError(std::string(1 << 20, 'x')));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(s.error_message().size(), kMaxStatusMessageBytes);
}

}  // namespace
}  // namespace quantd::server
