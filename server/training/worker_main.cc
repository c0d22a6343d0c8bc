// verity_worker: runs training jobs from the job table of a Verity database, so that fits
// (the neural models on a GPU in particular) run outside the server process, on any machine
// that reaches PostgreSQL. Start the server with --trainer=workers; run any number of these.
//
//   verity_worker --postgres_url="host=... dbname=..." [--device=cuda:0] [--name=...]
//
// Each job loads the project's labels, fits its configured method warm-started from the latest
// version, and stores the new version while ending the job (see server/training/training_worker.h).
// SIGINT/SIGTERM: finish the job in progress, then exit.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "server/state/live_project.h"
#include "server/state/storage_handles.h"
#include "server/training/training_worker.h"

ABSL_FLAG(std::string, postgres_url, "", "PostgreSQL connection string of the Verity database.");
ABSL_FLAG(int, db_timeout_seconds, 30,
          "Bound on every PostgreSQL wait (as verity_server's flag); keep it below "
          "--lease_seconds so that a renewal that hangs is retried within the lease.");
ABSL_FLAG(std::string, device, "auto", "Training device: auto, cpu, cuda or cuda:N.");
ABSL_FLAG(std::string, name, "", "Worker name in the job table (default: hostname:pid).");
ABSL_FLAG(int, lease_seconds, 60,
          "Job lease; renewed every third of it. A worker silent for this long loses its job.");
ABSL_FLAG(int, poll_ms, 500, "How often an idle worker looks for a job (milliseconds).");
ABSL_FLAG(int, max_attempts, 3,
          "Claims of a job before it is marked failed: attempts that failed, and attempts whose "
          "worker died or hung (its lease expired).");
ABSL_FLAG(bool, once, false, "Exit when the queue is empty (for tests and batch runs).");

namespace {

std::atomic<bool> stopping{false};

void OnSignal(int) { stopping = true; }

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Verity training worker.\nUsage: verity_worker --postgres_url=URL [--device=cuda:0]");
  // --help lists the flags of this file (absl's default looks for a file named after the
  // binary).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/training/worker_main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  using verity::server::LogEvent;
  const std::string url = absl::GetFlag(FLAGS_postgres_url);
  if (url.empty()) {
    LogEvent("fatal", {{"error", "--postgres_url is required"}});
    return 2;
  }
  // Counts and times that would admit nothing: refused at start, naming the flag, as the server
  // does (a worker with --max_attempts=0 had every claim refused and retried forever).
  for (const auto& [flag, value] :
       {std::pair<const char*, int>{"--max_attempts", absl::GetFlag(FLAGS_max_attempts)},
        {"--lease_seconds", absl::GetFlag(FLAGS_lease_seconds)},
        {"--poll_ms", absl::GetFlag(FLAGS_poll_ms)},
        {"--db_timeout_seconds", absl::GetFlag(FLAGS_db_timeout_seconds)}}) {
    if (value < 1) {
      LogEvent("fatal", {{"error", absl::StrCat(flag, " must be at least 1, got ", value)}});
      return 2;
    }
  }
  std::string name = absl::GetFlag(FLAGS_name);
  if (name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    name = absl::StrCat(host, ":", getpid());
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  if (absl::Status s = verity::server::SetTrainingDevice(absl::GetFlag(FLAGS_device)); !s.ok()) {
    LogEvent("fatal", {{"error", s.ToString()}});
    return 1;
  }

  auto storage = verity::server::StorageHandles::Open(
      url, 2, absl::Seconds(absl::GetFlag(FLAGS_db_timeout_seconds)));
  if (!storage.ok()) {
    LogEvent("fatal", {{"error", storage.status().ToString()}});
    return 1;
  }
  verity::server::TrainingWorker::Options options;
  options.name = name;
  options.lease = absl::Seconds(absl::GetFlag(FLAGS_lease_seconds));
  options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  verity::server::TrainingWorker worker(**storage, options);
  LogEvent("worker_started", {{"worker", name}, {"device", absl::GetFlag(FLAGS_device)}});
  while (!stopping) {
    absl::StatusOr<bool> ran = worker.RunOnce();
    if (!ran.ok()) {
      // The database is unreachable or refused: back off and retry.
      LogEvent("worker_error", {{"error", ran.status().ToString()}});
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    if (*ran) continue;
    if (absl::GetFlag(FLAGS_once)) break;
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms)));
  }
  LogEvent("worker_stopped", {{"worker", name}});
  return 0;
}
