#include "server/auth/auth_interceptor.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include <google/protobuf/message_lite.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/api/grpc_status.h"
#include "server/api/validation.h"
#include "server/auth/rpc_policy.h"
#include "server/observability/log.h"

namespace verity::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;
using grpc::experimental::ServerRpcInfo;

constexpr char kAuthorizationKey[] = "authorization";
constexpr absl::string_view kBearer = "Bearer ";

std::shared_ptr<const Principal> AuthOffPrincipal() {
  static const auto* const kPrincipal = new std::shared_ptr<const Principal>(
      std::make_shared<Principal>(Principal{"", Role::kAdmin, {}}));
  return *kPrincipal;
}

class AuthInterceptor : public grpc::experimental::Interceptor {
 public:
  AuthInterceptor(const AuthInterceptorFactory& factory, ServerRpcInfo* info)
      : factory_(factory),
        info_(info),
        context_(info->server_context()),
        method_(info->method() != nullptr ? info->method() : ""),
        policy_(FindRpcPolicy(method_)),
        open_(IsOpenMethod(method_)) {}

  ~AuthInterceptor() override {
    EndOpenCall();
    factory_.decisions().Forget(context_);
  }

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      DecideCall(*methods->GetRecvInitialMetadata());
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() != nullptr) {
      DecideMessage(methods->GetRecvMessage());
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      WithholdRefusedAnswer(*methods);
      CountAnswer(*methods);
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_SEND_MESSAGE)) {
      factory_.decisions().ReleaseAnswerBytes(context_);
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      EndOpenCall();
      factory_.decisions().ReleaseCallSlot(context_);
      const CallAuthorizations::Decision decision = factory_.decisions().Get(context_);
      if (!decision.call.ok() && methods->GetSendStatus().ok()) {
        LogEvent("auth_not_enforced", {{"method", method_}});
        methods->ModifySendStatus(ToGrpcStatus(decision.call));
      }
    }
    methods->Proceed();
  }

 private:
  void DecideCall(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
    CallAuthorizations& decisions = factory_.decisions();
    // No decision for an open method: its handler (gRPC's) never asks, and a refusal recorded
    // for it would replace the health service's answer during a shutdown. Its calls are only
    // counted, and one past the limit is cancelled: its handler then returns at once (a
    // stream's reads fail), giving its thread back.
    if (open_) {
      open_call_counted_ = decisions.BeginOpenCall();
      if (!open_call_counted_) {
        LogEvent("open_call_refused", {{"method", method_}});
        info_->server_context()->TryCancel();
      }
      return;
    }
    if (factory_.keys() == nullptr) {
      decisions.SetCallDecision(context_, absl::OkStatus(), AuthOffPrincipal());
      return;
    }
    if (policy_ == nullptr) {
      // A method of a registered service with no access policy: refused, never guessed.
      decisions.SetCallDecision(
          context_, absl::PermissionDeniedError(absl::StrCat("no access policy for ", method_)),
          nullptr);
      return;
    }
    auto it = metadata.find(kAuthorizationKey);
    if (it == metadata.end()) {
      decisions.SetCallDecision(
          context_,
          absl::UnauthenticatedError(
              "no API key: send `authorization: Bearer <key>` (CLI: --api_key or "
              "VERITY_API_KEY)"),
          nullptr);
      return;
    }
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, kBearer)) {
      decisions.SetCallDecision(
          context_, absl::UnauthenticatedError("authorization metadata must be \"Bearer <key>\""),
          nullptr);
      return;
    }
    absl::StatusOr<std::shared_ptr<const Principal>> principal =
        factory_.keys()->Authenticate(value);
    if (!principal.ok()) {
      decisions.SetCallDecision(context_, principal.status(), nullptr);
      return;
    }
    const Principal& who = **principal;
    if (who.role < policy_->role) {
      decisions.SetCallDecision(
          context_,
          absl::PermissionDeniedError(absl::StrCat("API key ", who.key_id, " has role ",
                                                   RoleName(who.role), "; ", method_,
                                                   " needs ", RoleName(policy_->role))),
          nullptr);
      return;
    }
    if (policy_->scope == ProjectScope::kEveryProject && !who.AllProjects()) {
      decisions.SetCallDecision(
          context_,
          absl::PermissionDeniedError(absl::StrCat("API key ", who.key_id,
                                                   " is limited to some projects; ", method_,
                                                   " needs a key valid for every project")),
          nullptr);
      return;
    }
    principal_ = *principal;
    key_text_ = std::string(value);
    decisions.SetCallDecision(context_, absl::OkStatus(), *std::move(principal),
                              info_->type() == ServerRpcInfo::Type::UNARY);
  }

  void DecideMessage(const void* message) {
    if (principal_ == nullptr || policy_ == nullptr) return;  // Refused already, open, auth off.
    // A stream outlives its admission: its key is checked again with every message, so that
    // a revocation reaches open streams (at once on this server; from another server of the
    // database once the ring refreshes, within its refresh interval).
    if (absl::StatusOr<std::shared_ptr<const Principal>> again =
            factory_.keys()->Authenticate(key_text_);
        !again.ok()) {
      factory_.decisions().SetMessageDecision(
          context_, absl::Status(again.status().code(),
                                 absl::StrCat("API key ", principal_->key_id, ": ",
                                              again.status().message())));
      return;
    }
    if (policy_->scope != ProjectScope::kNamedInRequest) {
      factory_.decisions().SetMessageDecision(context_, absl::OkStatus());
      return;  // No project in the message.
    }
    std::string project = policy_->project(message);
    // A stream's batch may leave the project out to continue with the last admitted one. The
    // ingest service does the same: a batch refused here does not change the stream's project,
    // and one admitted here does, even when the service then refuses it.
    if (project.empty()) project = stream_project_;
    absl::Status status = absl::OkStatus();
    if (!project.empty() && !principal_->MayTouch(project)) {
      // A malformed name is no project of anyone's: INVALID_ARGUMENT, as for a key of every
      // project, and the refusal below never echoes a name past the 128-byte bound.
      status = ValidateProjectName(project);
      if (!status.ok()) {
        factory_.decisions().SetMessageDecision(context_, std::move(status));
        return;
      }
      status = absl::PermissionDeniedError(absl::StrCat(
          "project: API key ", principal_->key_id, " is not valid for project \"", project, "\""));
    } else {
      stream_project_ = project;
    }
    factory_.decisions().SetMessageDecision(context_, std::move(status));
  }

  // Second line, with the status replacement at PRE_SEND_STATUS: the answer of a call refused
  // at the metadata stage that a handler built anyway (it never asked Admit) is replaced by an
  // empty message of its type. The status alone is not enough: a unary answer travels in the
  // same batch as the status, and the client reads it (a KeyService handler that forgot to ask
  // would hand every key's record to a caller without a key).
  void WithholdRefusedAnswer(InterceptorBatchMethods& methods) {
    if (open_) return;  // No decision is recorded for open methods.
    if (factory_.decisions().Get(context_).call.ok()) return;
    const void* message = methods.GetSendMessage();
    if (message == nullptr) return;
    LogEvent("auth_not_enforced", {{"method", method_}, {"withheld", "answer"}});
    // Kept until the next answer: gRPC reads it until it is serialized or sent.
    withheld_answer_.reset(static_cast<const google::protobuf::MessageLite*>(message)->New());
    methods.ModifySendMessage(withheld_answer_.get());
  }

  // Counts the answer about to be sent against its key's unsent answer bytes. The services'
  // messages are protobuf; the sync API hands them over unserialized (SendMessagePtr).
  void CountAnswer(InterceptorBatchMethods& methods) {
    if (info_->type() != ServerRpcInfo::Type::UNARY || principal_ == nullptr) return;
    const void* message = methods.GetSendMessage();
    if (message == nullptr) return;
    const auto* proto = static_cast<const google::protobuf::MessageLite*>(message);
    factory_.decisions().SetAnswerBytes(context_, static_cast<int64_t>(proto->ByteSizeLong()));
  }

  void EndOpenCall() {
    if (!open_call_counted_) return;
    open_call_counted_ = false;
    factory_.decisions().EndOpenCall();
  }

  const AuthInterceptorFactory& factory_;
  ServerRpcInfo* const info_;
  const grpc::ServerContextBase* const context_;
  const std::string method_;
  const RpcPolicy* const policy_;
  std::string key_text_;  // The admitted key, checked again with each message.
  const bool open_;
  // Set once the call is admitted with a key (not when authentication is off).
  std::shared_ptr<const Principal> principal_;
  std::string stream_project_;  // The project of the stream's last admitted message.
  bool open_call_counted_ = false;  // In CallAuthorizations' open calls in flight.
  // The empty answer sent in place of a refused call's (WithholdRefusedAnswer).
  std::unique_ptr<google::protobuf::MessageLite> withheld_answer_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Principal>> CallAuthorizations::Admit(
    const grpc::ServerContextBase* context) const {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  if (it == decisions_.end()) {
    return absl::InternalError("call not authorized: the authorization interceptor did not run");
  }
  if (!it->second.call.ok()) return it->second.call;
  if (!it->second.message.ok()) return it->second.message;
  // A call whose client went away or whose deadline passed while it waited for a thread gets
  // no work done (the client no longer waits for the answer).
  if (context->IsCancelled()) {
    return absl::CancelledError("the call was cancelled or its deadline passed before it ran");
  }
  const std::string& key = it->second.unfinished_key;
  if (!key.empty() && max_unsent_answer_bytes_per_key_ > 0) {
    auto unsent = unsent_answer_bytes_by_key_.find(key);
    if (unsent != unsent_answer_bytes_by_key_.end() &&
        unsent->second - it->second.answer_bytes >= max_unsent_answer_bytes_per_key_) {
      return UnsentAnswersRefusal(key, unsent->second - it->second.answer_bytes);
    }
  }
  return it->second.principal;
}

