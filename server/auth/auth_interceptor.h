// Authentication and authorization of every RPC, in one interceptor in front of every service.
//
// For each call the interceptor
//   - on the client's initial metadata: authenticates the key of `authorization: Bearer <key>`
//     (server/auth/key_ring.h) and checks that its role is enough for the method
//     (server/auth/rpc_policy.h): no or a bad key -> UNAUTHENTICATED, a role too low or a
//     project-scoped key on a server-wide method -> PERMISSION_DENIED;
//   - on every received request message (each batch of a stream): authenticates the key again
//     (a key revoked since the call began -> UNAUTHENTICATED: revocation reaches open streams
//     within the KeyRing's refresh interval, at once on the server that revoked it) and checks
//     that the key may touch the project the message names -> PERMISSION_DENIED otherwise;
//   - records the decision in CallAuthorizations, keyed by the call's ServerContext;
//   - on a unary call's answer: counts its encoded size against the key's unsent answer bytes
//     until it is sent (CallAuthorizations::SetAnswerBytes).
//
// gRPC C++ (1.51) server interceptors cannot end a call before its handler runs (there is no
// server-side Hijack: grpc/grpc#24017), so the decision is enforced by the handlers: the first
// thing every handler does is CallAuthorizations::Admit(context), which returns the
// interceptor's decision, and a streaming handler asks again after each message it reads.
// Admit fails closed: a call the interceptor never saw is refused (INTERNAL). As a second
// line, a call refused at the metadata stage that a handler nevertheless answered has each
// answer message replaced by an empty one and an OK status replaced by the refusal before they
// are sent (logged as event=auth_not_enforced), and
// tests/auth_test.cc calls every RPC of every service with every kind of key.
//
// With authentication off (no KeyRing: only allowed on a loopback-only server) every call is
// admitted as an admin valid for every project.
//
// Thread-safety: thread-safe; the factory, the ring and the CallAuthorizations must outlive
// the grpc::Server.
#ifndef VERITY_SERVER_AUTH_AUTH_INTERCEPTOR_H_
#define VERITY_SERVER_AUTH_AUTH_INTERCEPTOR_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/auth/api_keys.h"
#include "server/auth/key_ring.h"

namespace verity::server {

// The interceptor's decision for each live call, read by the handlers.
class CallAuthorizations {
 public:
  // `max_unary_calls_per_key` (> 0; 0 = no limit): the unary calls one API key may have in
  // flight at once; past it the key's new unary call is refused RESOURCE_EXHAUSTED, so that one
  // key cannot hold every gRPC thread with slow calls. Streams have their own limit
  // (IngestServiceImpl, --max_streams_per_key).
  //
  // `max_unsent_answer_bytes_per_key` (> 0; 0 = no limit): the encoded bytes of one key's
  // unary answers being built (ReserveAnswerBytes) or waiting to be sent, at most; past it the
  // key's new calls are refused RESOURCE_EXHAUSTED, so that a client that does not read its
  // answers cannot make the server hold them without bound.
  explicit CallAuthorizations(int max_unary_calls_per_key = 0,
                              int64_t max_unsent_answer_bytes_per_key = 0)
      : max_unary_calls_per_key_(max_unary_calls_per_key),
        max_unsent_answer_bytes_per_key_(max_unsent_answer_bytes_per_key) {}

  struct Decision {
    // Authentication and role, decided from the initial metadata; fixed for the call.
    absl::Status call = absl::OkStatus();
    // The project of the latest received message (OK before any message).
    absl::Status message = absl::OkStatus();
    std::shared_ptr<const Principal> principal;  // Set when `call` is OK.
    // The key whose unary calls in flight count this call ("" when not counted).
    std::string counted_key;
    // The key whose unfinished unary calls count this call, until Forget ("" when not counted).
    std::string unfinished_key;
    // This call's answer bytes counted against `unfinished_key` (reserved, or the answer's
    // encoded size once it is sent), until it is sent or Forget.
    int64_t answer_bytes = 0;
  };

  // A key's unary calls not yet finished, at most: its calls in flight plus those whose answer
  // waits to be sent (a client that does not read its answers, or never opens its HTTP/2
  // window, keeps each such call, and its gRPC thread, after ReleaseCallSlot). Twice the limit
  // of calls in flight, so that a client that reads its answers never meets it.
  static constexpr int kUnfinishedCallsPerInFlightCall = 2;

  // The limit of one key's unsent answer bytes for a gRPC memory quota of `grpc_memory_bytes`
  // (--grpc_memory_mb; 0: unbounded, and so is this): a quarter of it, and at least two
  // answers of the largest size, so that a client paging one call at a time is never refused
  // while its previous page is still counted.
  static int64_t UnsentAnswerBytesPerKey(int64_t grpc_memory_bytes);

