// CallAuthorizations: the decisions the handlers read, and the refusal of new calls during a
// shutdown (the stream admitted before it goes on).
#include <grpcpp/server_context.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
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

// auth_interceptor.h, kUnfinishedCallsPerInFlightCall: a key's calls whose answers were
// queued (ReleaseCallSlot) but not yet sent keep counting until they finish (Forget), at most
// twice --max_calls_per_key; a client that reads its answers (each call finishes) never meets it.
TEST(CallAuthorizationsTest, AKeysCallsWhoseAnswersAreNotSentAreCappedAtTwiceTheLimit) {
  CallAuthorizations decisions(2);
  grpc::ServerContext calls[5];
  for (int i = 0; i < 4; ++i) {
    decisions.SetCallDecision(&calls[i], absl::OkStatus(), Writer(), true);
    ASSERT_TRUE(decisions.Get(&calls[i]).call.ok()) << i;
    decisions.ReleaseCallSlot(&calls[i]);  // Answered, never read: not finished.
  }
  decisions.SetCallDecision(&calls[4], absl::OkStatus(), Writer(), true);
  const CallAuthorizations::Decision over = decisions.Get(&calls[4]);
  EXPECT_EQ(over.call.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.call.message(), "not yet sent")) << over.call;
  EXPECT_EQ(over.principal, nullptr);
  decisions.Forget(&calls[4]);
  decisions.Forget(&calls[0]);  // One answer read: the call finished.
  grpc::ServerContext again;
  decisions.SetCallDecision(&again, absl::OkStatus(), Writer(), true);
  EXPECT_TRUE(decisions.Get(&again).call.ok());
  decisions.Forget(&again);
  for (int i = 1; i < 4; ++i) decisions.Forget(&calls[i]);
  // One call at a time, each finished before the next: never refused.
  for (int i = 0; i < 20; ++i) {
    grpc::ServerContext one;
    decisions.SetCallDecision(&one, absl::OkStatus(), Writer(), true);
    EXPECT_TRUE(decisions.Get(&one).call.ok()) << i;
    decisions.ReleaseCallSlot(&one);
    decisions.Forget(&one);
  }
}