int64_t CallAuthorizations::UnsentAnswerBytesPerKey(int64_t grpc_memory_bytes) {
  if (grpc_memory_bytes <= 0) return 0;
  return std::max(grpc_memory_bytes / 4, int64_t{2} * ApiLimits::kMaxMessageBytes);
}

absl::Status CallAuthorizations::UnsentAnswersRefusal(const std::string& key_id,
                                                      int64_t unsent) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "API key ", key_id, " has ", unsent,
      " bytes of answers not yet sent (its client does not read them): the limit is ",
      max_unsent_answer_bytes_per_key_,
      " per key (a quarter of --grpc_memory_mb); retry when they have been read"));
}

absl::Status CallAuthorizations::ReserveAnswerBytes(const grpc::ServerContextBase* context,
                                                    int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  if (it == decisions_.end() || it->second.unfinished_key.empty() ||
      max_unsent_answer_bytes_per_key_ <= 0) {
    return absl::OkStatus();
  }
  Decision& decision = it->second;
  auto unsent = unsent_answer_bytes_by_key_.find(decision.unfinished_key);
  const int64_t others = unsent == unsent_answer_bytes_by_key_.end()
                             ? 0
                             : unsent->second - decision.answer_bytes;
  if (others > 0 && others + bytes > max_unsent_answer_bytes_per_key_) {
    return UnsentAnswersRefusal(decision.unfinished_key, others);
  }
  SetAnswerBytesLocked(decision, bytes);
  return absl::OkStatus();
}

