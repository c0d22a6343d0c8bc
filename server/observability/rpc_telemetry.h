// RpcTelemetry: a gRPC server interceptor that measures and identifies every call.
//
// For each RPC it
//   - counts it in verity_rpc_total{method,code} and observes its duration (from the call's
//     start to its status) in verity_rpc_duration_seconds{method,code};
//   - gives it a request id: the client's `x-request-id` metadata when present (1 to 128
//     printable ASCII characters other than space, so that it is one token of the log line),
//     otherwise a fresh one, 16 hex digits, unique within the process. The id goes back to the client as `x-request-id` initial metadata;
//   - logs one line `event=rpc method=... code=... ms=... request_id=... peer=...` when the
//     call failed (any code but OK), when a unary call took at least Options::slow_call, when
//     a streaming call ends (streams are long and few), or for every call with
//     Options::log_every_call. OK unary calls are the bulk of the traffic and stay out of the
//     log unless slow: the counters already count them.
//
// `method` is the full gRPC name ("/verity.v1.IngestService/SubmitAnnotations"). A call that
// ends UNIMPLEMENTED is counted as method "unknown", so that clients probing made-up method
// names cannot grow the label set.
//
// Thread-safety: the factory is thread-safe and must outlive the grpc::Server using it, which
// is why it only keeps references into a MetricsRegistry that outlives the server too.
#ifndef VERITY_SERVER_OBSERVABILITY_RPC_TELEMETRY_H_
#define VERITY_SERVER_OBSERVABILITY_RPC_TELEMETRY_H_

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/observability/metrics.h"

namespace verity::server {

class RpcTelemetryFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  struct Options {
    // Unary calls at least this long are logged even when OK.
    absl::Duration slow_call = absl::Seconds(1);
    // Log every call, OK or not (verbose: one line per RPC).
    bool log_every_call = false;
  };

  RpcTelemetryFactory(MetricsRegistry& metrics, Options options);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // A request id for a call that brought none: a per-process random prefix and a counter.
  std::string NewRequestId();

  // What one finished call reports.
  struct CallRecord {
    std::string method;
    grpc::experimental::ServerRpcInfo::Type type;
    int code = 0;
    absl::Duration duration;
    std::string request_id;
    std::string peer;
  };
  void Record(const CallRecord& call);

 private:
  const Options options_;
  MetricFamily<Counter>& calls_;
  MetricFamily<Histogram>& durations_;
  const uint32_t id_prefix_;
  std::atomic<uint32_t> next_id_{0};
};

}  // namespace verity::server

#endif  // VERITY_SERVER_OBSERVABILITY_RPC_TELEMETRY_H_
