#include "server/verity_server.h"


#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/api/validation.h"
#include "server/auth/key_metadata_processor.h"
#include "server/auth/secret_file.h"
#include "server/auth/transport_security.h"
#include "server/observability/log.h"
#include "server/rpc/assignment_service.h"
#include "server/rpc/ingest_service.h"
#include "server/rpc/key_service.h"
#include "server/rpc/model_service.h"
#include "server/rpc/project_service.h"
#include "server/rpc/truth_service.h"
#include "server/state/label_catch_up.h"

namespace verity::server {
namespace {

// With authentication on, the database must hold an admin key valid for every project, or
// no one could ever create a key: the first start makes one and leaves it in `admin_key_file`.
absl::Status BootstrapAdminKey(KeyRing& keys, const std::string& admin_key_file) {
  absl::StatusOr<std::optional<std::string>> created = keys.EnsureAdminKey();
  if (!created.ok()) return created.status();
  if (!created->has_value()) return absl::OkStatus();
  if (admin_key_file.empty()) {
    return absl::FailedPreconditionError(
        "authentication is on and the database has no admin key: give --admin_key_file so "
        "that one can be created and written there");
  }
  if (absl::Status s = WriteSecretFile(admin_key_file, **created); !s.ok()) {
    // Nobody could use a key that was not saved: revoke it, so that the next start makes one.
    if (absl::StatusOr<ApiKeyParts> parts = ParseApiKey(**created); parts.ok()) {
      (void)keys.Revoke(parts->key_id);
    }
    return s;
  }
  LogEvent("admin_key_created", {{"file", admin_key_file}});
  return absl::OkStatus();
}

// gRPC threads allowed beside one per open stream: unary calls in flight and gRPC's pollers.
constexpr int kThreadsBesideStreams = 256;

// One sample per project, labelled by its name: every loaded project, and every project the
// memory budget unloaded with what it showed then (an idle project stays on the dashboards).
std::vector<GaugeSample> PerProjectSamples(const ProjectRegistry& registry,
                                           double (*value)(const ProjectSummary&)) {
  std::vector<GaugeSample> samples;
  for (const std::shared_ptr<LiveProject>& project : registry.All()) {
    const ProjectSummary summary = project->Summary();
    samples.push_back({{summary.name}, value(summary)});
  }
  for (const ProjectSummary& summary : registry.UnloadedSummaries()) {
    samples.push_back({{summary.name}, value(summary)});
  }
  return samples;
}

}  // namespace

absl::StatusOr<std::unique_ptr<VerityServer>> VerityServer::Start(Options options) {
  // Before touching the database: a refused or unreadable TLS set-up fails fast.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.listen, options.transport);
  if (!credentials.ok()) return credentials.status();
  if (!options.auth.enabled && !IsLoopbackAddress(options.listen)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "authentication can be off only while listening on loopback; ", options.listen,
        " is not: turn it on (--auth=on, clients then need an API key) or listen on "
        "localhost"));
  }
  if (options.max_streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_streams must be at least 1, not ", options.max_streams));
  }
  if (options.max_leases_per_project < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_leases_per_project must be at least 1, not ", options.max_leases_per_project));
  }
  std::unique_ptr<VerityServer> server(new VerityServer());
  server->metrics_ = std::make_unique<MetricsRegistry>();
  auto storage = StorageHandles::Open(options.postgres_url, options.pool_size,
                                      options.db_timeout);
  if (!storage.ok()) return storage.status();
  server->storage_ = std::move(*storage);
  server->registry_ = std::make_unique<ProjectRegistry>(*server->storage_);
  if (options.background_load_threads > 0) {
    if (absl::Status s = server->registry_->LoadAllInBackground(options.background_load_threads);
        !s.ok()) {
      return s;
    }
  } else if (absl::Status s = server->registry_->LoadAll(); !s.ok()) {
    return s;
  }
  if (options.memory_budget_bytes > 0) {
    server->registry_->EnforceMemoryBudget(options.memory_budget_bytes, options.evict_after_idle);
  }
  server->ingest_ = std::make_unique<IngestPipeline>(*server->storage_->annotations, options.ingest,
                                                     server->metrics_.get());
  if (options.follow_replicas) {
    // One fit of a project at a time across the replicas.
    // The locks' connections are their own, one per fit at once (storage/fit_lock.h).
    storage::ConnectionPool::Options lock_pool;
    lock_pool.url = options.postgres_url;
    lock_pool.size = std::max(1, options.training.max_concurrent_fits);
    lock_pool.db_timeout = options.db_timeout;
    absl::StatusOr<std::unique_ptr<storage::ConnectionPool>> created =
        storage::ConnectionPool::Create(lock_pool);
    if (!created.ok()) return created.status();
    server->fit_lock_pool_ = *std::move(created);
    server->fit_locks_ = std::make_unique<storage::FitLocks>(server->fit_lock_pool_.get(),
                                                             server->storage_->pool.get());
    options.training.fit_locks = server->fit_locks_.get();
  }
  // The follower is made after the scheduler it adopts versions through; fits ask it for the
  // stored settings once it exists.
  auto follower_for_fits = std::make_shared<std::atomic<ReplicaFollower*>>(nullptr);
  if (options.follow_replicas) {
    storage::AnnotationStore* annotations = server->storage_->annotations.get();
    options.training.refresh_before_fit = [follower_for_fits, annotations](LiveProject& project) {
      // The labels other replicas acked before the fit are in it (TrainModel on one replica
      // right after an ack on another fitted without that label); a failed read leaves the
      // labels to the follower, as before.
      if (absl::Status s = CatchUpLabels(*annotations, project); !s.ok()) {
        LogEvent("replica_catch_up_failed",
                 {{"project", project.identity().name}, {"error", s.ToString()}});
      }
      if (ReplicaFollower* follower = follower_for_fits->load()) follower->FollowChanges(project);
    };
  }
  server->scheduler_ = std::make_unique<TrainingScheduler>(
      *server->registry_, *server->storage_->versions, server->storage_->jobs.get(),
      options.training, server->metrics_.get());
  if (options.follow_replicas) {
    TrainingScheduler* scheduler = server->scheduler_.get();
    server->follower_ = std::make_unique<ReplicaFollower>(
        options.postgres_url, *server->registry_, *server->storage_,
        [scheduler](LiveProject& project) {
          if (absl::StatusOr<int32_t> adopted = scheduler->AdoptStoredVersion(project);
              !adopted.ok()) {
            LogEvent("model_version_adopt_failed", {{"project", project.identity().name},
                                                    {"error", adopted.status().ToString()}});
          }
        },
        options.follow, server->metrics_.get());
    follower_for_fits->store(server->follower_.get());
    server->registry_->SetFollowStoredChanges([follower_for_fits](LiveProject& project) {
      if (ReplicaFollower* follower = follower_for_fits->load()) {
        follower->FollowChangesUnderWriteOrder(project);
      }
    });
    if (absl::Status s = server->follower_->Start(); !s.ok()) return s;
  }
  server->AddCallbackGauges(options.training.max_staleness);
  server->lease_persister_ = std::make_unique<LeasePersister>(*server->storage_->leases,
                                                              LeasePersister::Options());
  server->keys_ = std::make_unique<KeyRing>(*server->storage_->api_keys, options.auth.key_refresh);
  if (absl::Status s = server->keys_->Load(); !s.ok()) return s;
  if (options.auth.enabled) {
    if (absl::Status s = BootstrapAdminKey(*server->keys_, options.auth.admin_key_file); !s.ok()) {
      return s;
    }
  }
  server->call_authorizations_ = std::make_unique<CallAuthorizations>(
      options.max_calls_per_key,
      CallAuthorizations::UnsentAnswerBytesPerKey(options.grpc_memory_bytes));
  server->core_ = ServerCore{server->storage_.get(),         server->registry_.get(),
                             server->ingest_.get(),          server->scheduler_.get(),
                             server->lease_persister_.get(), server->call_authorizations_.get(),
                             server->keys_.get(),            options.project_quota,
                             /*shared_leases=*/options.follow_replicas,
                             /*fit_locks=*/server->fit_locks_.get(),
                             /*training_jobs_possible=*/options.training.use_workers ||
                                 options.follow_replicas};

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (options.auth.enabled && !options.transport.tls_cert_file.empty()) {
    // With TLS, keyless calls are refused before their message is read.
    (*credentials)->SetAuthMetadataProcessor(
        std::make_shared<ApiKeyMetadataProcessor>(*server->keys_));
  }
  // No SO_REUSEPORT (gRPC's default on Linux): with it a second process could bind a port in
  // use, or be handed one for port 0, and the kernel would split connections between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, *credentials, &server->port_);
  builder.SetMaxReceiveMessageSize(ApiLimits::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(ApiLimits::kMaxMessageBytes);
  // gRPC's threads: one per open stream, the unary calls in flight and its pollers. The cap
  // bounds them all; past it gRPC refuses new calls with RESOURCE_EXHAUSTED instead of growing.
  grpc::ResourceQuota quota("verity");
  quota.SetMaxThreads(options.max_streams + kThreadsBesideStreams);
  if (options.grpc_memory_bytes > 0) quota.Resize(static_cast<size_t>(options.grpc_memory_bytes));
  builder.SetResourceQuota(quota);
  server->services_.push_back(std::make_unique<ProjectServiceImpl>(server->core_));
  server->services_.push_back(
      std::make_unique<IngestServiceImpl>(server->core_, options.max_streams,
                                          options.max_streams_per_key));
  server->services_.push_back(std::make_unique<TruthServiceImpl>(server->core_));
  server->services_.push_back(std::make_unique<ModelServiceImpl>(server->core_));
  server->services_.push_back(std::make_unique<AssignmentServiceImpl>(server->core_,
                                                                    options.max_leases_per_project));
  server->services_.push_back(std::make_unique<KeyServiceImpl>(server->core_));
  for (auto& service : server->services_) builder.RegisterService(service.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // First, so that the telemetry after it sees the status the client gets.
  interceptors.push_back(std::make_unique<AuthInterceptorFactory>(
      options.auth.enabled ? server->keys_.get() : nullptr, *server->call_authorizations_));
  interceptors.push_back(std::make_unique<RpcTelemetryFactory>(*server->metrics_, options.rpc_log));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               " (address in use or invalid?)"));
  }
  if (grpc::HealthCheckServiceInterface* health = server->grpc_server_->GetHealthCheckService();
      health != nullptr) {
    // SERVING at once after a load before serving; a background load that ends between these
    // two lines runs the callback at once. Shutdown() stops the loaders before the gRPC server,
    // so the callback never outlives it.
    health->SetServingStatus(kProjectsLoadedHealthService,
                             server->registry_->BackgroundLoadDone());
    server->registry_->OnBackgroundLoadDone(
        [health] { health->SetServingStatus(kProjectsLoadedHealthService, true); });
  }
  if (!options.metrics_listen.empty()) {
    MetricsHttpServer::Options http;
    http.listen = options.metrics_listen;
    if (options.console) {
      WebConsole::Access access;
      absl::string_view bound = options.metrics_listen;
      bound = bound.substr(0, bound.rfind(':'));
      absl::ConsumePrefix(&bound, "[");  // An IPv6 literal, as the Host header carries it bare.
      absl::ConsumeSuffix(&bound, "]");
      access.bound_host = std::string(bound);
      access.allowed_hosts = options.console_allowed_hosts;
      if (options.auth.enabled) {
        // The gRPC keys and scopes: any valid key reads the projects it may touch.
        access.authenticate = [keys = server->keys_.get()](absl::string_view key)
            -> absl::StatusOr<WebConsole::ProjectFilter> {
          absl::StatusOr<std::shared_ptr<const Principal>> who = keys->Authenticate(key);
          if (!who.ok()) return who.status();
          return WebConsole::ProjectFilter(
              [who = *std::move(who)](absl::string_view project) { return who->MayTouch(project); });
        };
      }
      server->console_ = std::make_unique<WebConsole>(
          *server->registry_, *server->storage_->versions, access,
          server->storage_->annotations.get());
      http.page_handler = [console = server->console_.get()](const HttpPageRequest& request) {
        return console->Handle(request);
      };
    }
    auto metrics_http = MetricsHttpServer::Start(*server->metrics_, http);
    if (metrics_http.ok()) {
      server->metrics_http_ = std::move(*metrics_http);
      // Off loopback, anyone who reaches the port reads /metrics and, with authentication off,
      // every project through the console. Allowed (behind a firewall), but never silently.
      if (!IsLoopbackAddress(options.metrics_listen)) {
        LogEvent("console_exposed",
                 {{"address", options.metrics_listen},
                  {"warning",
                   !options.console ? "/metrics has no login and is served on a non-loopback address"
                   : !options.auth.enabled
                       ? "the web console (authentication off) and /metrics have no login and "
                         "are served on a non-loopback address; keep --metrics_address on "
                         "loopback, turn authentication on, or put a firewall in front"
                       : "the web console's API keys travel in plaintext HTTP on a non-loopback "
                         "address, and /metrics has no login; keep --metrics_address on "
                         "loopback or put a TLS proxy in front"}});
      }
    } else {
      // The labels matter more than their metrics: serve without (metrics_port() is 0).
      LogEvent("metrics_unavailable", {{"address", options.metrics_listen},
                                       {"error", metrics_http.status().ToString()}});
    }
  }
  return server;
}

