// VerityServer: the whole service in one object — storage, live projects, group-commit ingest,
// background training and the gRPC server with every v1 service, the standard health service
// and server reflection. The process main (server/main.cc) and the end-to-end tests both run
// it; tests use port 0 and read port().
//
// Observability: every RPC is counted, timed and given a request id
// (server/observability/rpc_telemetry.h); ingest, training and the database pool report into
// one MetricsRegistry (metrics()), served for Prometheus at GET /metrics when
// Options::metrics_listen is set; the same HTTP port serves the read-only web console (GET /,
// server/console/console.h).
//
// Thread-safety: Shutdown() may be called from any thread, once.
#ifndef VERITY_SERVER_VERITY_SERVER_H_
#define VERITY_SERVER_VERITY_SERVER_H_

#include <memory>
#include <string>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/auth/auth_interceptor.h"
#include "server/auth/key_ring.h"
#include "server/auth/transport_security.h"
#include "server/console/console.h"
#include "server/ingest/ingest_pipeline.h"
#include "server/observability/metrics.h"
#include "server/observability/metrics_http.h"
#include "server/observability/rpc_telemetry.h"
#include "server/replication/replica_follower.h"
#include "server/rpc/server_core.h"
#include "server/state/storage_handles.h"
#include "server/training/training_scheduler.h"
#include "storage/fit_lock.h"

namespace verity::server {

class VerityServer {
 public:
  // The standard health service (grpc.health.v1.Health) answers this service name NOT_SERVING
  // while the projects stored before the start are still loading in the background
  // (Options::background_load_threads) and SERVING once every one has loaded or failed to
  // (event=projects_loaded); SERVING from the start without background loading. The overall
  // name "" is SERVING from the start either way: a replica serves while it loads.
  static constexpr char kProjectsLoadedHealthService[] = "verity.v1.ProjectsLoaded";

  struct Options {
    // host:port to listen on; port 0 picks a free port (see port()).
    std::string listen = "localhost:50051";
    // libpq connection string of the database (required here; main.cc starts an embedded
    // PostgreSQL when the user gives none).
    std::string postgres_url;
    // PostgreSQL connections shared by ingest, queries and training.
    int pool_size = 8;
    // Bound on every database wait (storage::ConnectionPool::Options::db_timeout): a call that
    // hits it, e.g. while PostgreSQL hangs, fails UNAVAILABLE with a message naming it.
    absl::Duration db_timeout = storage::ConnectionPool::Options().db_timeout;
    IngestPipeline::Options ingest;
    // Open SubmitAnnotations streams at most; a stream past it is refused RESOURCE_EXHAUSTED.
    // Each open stream holds a gRPC thread and a writer thread.
    int max_streams = 1000;
    // Open SubmitAnnotations streams per API key at most (authentication on), so that one key
    // cannot take every stream; past it the key's stream is refused RESOURCE_EXHAUSTED.
    int max_streams_per_key = 100;
    // Unary calls in flight per API key at most (authentication on), so that one key cannot
    // hold every gRPC thread (256 beside the streams') with slow calls; past it the key's call
    // is refused RESOURCE_EXHAUSTED. 0 = no limit.
    int max_calls_per_key = 64;
    // Outstanding assignment leases per project at most (each is a row and a map entry, and
    // SuggestItems leases up to 1,000 per call for any annotator id); past it SuggestItems is
    // refused RESOURCE_EXHAUSTED until labels arrive or leases expire.
    int64_t max_leases_per_project = 10'000'000;
    // Per-project limits where a project's settings leave them 0.
    ProjectQuota project_quota;
    // Memory gRPC may hold for calls in flight (incoming messages above all), in bytes. Bytes
    // are read before a call's key is checked, so this bounds what unauthenticated callers can
    // make the server allocate; past it gRPC slows its readers (flow control) rather than
    // allocate more. 0 = unbounded.
    int64_t grpc_memory_bytes = int64_t{512} << 20;
    TrainingScheduler::Options training;
    // Follow the labels and model versions other server replicas of the same database commit
    // (LISTEN/NOTIFY and catch-up reads; server/replication/replica_follower.h), and claim a
    // project's fit lock before fitting it in-process (storage/fit_lock.h). Off: this server
    // sees only its own commits and what it loaded at start, so run a single replica.
    bool follow_replicas = true;
    // Start serving at once and load the stored projects on this many background threads (a
    // project still loading answers UNAVAILABLE, naming it; the health service name
    // kProjectsLoadedHealthService is NOT_SERVING until every one has loaded); 0 loads them all
    // before serving. The binary's default is 4 (server/main.cc); this default stays 0 so that
    // the in-process tests, which query projects they stored before a restart right away, stay
    // deterministic without waiting.
    int background_load_threads = 0;
    // Keep the loaded projects' estimated memory under this many bytes by unloading projects
    // idle for `evict_after_idle`, least recently used first (ProjectRegistry); 0: no budget.
    int64_t memory_budget_bytes = 0;
    absl::Duration evict_after_idle = absl::Seconds(60);
    ReplicaFollower::Options follow;
    // host:port of the Prometheus metrics HTTP endpoint (GET /metrics) and the web console
    // (GET /; with auth on its /api/ needs a key); empty: not served
    // (the default; main.cc serves 127.0.0.1:9464). Port 0 picks a free port (see
    // metrics_port()). An address that cannot be bound (another server has the port) is
    // logged (event=metrics_unavailable) and the server runs without the endpoint: a port
    // clash on the side must not stop ingest.
    std::string metrics_listen;
    // Serve the web console beside /metrics (false: /metrics only).
    bool console = true;
    // Host names the console answers besides loopback names and the metrics address
    // (server/console/console.h: DNS rebinding).
    std::vector<std::string> console_allowed_hosts;
    // Which RPCs are logged (every failed one, slow ones, or all).
    RpcTelemetryFactory::Options rpc_log;
    // TLS of the gRPC port; plaintext only on loopback unless `insecure`
    // (server/auth/transport_security.h).
    TransportSecurityOptions transport;
    // API keys (server/auth/auth_interceptor.h). Off is refused unless `listen` is loopback-only.
    struct Auth {
      bool enabled = false;
      // How often keys made or revoked by other servers of the database are picked up.
      absl::Duration key_refresh = absl::Seconds(10);
      // Where a new bootstrap admin key is written (mode 0600) when authentication is on and
      // the database has no admin key valid for every project. Required in that case.
      std::string admin_key_file;
    } auth;
  };

