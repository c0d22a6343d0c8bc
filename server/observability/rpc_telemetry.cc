#include "server/observability/rpc_telemetry.h"

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/observability/log.h"

namespace verity::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;
using grpc::experimental::ServerRpcInfo;

constexpr char kRequestIdKey[] = "x-request-id";
constexpr size_t kMaxRequestIdLength = 128;

bool IsAcceptableRequestId(grpc::string_ref id) {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) return false;  // Printable ASCII, no spaces: one log token.
  }
  return true;
}

class RpcTelemetryInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcTelemetryInterceptor(RpcTelemetryFactory& factory, ServerRpcInfo* info)
      : factory_(factory), info_(info), start_(absl::Now()), request_id_(factory.NewRequestId()) {}

  ~RpcTelemetryInterceptor() override {
    // The call ended without sending a status through this interceptor (cancelled before the
    // handler answered): still counted, as CANCELLED.
    // The server context may be gone by now: no peer.
    if (!recorded_) Finish(grpc::StatusCode::CANCELLED, /*context_alive=*/false);
  }

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      auto* metadata = methods->GetRecvInitialMetadata();
      auto it = metadata->find(kRequestIdKey);
      if (it != metadata->end() && IsAcceptableRequestId(it->second)) {
        request_id_.assign(it->second.data(), it->second.size());
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kRequestIdKey, request_id_);
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Finish(methods->GetSendStatus().error_code(), /*context_alive=*/true);
    }
    methods->Proceed();
  }

 private:
  void Finish(grpc::StatusCode code, bool context_alive) {
    recorded_ = true;
    RpcTelemetryFactory::CallRecord call;
    call.method = info_->method() != nullptr ? info_->method() : "";
    call.type = info_->type();
    call.code = static_cast<int>(code);
    call.duration = absl::Now() - start_;
    call.request_id = request_id_;
    if (context_alive && info_->server_context() != nullptr)
      call.peer = info_->server_context()->peer();
    factory_.Record(call);
  }

  RpcTelemetryFactory& factory_;
  ServerRpcInfo* const info_;
  const absl::Time start_;
  // A fresh id, replaced by the client's x-request-id when it sent one. Set before the
  // handler runs (initial metadata arrives first); only read after.
  std::string request_id_;
  bool recorded_ = false;
};

}  // namespace

RpcTelemetryFactory::RpcTelemetryFactory(MetricsRegistry& metrics, Options options)
    : options_(options),
      calls_(metrics.AddCounter("verity_rpc_total",
                                "gRPC calls handled, by method and status code.",
                                {"method", "code"})),
      durations_(metrics.AddHistogram(
          "verity_rpc_duration_seconds",
          "Duration of gRPC calls from their start to their status (a stream's whole life).",
          {"method", "code"}, LatencyBuckets())),
      id_prefix_(std::random_device()()) {}

grpc::experimental::Interceptor* RpcTelemetryFactory::CreateServerInterceptor(ServerRpcInfo* info) {
  return new RpcTelemetryInterceptor(*this, info);
}

std::string RpcTelemetryFactory::NewRequestId() {
  return absl::StrFormat("%08x%08x", id_prefix_, next_id_.fetch_add(1, std::memory_order_relaxed));
}

void RpcTelemetryFactory::Record(const CallRecord& call) {
  const std::string method =
      call.code == grpc::StatusCode::UNIMPLEMENTED || call.method.empty() ? "unknown" : call.method;
  const char* code = StatusCodeName(call.code);
  calls_.WithLabels({method, code}).Increment();
  durations_.WithLabels({method, code}).Observe(absl::ToDoubleSeconds(call.duration));

  const bool streaming = call.type != ServerRpcInfo::Type::UNARY;
  if (options_.log_every_call || call.code != grpc::StatusCode::OK || streaming ||
      call.duration >= options_.slow_call) {
    LogEvent("rpc", {{"method", call.method},
                     {"code", code},
                     {"ms", absl::StrFormat("%.3f", absl::ToDoubleMilliseconds(call.duration))},
                     {"request_id", call.request_id},
                     {"peer", call.peer}});
  }
}

}  // namespace verity::server
