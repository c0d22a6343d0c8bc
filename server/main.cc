// verity_server: the Verity gRPC service.
//
// With no --postgres_url it runs a private PostgreSQL 15 cluster under --data_dir (created on
// first run, listening only on a unix socket there) and stops it on shutdown; it holds the
// directory's lock meanwhile, so that a second server on it is refused instead of sharing, and
// later stopping, the cluster under this one. SIGINT/SIGTERM
// shut down gracefully: stop accepting, commit and ack in-flight batches, stop the trainer,
// stop the embedded PostgreSQL.
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "server/state/live_project.h"
#include "server/verity_server.h"
#include "storage/embedded_postgres.h"

ABSL_FLAG(std::string, listen, "localhost:50051",
          "host:port to serve gRPC on (port 0 picks a free port).");
ABSL_FLAG(std::string, data_dir, "./var",
          "Directory of the embedded PostgreSQL cluster (used when --postgres_url is empty); "
          "one running server at a time.");
ABSL_FLAG(std::string, postgres_url, "",
          "libpq connection string of an existing database; empty = embedded PostgreSQL under "
          "--data_dir.");
ABSL_FLAG(int, pool_size, 8, "PostgreSQL connections in the pool.");
ABSL_FLAG(int, db_timeout_seconds, 30,
          "Bound on every PostgreSQL wait: connecting, one statement, one transaction (TCP "
          "keepalives and tcp_user_timeout follow it). A call that hits it, e.g. while the "
          "database hangs, fails UNAVAILABLE. At least 1; large enough for loading the largest "
          "project's labels.");
ABSL_FLAG(bool, background_refit, true,
          "Refit projects in the background when enough new labels arrived (tests turn it off "
          "to keep posteriors still).");
ABSL_FLAG(int, refit_staleness_seconds, 30,
          "A project with new labels is refit at least this often (seconds).");
ABSL_FLAG(double, trainer_busy_fraction, 0.5,
          "In (0, 1]: the most of its time each in-process background fitter "
          "(--max_concurrent_fits of them) spends fitting; after a fit of d seconds it rests "
          "d*(1-f)/f, at most --refit_staleness_seconds, before its next (1: back to back).");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the gRPC port (enables TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: clients must present a certificate it signed (mutual TLS).");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext gRPC on a non-loopback --listen address (otherwise refused).");
ABSL_FLAG(std::string, auth, "auto",
          "API-key authentication of every RPC: on, off (refused unless --listen is "
          "loopback-only), or auto (off on loopback, on otherwise).");
ABSL_FLAG(std::string, admin_key_file, "",
          "With authentication on and no admin key in the database, a new admin key is written "
          "to this file (mode 0600); empty = DATA_DIR/admin.key.");
ABSL_FLAG(int, key_refresh_seconds, 10,
          "How often API keys created or revoked by other servers of the same database are "
          "picked up (seconds).");
ABSL_FLAG(std::string, trainer, "inprocess",
          "Where fits run: inprocess (the server's background thread) or workers (training jobs "
          "in PostgreSQL, run by verity_worker processes; the server serves their versions).");
ABSL_FLAG(int, metrics_port, 9464,
          "Port of the Prometheus metrics endpoint (GET /metrics over HTTP) and of the read-only "
          "web console (GET /); 0 = neither.");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1",
          "Address the metrics endpoint and the web console bind (0.0.0.0 = every interface). "
          "/metrics has no login, nor has the console with authentication off: a non-loopback "
          "address is then logged as event=console_exposed.");
ABSL_FLAG(bool, console, true,
          "Serve the read-only web console (GET /, /api/...) on the metrics port; false serves "
          "/metrics only. With authentication on, the console's /api/ needs an API key and "
          "shows the projects the key may read.");
ABSL_FLAG(std::vector<std::string>, console_allowed_hosts, {},
          "Comma-separated host names the console answers besides localhost, 127.0.0.0/8, ::1 "
          "and --metrics_address (requests with another Host header are refused: DNS "
          "rebinding), e.g. the name operators reach it by.");
ABSL_FLAG(int, max_streams, 1000,
          "Open SubmitAnnotations streams at most (each holds two threads); a stream past the "
          "limit is refused with RESOURCE_EXHAUSTED (retryable).");
ABSL_FLAG(int, max_concurrent_fits, 2,
          "In-process fits running at once over all projects (each project's fits one at a "
          "time), so one project's long fit does not hold up the others.");