  // Connects, migrates, restores every project (or starts doing so in the background), then
  // starts serving. UNAVAILABLE if the
  // database cannot be reached or the address cannot be bound; FAILED_PRECONDITION for
  // authentication off on a non-loopback address, or for a missing admin key with no
  // admin_key_file to write one to.
  static absl::StatusOr<std::unique_ptr<VerityServer>> Start(Options options);
  ~VerityServer();

  int port() const { return port_; }
  // The metrics HTTP port; 0 when metrics are not served.
  int metrics_port() const { return metrics_http_ ? metrics_http_->port() : 0; }
  // Every metric of this server (also when they are not served over HTTP).
  const MetricsRegistry& metrics() const { return *metrics_; }
  ServerCore core() { return core_; }

  // Answers new calls UNAVAILABLE ("the server is shutting down") and health checks
  // NOT_SERVING from its first step; commits and acks every queued batch (later batches are
  // acked UNAVAILABLE, nothing written), then stops accepting connections and lets in-flight
  // calls finish for up to `grace` (streams are cancelled after that), and stops the trainer.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  VerityServer() = default;
  // Gauges read at scrape time: pool connections, projects' versions, label counts, due fits.
  void AddCallbackGauges(absl::Duration max_staleness);

  // First: outlives everything that reports into it.
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<StorageHandles> storage_;
  std::unique_ptr<ProjectRegistry> registry_;
  std::unique_ptr<IngestPipeline> ingest_;
  // The fit locks' own connections (--max_concurrent_fits); null unless follow_replicas.
  std::unique_ptr<storage::ConnectionPool> fit_lock_pool_;
  std::unique_ptr<storage::FitLocks> fit_locks_;  // Null unless Options::follow_replicas.
  std::unique_ptr<ReplicaFollower> follower_;  // Null unless Options::follow_replicas.
  std::unique_ptr<TrainingScheduler> scheduler_;
  std::unique_ptr<LeasePersister> lease_persister_;
  std::unique_ptr<KeyRing> keys_;
  // Read by every handler; written by the interceptors the grpc::Server owns.
  std::unique_ptr<CallAuthorizations> call_authorizations_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> grpc_server_;
  // Reads the registry and the version store for the console pages.
  std::unique_ptr<WebConsole> console_;
  // Its callback gauges and console read the objects above: stopped before they go.
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  ServerCore core_{};
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_VERITY_SERVER_H_