void CallAuthorizations::SetAnswerBytes(const grpc::ServerContextBase* context, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  if (it == decisions_.end() || it->second.unfinished_key.empty()) return;
  SetAnswerBytesLocked(it->second, bytes);
}

void CallAuthorizations::ReleaseAnswerBytes(const grpc::ServerContextBase* context) {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  if (it != decisions_.end()) SetAnswerBytesLocked(it->second, 0);
}

int64_t CallAuthorizations::UnsentAnswerBytes(const std::string& key_id) const {
  absl::MutexLock lock(&mu_);
  auto it = unsent_answer_bytes_by_key_.find(key_id);
  return it == unsent_answer_bytes_by_key_.end() ? 0 : it->second;
}

void CallAuthorizations::SetAnswerBytesLocked(Decision& decision, int64_t bytes) {
  if (decision.unfinished_key.empty() || decision.answer_bytes == bytes) return;
  int64_t& total = unsent_answer_bytes_by_key_[decision.unfinished_key];
  total += bytes - decision.answer_bytes;
  decision.answer_bytes = bytes;
  if (total <= 0) unsent_answer_bytes_by_key_.erase(decision.unfinished_key);
}

void CallAuthorizations::SetCallDecision(const grpc::ServerContextBase* context,
                                         absl::Status status,
                                         std::shared_ptr<const Principal> principal,
                                         bool unary) {
  absl::MutexLock lock(&mu_);
  Decision& decision = decisions_[context];
  if (!new_call_refusal_.ok()) {
    decision.call = new_call_refusal_;
    decision.principal = nullptr;
    return;
  }
  if (status.ok() && unary && max_unary_calls_per_key_ > 0 && principal != nullptr &&
      !principal->key_id.empty()) {
    int& in_flight = unary_calls_by_key_[principal->key_id];
    if (in_flight >= max_unary_calls_per_key_) {
      decision.call = absl::ResourceExhaustedError(absl::StrCat(
          "API key ", principal->key_id, " has ", in_flight,
          " calls in flight: the limit is ", max_unary_calls_per_key_,
          " per key (--max_calls_per_key); retry when one has returned"));
      decision.principal = nullptr;
      if (in_flight == 0) unary_calls_by_key_.erase(principal->key_id);
      return;
    }
    const int most_unfinished = kUnfinishedCallsPerInFlightCall * max_unary_calls_per_key_;
    int& unfinished = unfinished_calls_by_key_[principal->key_id];
    if (unfinished >= most_unfinished) {
      decision.call = absl::ResourceExhaustedError(absl::StrCat(
          "API key ", principal->key_id, " has ", unfinished,
          " calls whose answers are not yet sent (its client does not read them): the limit "
          "is ", most_unfinished, " per key (", kUnfinishedCallsPerInFlightCall,
          " x --max_calls_per_key); retry when they have been read"));
      decision.principal = nullptr;
      if (in_flight == 0) unary_calls_by_key_.erase(principal->key_id);
      return;
    }
    ++in_flight;
    ++unfinished;
    decision.counted_key = principal->key_id;
    decision.unfinished_key = principal->key_id;
  }
  decision.call = std::move(status);
  decision.principal = std::move(principal);
}