ABSL_FLAG(int, max_streams_per_key, 100,
          "Open SubmitAnnotations streams per API key at most (authentication on); a stream "
          "past it is refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_calls_per_key, 64,
          "Unary calls in flight per API key at most (authentication on), so that one key "
          "cannot hold every gRPC thread with slow calls; a call past it is refused with "
          "RESOURCE_EXHAUSTED. 0 = no limit.");
ABSL_FLAG(int64_t, max_leases_per_project, 10'000'000,
          "Outstanding assignment leases a project may hold; SuggestItems past it is refused "
          "with RESOURCE_EXHAUSTED until labels arrive or leases expire.");
ABSL_FLAG(int64_t, max_items_per_project, 10'000'000,
          "Items a project may hold unless its settings.limits.max_items says otherwise.");
ABSL_FLAG(int64_t, max_annotators_per_project, 1'000'000,
          "Annotators a project may hold unless its settings.limits.max_annotators says "
          "otherwise.");
ABSL_FLAG(int64_t, max_labels_per_project, 100'000'000,
          "Live labels a project may hold unless its settings.limits.max_labels says otherwise.");
ABSL_FLAG(int64_t, max_confusion_cells_per_project, 16'000'000,
          "Annotators x classes^2 a project whose method is neural (lia, crowdlayer, "
          "trace_reg, conal, cmm), ibcc or ebcc (10 x per annotator) may reach unless its settings.limits.max_confusion_cells says "
          "otherwise: those models keep a dense confusion per annotator, so this bounds their "
          "memory and fit time. mv, ds, one_coin, glad, wawa, zero_based_skill, kos, mace, bwa, mmsr "
          "and auto grow with the labels instead.");
ABSL_FLAG(int64_t, max_feature_values_per_project, 268'435'456,
          "Items x item_feature_dim + annotators x annotator_feature_dim a project may reach "
          "unless its settings.limits.max_feature_values says otherwise: the server keeps a "
          "dense feature row (4 bytes a value) for every item and annotator of a project with "
          "features, so this bounds that memory.");
ABSL_FLAG(int64_t, max_revisions_per_project, 100'000'000,
          "Revised and stale labels a project may keep in its history unless its "
          "settings.limits.max_revisions says otherwise (a revision adds no live label, so "
          "--max_labels_per_project does not bound them).");
ABSL_FLAG(int64_t, grpc_memory_mb, 512,
          "Memory gRPC may hold for calls in flight, incoming messages above all (MiB). "
          "Messages are read before their key is checked, so this bounds what callers without "
          "a key can make the server allocate; past it reads slow down. A quarter of it (at "
          "least 32 MiB) bounds one API key's answers not yet sent. 0 = unbounded.");
ABSL_FLAG(bool, log_every_rpc, false,
          "Log one event=rpc line for every RPC; by default only failed calls, unary calls over "
          "1 s and finished streams are logged.");
ABSL_FLAG(bool, follow_replicas, true,
          "Follow the labels that other verity_server replicas of the same database commit "
          "(LISTEN/NOTIFY on one extra PostgreSQL connection, and a check of every project's "
          "newest seq each second). Off: a single replica only.");
ABSL_FLAG(int, load_threads, 4,
          "Start serving at once and load the stored projects on this many background threads "
          "(each holds a PostgreSQL connection of --pool_size while it loads); a project still "
          "loading answers UNAVAILABLE naming it, one not reached yet loads on its first call. "
          "The gRPC health service name verity.v1.ProjectsLoaded is NOT_SERVING until every "
          "stored project has loaded (event=projects_loaded); \"\" is SERVING from the start. "
          "0 loads every project before serving.");
ABSL_FLAG(int64_t, memory_budget_mb, 0,
          "Keep the loaded projects' estimated memory under this many MiB by unloading projects "
          "no call used for --evict_idle_seconds, least recently used first; they load again "
          "on their next call. 0 = no budget.");
ABSL_FLAG(int, evict_idle_seconds, 60,
          "With --memory_budget_mb: how long a project must be idle before it may be unloaded.");
ABSL_FLAG(std::string, device, "auto",
          "Device of the neural models' in-process training: auto, cpu, cuda or cuda:N.");