  // The caller's principal when the interceptor admitted the call (and its latest message);
  // the refusal otherwise; INTERNAL when no decision was recorded for `context`; CANCELLED
  // when the call was cancelled or is past its deadline (its handler then does no work);
  // RESOURCE_EXHAUSTED when the call's key has its limit of answer bytes unsent.
  absl::StatusOr<std::shared_ptr<const Principal>> Admit(
      const grpc::ServerContextBase* context) const;

  // Every call decided from now on is refused with `refusal` (not OK), whatever its key:
  // a server that is shutting down answers new calls UNAVAILABLE itself rather than leave them
  // to the gRPC shutdown, which cancels a call that arrives as it closes the listener
  // (CANCELLED, which clients do not retry). Calls decided before keep their decision, so a
  // stream admitted earlier goes on reading and acking. Open methods (health, reflection) are
  // never refused: the health service reports NOT_SERVING itself.
  void RefuseNewCalls(absl::Status refusal);

  // Calls of the open methods (health, reflection: they need no key) in flight at once, at
  // most; past it a new one is cancelled, so that callers without a key cannot hold every
  // gRPC thread with open streams (a reflection or health Watch stream holds one while it is
  // open) and keep keyed calls out. The same share as one key's unary calls by default.
  static constexpr int kMaxOpenCallsInFlight = 64;
  // Counts a call of an open method; false (not counted) when kMaxOpenCallsInFlight are in
  // flight already. Each counted call is ended with EndOpenCall, once.
  bool BeginOpenCall();
  void EndOpenCall();

  // Interceptor side. An admitted `unary` call of a key is counted against the key's limit
  // until ReleaseCallSlot(context) (its status is about to be sent) or Forget(context),
  // whichever comes first, and refused when the key is at it; and against the key's
  // unfinished calls (kUnfinishedCallsPerInFlightCall times the limit) until Forget.
  void SetCallDecision(const grpc::ServerContextBase* context, absl::Status status,
                       std::shared_ptr<const Principal> principal, bool unary = false);
  void SetMessageDecision(const grpc::ServerContextBase* context, absl::Status status);
  Decision Get(const grpc::ServerContextBase* context) const;
  // The call's answer is on its way: it no longer counts against its key. Called before the
  // status is sent, so that a client making one call at a time is never refused for the call
  // it already has the answer of (gRPC destroys a finished call, and with it runs Forget, only
  // some time after the client has the status).
  void ReleaseCallSlot(const grpc::ServerContextBase* context);
  void Forget(const grpc::ServerContextBase* context);

  // Answer bytes (max_unsent_answer_bytes_per_key). A handler about to build an answer of up
  // to `bytes` encoded bytes reserves them first: RESOURCE_EXHAUSTED when the key's other
  // unsent answers and this one would pass the limit. A key with nothing unsent always gets
  // one answer, so a limit below the message size never refuses a client that reads. OK for
  // calls not counted per key (streams, open methods, authentication off). A second
  // reservation of the same call replaces its first.
  absl::Status ReserveAnswerBytes(const grpc::ServerContextBase* context, int64_t bytes);
  // Interceptor side: the answer's encoded size replaces the call's reservation when it is
  // handed to gRPC (PRE_SEND_MESSAGE), and is released once sent (POST_SEND_MESSAGE) or at
  // Forget, whichever comes first.
  void SetAnswerBytes(const grpc::ServerContextBase* context, int64_t bytes);
  void ReleaseAnswerBytes(const grpc::ServerContextBase* context);
  // The encoded bytes of `key_id`'s answers reserved or unsent now (tests, metrics).
  int64_t UnsentAnswerBytes(const std::string& key_id) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const grpc::ServerContextBase*, Decision> decisions_ ABSL_GUARDED_BY(mu_);
  absl::Status new_call_refusal_ ABSL_GUARDED_BY(mu_);  // OK until RefuseNewCalls.
  // Frees `decision`'s slot in its key's count, once.
  void ReleaseSlotLocked(Decision& decision) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED for a call of `key_id`, which has `unsent` answer bytes unsent.
  absl::Status UnsentAnswersRefusal(const std::string& key_id, int64_t unsent) const;
  // Sets `decision`'s answer bytes to `bytes`, adjusting its key's total.
  void SetAnswerBytesLocked(Decision& decision, int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_unary_calls_per_key_;
  absl::flat_hash_map<std::string, int> unary_calls_by_key_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> unfinished_calls_by_key_ ABSL_GUARDED_BY(mu_);
  const int64_t max_unsent_answer_bytes_per_key_;
  absl::flat_hash_map<std::string, int64_t> unsent_answer_bytes_by_key_ ABSL_GUARDED_BY(mu_);
  int open_calls_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

class AuthInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `keys` nullptr: authentication off.
  AuthInterceptorFactory(KeyRing* keys, CallAuthorizations& decisions);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  KeyRing* keys() const { return keys_; }
  CallAuthorizations& decisions() const { return decisions_; }

 private:
  KeyRing* const keys_;
  CallAuthorizations& decisions_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_AUTH_INTERCEPTOR_H_
