// CallAuthorizations: the decisions the handlers read, and the refusal of new calls during a
// shutdown (the stream admitted before it goes on).
#include <grpcpp/server_context.h>

#include <memory>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/auth/api_keys.h"
#include "server/auth/auth_interceptor.h"

namespace verity::server {
namespace {

std::shared_ptr<const Principal> Writer() {
  return std::make_shared<Principal>(Principal{"key-1", Role::kWriter, {}});
}

TEST(CallAuthorizationsTest, AdmitReturnsTheRecordedDecisionAndFailsClosedWithoutOne) {
  CallAuthorizations decisions;
  grpc::ServerContext admitted, refused, unseen;
  decisions.SetCallDecision(&admitted, absl::OkStatus(), Writer());
  decisions.SetCallDecision(&refused, absl::PermissionDeniedError("role"), nullptr);

  absl::StatusOr<std::shared_ptr<const Principal>> who = decisions.Admit(&admitted);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ((*who)->key_id, "key-1");
  EXPECT_EQ(decisions.Admit(&refused).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(decisions.Admit(&unseen).status().code(), absl::StatusCode::kInternal);

  // A refused message refuses the call until a later message is admitted.
  decisions.SetMessageDecision(&admitted, absl::PermissionDeniedError("project"));
  EXPECT_EQ(decisions.Admit(&admitted).status().code(), absl::StatusCode::kPermissionDenied);
  decisions.SetMessageDecision(&admitted, absl::OkStatus());
  EXPECT_TRUE(decisions.Admit(&admitted).ok());

  decisions.Forget(&admitted);
  EXPECT_EQ(decisions.Admit(&admitted).status().code(), absl::StatusCode::kInternal);
}

TEST(CallAuthorizationsTest, AfterRefuseNewCallsNewCallsGetTheRefusalAndOpenStreamsGoOn) {
  CallAuthorizations decisions;
  grpc::ServerContext stream, later;
  decisions.SetCallDecision(&stream, absl::OkStatus(), Writer());

  decisions.RefuseNewCalls(absl::UnavailableError("the server is shutting down"));

  // A call decided after the refusal is refused, whatever the interceptor decided for its key.
  decisions.SetCallDecision(&later, absl::OkStatus(), Writer());
  absl::StatusOr<std::shared_ptr<const Principal>> refused = decisions.Admit(&later);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(), "the server is shutting down");
  // Get() carries it too: the interceptor replaces an OK status of that call with it.
  EXPECT_EQ(decisions.Get(&later).call.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(decisions.Get(&later).principal, nullptr);

  // The stream admitted before goes on: its next messages are still admitted.
  decisions.SetMessageDecision(&stream, absl::OkStatus());
  absl::StatusOr<std::shared_ptr<const Principal>> who = decisions.Admit(&stream);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ((*who)->key_id, "key-1");
}

}  // namespace
}  // namespace verity::server