namespace {

int Fail(const absl::Status& status) {
  verity::server::LogEvent("fatal", {{"error", status.ToString()}});
  return 1;
}

// INVALID_ARGUMENT naming --`flag` when `value` is below `min`: a count or a time that would
// admit nothing (or mean nothing) is refused at start, not on every later call.
absl::Status AtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be at least ", min, ", got ", value));
}

// The checks of the flags that VerityServer::Start does not make itself, each error naming its
// flag. gRPC reads a --listen port past 65535 modulo 65536, so it would listen elsewhere.
absl::Status CheckFlags() {
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (!absl::StartsWith(listen, "unix:")) {
    const size_t colon = listen.rfind(':');
    const absl::string_view port = colon == std::string::npos
                                       ? absl::string_view()
                                       : absl::string_view(listen).substr(colon + 1);
    int number = -1;
    if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(port, &number) || number > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--listen=", listen, ": expected HOST:PORT with a port of 0 (any free one) to 65535"));
    }
  }
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < 0 || metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_port must be 0 (no metrics, no console) to 65535, got ", metrics_port));
  }
  for (const absl::Status& s : {
           AtLeast("pool_size", absl::GetFlag(FLAGS_pool_size), 1),
           AtLeast("db_timeout_seconds", absl::GetFlag(FLAGS_db_timeout_seconds), 1),
           AtLeast("max_streams_per_key", absl::GetFlag(FLAGS_max_streams_per_key), 1),
           AtLeast("max_concurrent_fits", absl::GetFlag(FLAGS_max_concurrent_fits), 1),
           AtLeast("max_items_per_project", absl::GetFlag(FLAGS_max_items_per_project), 1),
           AtLeast("max_annotators_per_project", absl::GetFlag(FLAGS_max_annotators_per_project),
                   1),
           AtLeast("max_labels_per_project", absl::GetFlag(FLAGS_max_labels_per_project), 1),
           AtLeast("max_confusion_cells_per_project",
                   absl::GetFlag(FLAGS_max_confusion_cells_per_project), 1),
           AtLeast("max_feature_values_per_project",
                   absl::GetFlag(FLAGS_max_feature_values_per_project), 1),
           AtLeast("max_revisions_per_project", absl::GetFlag(FLAGS_max_revisions_per_project), 1),
           AtLeast("grpc_memory_mb", absl::GetFlag(FLAGS_grpc_memory_mb), 0),
           AtLeast("memory_budget_mb", absl::GetFlag(FLAGS_memory_budget_mb), 0),
           AtLeast("evict_idle_seconds", absl::GetFlag(FLAGS_evict_idle_seconds), 0),
           AtLeast("refit_staleness_seconds", absl::GetFlag(FLAGS_refit_staleness_seconds), 0),
           AtLeast("key_refresh_seconds", absl::GetFlag(FLAGS_key_refresh_seconds), 0),
       }) {
    if (!s.ok()) return s;
  }
  return verity::server::SetTrainingDevice(absl::GetFlag(FLAGS_device));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Verity annotation aggregation server.\nUsage: verity_server [--listen=HOST:PORT] "
      "[--data_dir=DIR | --postgres_url=URL]");
  // --help lists the flags of this file (absl's default looks for a file named after the
  // binary, and found none: "No flags matched").
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  using verity::server::LogEvent;

  // Block the shutdown signals in every thread; main waits for them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Every flag is read and checked first, so that a refused one starts nothing (the embedded
  // database below included).
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s);
  verity::server::VerityServer::Options options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.pool_size = absl::GetFlag(FLAGS_pool_size);
  options.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.grpc_memory_bytes = absl::GetFlag(FLAGS_grpc_memory_mb) << 20;
  options.max_streams_per_key = absl::GetFlag(FLAGS_max_streams_per_key);
  options.max_calls_per_key = absl::GetFlag(FLAGS_max_calls_per_key);
  options.max_leases_per_project = absl::GetFlag(FLAGS_max_leases_per_project);
  options.training.max_concurrent_fits = absl::GetFlag(FLAGS_max_concurrent_fits);
  options.project_quota.max_items = absl::GetFlag(FLAGS_max_items_per_project);
  options.project_quota.max_annotators = absl::GetFlag(FLAGS_max_annotators_per_project);
  options.project_quota.max_labels = absl::GetFlag(FLAGS_max_labels_per_project);
  options.project_quota.max_confusion_cells =
      absl::GetFlag(FLAGS_max_confusion_cells_per_project);
  options.project_quota.max_feature_values =
      absl::GetFlag(FLAGS_max_feature_values_per_project);
  options.project_quota.max_revisions = absl::GetFlag(FLAGS_max_revisions_per_project);
  options.db_timeout = absl::Seconds(absl::GetFlag(FLAGS_db_timeout_seconds));
  options.follow_replicas = absl::GetFlag(FLAGS_follow_replicas);
  options.background_load_threads = absl::GetFlag(FLAGS_load_threads);
  if (options.background_load_threads < 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--load_threads must be 0 (load before serving) or more, got ",
        options.background_load_threads)));
  }
  options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget_mb) << 20;
  options.evict_after_idle = absl::Seconds(absl::GetFlag(FLAGS_evict_idle_seconds));
  options.training.run_in_background = absl::GetFlag(FLAGS_background_refit);
  options.training.max_staleness = absl::Seconds(absl::GetFlag(FLAGS_refit_staleness_seconds));
  const double busy_fraction = absl::GetFlag(FLAGS_trainer_busy_fraction);
  if (!(busy_fraction > 0.0 && busy_fraction <= 1.0)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--trainer_busy_fraction must be in (0, 1], got ", busy_fraction)));
  }
  options.training.max_busy_fraction = busy_fraction;
  const std::string trainer = absl::GetFlag(FLAGS_trainer);
  if (trainer != "inprocess" && trainer != "workers") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--trainer must be inprocess or workers, got \"", trainer, "\"")));
  }
  options.training.use_workers = trainer == "workers";
  options.transport.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.transport.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.transport.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.transport.insecure = absl::GetFlag(FLAGS_insecure);
  const std::string auth = absl::GetFlag(FLAGS_auth);
  if (auth != "auto" && auth != "on" && auth != "off") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--auth must be auto, on or off, got \"", auth, "\"")));
  }
  options.auth.enabled =
      auth == "on" || (auth == "auto" && !verity::server::IsLoopbackAddress(options.listen));
  options.auth.admin_key_file = absl::GetFlag(FLAGS_admin_key_file);
  if (options.auth.admin_key_file.empty()) {
    options.auth.admin_key_file = absl::StrCat(absl::GetFlag(FLAGS_data_dir), "/admin.key");
  }
  options.auth.key_refresh = absl::Seconds(absl::GetFlag(FLAGS_key_refresh_seconds));
  options.console = absl::GetFlag(FLAGS_console);
  options.console_allowed_hosts = absl::GetFlag(FLAGS_console_allowed_hosts);
  if (const int metrics_port = absl::GetFlag(FLAGS_metrics_port); metrics_port != 0) {
    options.metrics_listen =
        absl::StrCat(absl::GetFlag(FLAGS_metrics_address), ":", metrics_port);
  }
  options.rpc_log.log_every_call = absl::GetFlag(FLAGS_log_every_rpc);

  std::unique_ptr<verity::storage::EmbeddedPostgres> embedded;
  std::string url = absl::GetFlag(FLAGS_postgres_url);
  if (url.empty()) {
    verity::storage::EmbeddedPostgres::Options pg;
    pg.data_dir = absl::GetFlag(FLAGS_data_dir);
    pg.exclusive = true;  // This server stops the cluster when it stops: no other may share it.
    auto started = verity::storage::EmbeddedPostgres::Start(pg);
    if (!started.ok()) return Fail(started.status());
    embedded = std::move(*started);
    url = embedded->connection_url();
    LogEvent("embedded_postgres", {{"data_dir", pg.data_dir}});
  }
  options.postgres_url = url;
  auto server = verity::server::VerityServer::Start(options);
  if (!server.ok()) return Fail(server.status());
  LogEvent("listening", {{"address", options.listen},
                         {"port", std::to_string((*server)->port())},
                         {"database", embedded ? "embedded" : "external"},
                         {"auth", options.auth.enabled ? "on" : "off"},
                         {"metrics_port", std::to_string((*server)->metrics_port())}});

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogEvent("shutdown", {{"signal", std::to_string(signal_number)}});
  (*server)->Shutdown();
  server->reset();
  if (embedded) {
    if (absl::Status s = embedded->Stop(); !s.ok()) return Fail(s);
  }
  LogEvent("stopped", {});
  return 0;
}