bool CallAuthorizations::BeginOpenCall() {
  absl::MutexLock lock(&mu_);
  if (open_calls_in_flight_ >= kMaxOpenCallsInFlight) return false;
  ++open_calls_in_flight_;
  return true;
}

void CallAuthorizations::EndOpenCall() {
  absl::MutexLock lock(&mu_);
  --open_calls_in_flight_;
}

void CallAuthorizations::RefuseNewCalls(absl::Status refusal) {
  absl::MutexLock lock(&mu_);
  new_call_refusal_ = std::move(refusal);
}

void CallAuthorizations::SetMessageDecision(const grpc::ServerContextBase* context,
                                            absl::Status status) {
  absl::MutexLock lock(&mu_);
  decisions_[context].message = std::move(status);
}

CallAuthorizations::Decision CallAuthorizations::Get(
    const grpc::ServerContextBase* context) const {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  return it == decisions_.end() ? Decision{} : it->second;
}

void CallAuthorizations::ReleaseSlotLocked(Decision& decision) {
  if (decision.counted_key.empty()) return;
  auto counted = unary_calls_by_key_.find(decision.counted_key);
  if (counted != unary_calls_by_key_.end() && --counted->second <= 0) {
    unary_calls_by_key_.erase(counted);
  }
  decision.counted_key.clear();
}

void CallAuthorizations::ReleaseCallSlot(const grpc::ServerContextBase* context) {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  if (it != decisions_.end()) ReleaseSlotLocked(it->second);
}

void CallAuthorizations::Forget(const grpc::ServerContextBase* context) {
  absl::MutexLock lock(&mu_);
  auto it = decisions_.find(context);
  if (it == decisions_.end()) return;
  ReleaseSlotLocked(it->second);
  SetAnswerBytesLocked(it->second, 0);
  if (!it->second.unfinished_key.empty()) {
    auto unfinished = unfinished_calls_by_key_.find(it->second.unfinished_key);
    if (unfinished != unfinished_calls_by_key_.end() && --unfinished->second <= 0) {
      unfinished_calls_by_key_.erase(unfinished);
    }
  }
  decisions_.erase(it);
}

AuthInterceptorFactory::AuthInterceptorFactory(KeyRing* keys, CallAuthorizations& decisions)
    : keys_(keys), decisions_(decisions) {}

grpc::experimental::Interceptor* AuthInterceptorFactory::CreateServerInterceptor(
    ServerRpcInfo* info) {
  return new AuthInterceptor(*this, info);
}

}  // namespace verity::server
