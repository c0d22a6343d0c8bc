// ToGrpcStatus / FromGrpcStatus (grpc_status.h): codes map one to one and the message is kept.
#include "server/api/grpc_status.h"

#include <gtest/gtest.h>

namespace verity::server {
namespace {

TEST(GrpcStatusTest, OkStaysOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

// The canonical codes a client acts on, each to its namesake, message unchanged.
TEST(GrpcStatusTest, EachCodeMapsToItsNamesakeAndTheMessageIsKept) {
  const std::pair<absl::StatusCode, grpc::StatusCode> pairs[] = {
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
  };
  for (const auto& [absl_code, grpc_code] : pairs) {
    const grpc::Status to = ToGrpcStatus(absl::Status(absl_code, "item: must not be empty"));
    EXPECT_EQ(to.error_code(), grpc_code) << absl::StatusCodeToString(absl_code);
    EXPECT_EQ(to.error_message(), "item: must not be empty");
    const absl::Status from = FromGrpcStatus(grpc::Status(grpc_code, "server said no"));
    EXPECT_EQ(from.code(), absl_code) << absl::StatusCodeToString(absl_code);
    EXPECT_EQ(from.message(), "server said no");
  }
}

}  // namespace
}  // namespace verity::server