void VerityServer::AddCallbackGauges(absl::Duration max_staleness) {
  storage::ConnectionPool* pool = storage_->pool.get();
  metrics_->AddCallbackGauge(
      "verity_db_pool_connections",
      "PostgreSQL connections of the pool: open (idle or in use), in_use (handed out) and max "
      "(the pool's size).",
      {"state"}, [pool] {
        return std::vector<GaugeSample>{
            {{"open"}, static_cast<double>(pool->open_connections())},
            {{"in_use"}, static_cast<double>(pool->in_use_connections())},
            {{"max"}, static_cast<double>(pool->options().size)}};
      });
  ProjectRegistry* registry = registry_.get();
  metrics_->AddCallbackGauge(
      "verity_model_version", "Model version each project serves (0 before its first fit).",
      {"project"}, [registry] {
        return PerProjectSamples(*registry, [](const ProjectSummary& project) {
          return static_cast<double>(project.model_version);
        });
      });
  metrics_->AddCallbackGauge(
      "verity_project_labels", "Live labels of each project.", {"project"}, [registry] {
        return PerProjectSamples(*registry, [](const ProjectSummary& project) {
          return static_cast<double>(project.counts.num_labels);
        });
      });
  // Refit lag: what the served posteriors' model has not seen yet.
  metrics_->AddCallbackGauge(
      "verity_project_labels_since_model",
      "Label changes (new or revised labels) of each project committed since the fit of the "
      "model version it serves: the labels a refit has yet to learn from.",
      {"project"}, [registry] {
        return PerProjectSamples(*registry, [](const ProjectSummary& project) {
          return static_cast<double>(project.counts.labels_since_version);
        });
      });
  metrics_->AddCallbackGauge(
      "verity_projects_loading",
      "Projects stored before the start that the background load (--load_threads) has not yet "
      "loaded or failed to load; 0 once the initial load has finished (health service "
      "verity.v1.ProjectsLoaded SERVING).",
      {}, [registry] {
        return std::vector<GaugeSample>{
            {{}, static_cast<double>(registry->ProjectsStillLoading())}};
      });
  metrics_->AddCallbackGauge(
      "verity_training_due_projects",
      "Projects whose refit is due (enough new labels, staleness or a method change) and not "
      "yet fit: the training queue's length.",
      {}, [registry, max_staleness] {
        const absl::Time now = absl::Now();
        double due = 0;
        for (const std::shared_ptr<LiveProject>& project : registry->All()) {
          if (project->RefitDue(now, max_staleness)) ++due;
        }
        return std::vector<GaugeSample>{{{}, due}};
      });
}

void VerityServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // First: from here on new calls are answered UNAVAILABLE by the handlers, and health checks
  // NOT_SERVING, while the steps below drain; the streams already open go on.
  if (call_authorizations_ != nullptr) {
    call_authorizations_->RefuseNewCalls(absl::UnavailableError("the server is shutting down"));
  }
  if (grpc_server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
        health != nullptr) {
      health->Shutdown();
    }
  }
  metrics_http_.reset();  // Scrapes read the objects stopped below.
  // Before the gRPC server: the end of the initial load sets its health service's status.
  if (registry_ != nullptr) registry_->StopBackgroundWork();
  if (follower_ != nullptr) follower_->Stop();
  // Ingest before gRPC: every queued batch is committed while its stream is still open, so its
  // ack goes out; batches read from now on are acked UNAVAILABLE (nothing written), and a client
  // closes its stream on that ack. The other way round, a stream still sending at the end of
  // `grace` was cancelled with batches committed but never acked.
  if (ingest_ != nullptr) ingest_->Shutdown();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
  }
  if (scheduler_ != nullptr) scheduler_->Stop();
  if (lease_persister_ != nullptr) lease_persister_->Shutdown();
}

VerityServer::~VerityServer() { Shutdown(); }

}  // namespace verity::server