// auth_interceptor.h, CallAuthorizations(max_unary_calls_per_key): one key's unary calls in
// flight are capped; the refusal names the key and the flag; a returned call (Forget) frees
// its place; another key, a stream (not unary), a refused call and authentication off (no
// key id) are not counted.
TEST(CallAuthorizationsTest, OneKeysUnaryCallsInFlightAreCappedAndFreedWhenTheyReturn) {
  CallAuthorizations decisions(2);
  const auto other = std::make_shared<Principal>(Principal{"key-2", Role::kReader, {}});
  const auto auth_off = std::make_shared<Principal>(Principal{"", Role::kAdmin, {}});
  grpc::ServerContext first, second, third, fourth, stream, refused, other_key, off_1, off_2,
      off_3;
  decisions.SetCallDecision(&refused, absl::PermissionDeniedError("role"), Writer(), true);
  decisions.SetCallDecision(&first, absl::OkStatus(), Writer(), true);
  decisions.SetCallDecision(&stream, absl::OkStatus(), Writer(), false);
  decisions.SetCallDecision(&second, absl::OkStatus(), Writer(), true);
  EXPECT_EQ(decisions.Get(&refused).call.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(decisions.Get(&first).call.ok());
  EXPECT_TRUE(decisions.Get(&stream).call.ok());
  EXPECT_TRUE(decisions.Get(&second).call.ok());

  decisions.SetCallDecision(&third, absl::OkStatus(), Writer(), true);
  const CallAuthorizations::Decision over = decisions.Get(&third);
  EXPECT_EQ(over.call.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.call.message(),
            "API key key-1 has 2 calls in flight: the limit is 2 per key (--max_calls_per_key); "
            "retry when one has returned");
  EXPECT_EQ(over.principal, nullptr);
  decisions.SetCallDecision(&other_key, absl::OkStatus(), other, true);
  EXPECT_TRUE(decisions.Get(&other_key).call.ok());
  for (grpc::ServerContext* off : {&off_1, &off_2, &off_3}) {
    decisions.SetCallDecision(off, absl::OkStatus(), auth_off, true);
    EXPECT_TRUE(decisions.Get(off).call.ok());
  }

  // The refused call and the stream ending free nothing; the first call returning does.
  decisions.Forget(&third);
  decisions.Forget(&stream);
  decisions.Forget(&refused);
  decisions.SetCallDecision(&fourth, absl::OkStatus(), Writer(), true);
  EXPECT_EQ(decisions.Get(&fourth).call.code(), absl::StatusCode::kResourceExhausted);
  decisions.Forget(&fourth);
  decisions.Forget(&first);
  decisions.SetCallDecision(&fourth, absl::OkStatus(), Writer(), true);
  EXPECT_TRUE(decisions.Get(&fourth).call.ok());

  // A call whose status is being sent frees its slot then, once: its later Forget frees no
  // other call's.
  decisions.ReleaseCallSlot(&second);
  decisions.ReleaseCallSlot(&second);
  grpc::ServerContext fifth, sixth;
  decisions.SetCallDecision(&fifth, absl::OkStatus(), Writer(), true);
  EXPECT_TRUE(decisions.Get(&fifth).call.ok());
  decisions.Forget(&second);
  decisions.SetCallDecision(&sixth, absl::OkStatus(), Writer(), true);
  EXPECT_EQ(decisions.Get(&sixth).call.code(), absl::StatusCode::kResourceExhausted);
}

// At most kMaxOpenCallsInFlight calls of the open methods at once; one that ends frees its place.
TEST(CallAuthorizationsTest, OpenMethodCallsInFlightAreCapped) {
  CallAuthorizations decisions;
  for (int i = 0; i < CallAuthorizations::kMaxOpenCallsInFlight; ++i) {
    EXPECT_TRUE(decisions.BeginOpenCall()) << i;
  }
  EXPECT_FALSE(decisions.BeginOpenCall());
  EXPECT_FALSE(decisions.BeginOpenCall());
  decisions.EndOpenCall();
  EXPECT_TRUE(decisions.BeginOpenCall());
  EXPECT_FALSE(decisions.BeginOpenCall());
}

// Without a limit (0, the default) no call is refused for the calls in flight.
TEST(CallAuthorizationsTest, WithoutALimitUnaryCallsAreNotCounted) {
  CallAuthorizations decisions;
  grpc::ServerContext calls[5];
  for (grpc::ServerContext& call : calls) {
    decisions.SetCallDecision(&call, absl::OkStatus(), Writer(), true);
    EXPECT_TRUE(decisions.Get(&call).call.ok());
  }
}

// auth_interceptor.h, max_unsent_answer_bytes_per_key: a key's answers reserved or unsent
// count against it; a reservation past the limit is refused while the key has others unsent,
// and so is a new call once the key is at the limit; a key with nothing unsent always gets one
// answer, however large; sending (ReleaseAnswerBytes) or Forget frees the bytes; other keys
// and streams are not counted.
TEST(CallAuthorizationsTest, AKeysUnsentAnswerBytesAreCappedAndFreedWhenSent) {
  CallAuthorizations decisions(/*max_unary_calls_per_key=*/100,
                               /*max_unsent_answer_bytes_per_key=*/1000);
  const auto other = std::make_shared<Principal>(Principal{"key-2", Role::kReader, {}});
  grpc::ServerContext big, first, second, third, late, other_key, stream;
  for (grpc::ServerContext* call : {&big, &first, &second, &third, &late}) {
    decisions.SetCallDecision(call, absl::OkStatus(), Writer(), true);
  }
  decisions.SetCallDecision(&other_key, absl::OkStatus(), other, true);
  decisions.SetCallDecision(&stream, absl::OkStatus(), Writer(), false);

  // Nothing unsent: one answer past the limit is built.
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&big, 5000).ok());
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 5000);
  const absl::Status refused = decisions.ReserveAnswerBytes(&first, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "key-1")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "--grpc_memory_mb")) << refused;
  EXPECT_EQ(decisions.Admit(&late).status().code(), absl::StatusCode::kResourceExhausted);
  // Neither another key nor a stream is held by key-1's bytes.
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&other_key, 900).ok());
  EXPECT_TRUE(decisions.Admit(&other_key).ok());
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&stream, 5000).ok());
  EXPECT_TRUE(decisions.Admit(&stream).ok());
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 5000);

  // Sent: freed.
  decisions.ReleaseAnswerBytes(&big);
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 0);
  EXPECT_TRUE(decisions.Admit(&late).ok());
  // Reserved, then the answer's size replaces the reservation.
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&first, 600).ok());
  decisions.SetAnswerBytes(&first, 400);
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 400);
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&second, 600).ok());  // 400 + 600: at the limit.
  EXPECT_EQ(decisions.ReserveAnswerBytes(&third, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(decisions.Admit(&third).status().code(), absl::StatusCode::kResourceExhausted);
  // A call's own reservation does not count against it: it may reserve again.
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&second, 500).ok());
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 900);
  // Forget frees what was never sent.
  decisions.Forget(&first);
  decisions.Forget(&second);
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 0);
  EXPECT_TRUE(decisions.ReserveAnswerBytes(&third, 1000).ok());
  for (grpc::ServerContext* call : {&big, &third, &late, &other_key, &stream}) {
    decisions.Forget(call);
  }
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-1"), 0);
  EXPECT_EQ(decisions.UnsentAnswerBytes("key-2"), 0);
}

// The limit for --grpc_memory_mb: a quarter of it, at least two answers of the largest size
// (16 MiB each), none for an unbounded quota.
TEST(CallAuthorizationsTest, TheUnsentAnswerLimitIsAQuarterOfTheGrpcMemoryQuota) {
  EXPECT_EQ(CallAuthorizations::UnsentAnswerBytesPerKey(int64_t{512} << 20), int64_t{128} << 20);
  EXPECT_EQ(CallAuthorizations::UnsentAnswerBytesPerKey(int64_t{64} << 20), int64_t{32} << 20);
  EXPECT_EQ(CallAuthorizations::UnsentAnswerBytesPerKey(0), 0);
}

}  // namespace
}  // namespace verity::server
