#include "server/training/training_worker.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "server/training/lease_renewer.h"

namespace verity::server {

TrainingWorker::TrainingWorker(StorageHandles& storage, Options options)
    : storage_(storage), loader_(storage), options_(std::move(options)) {}

absl::StatusOr<bool> TrainingWorker::RunOnce() {
  absl::StatusOr<std::optional<storage::TrainingJob>> claimed =
      storage_.jobs->Claim(options_.name, options_.lease, options_.max_attempts);
  if (!claimed.ok()) return claimed.status();
  if (!claimed->has_value()) return false;
  const storage::TrainingJob job = **claimed;
  LogEvent("job_claimed", {{"job", std::to_string(job.job_id)},
                           {"project_id", std::to_string(job.project_id)},
                           {"attempt", std::to_string(job.attempts)},
                           {"worker", options_.name}});

  // Renew the lease while the job runs (retrying a failed renewal while the lease holds).
  LeaseRenewer renewer(
      [&] { return storage_.jobs->Renew(job.job_id, options_.name, options_.lease); },
      options_.lease, std::to_string(job.job_id));

  absl::Status outcome;
  int32_t version = 0;
  // Wall time of each part of the job, for the log (benchmarks read job_done's fields).
  const absl::Time claimed_at = absl::Now();
  auto ms_since = [](absl::Time start) {
    return absl::StrCat(absl::ToDoubleMilliseconds(absl::Now() - start));
  };
  absl::StatusOr<storage::ProjectRecord> record = storage_.projects->GetProject(job.project_id);
  if (!record.ok()) {
    outcome = record.status();
  } else if (absl::StatusOr<std::shared_ptr<LiveProject>> project = loader_.Load(*record);
             !project.ok()) {
    outcome = project.status();
  } else {
    const std::string load_ms = ms_since(claimed_at);
    auto refit = (*project)->Refit(*storage_.versions,
                                   storage::ModelVersionRecord::JobOwnership{job.job_id, options_.name});
    if (refit.ok()) {
      version = refit->version.version;
      LogEvent("job_done", {{"job", std::to_string(job.job_id)},
                            {"project", record->name},
                            {"version", std::to_string(version)},
                            {"method", refit->version.method},
                            {"labels", std::to_string(refit->version.num_labels)},
                            {"load_ms", load_ms},
                            {"consolidate_ms", absl::StrCat(refit->consolidate_ms)},
                            {"fit_ms", absl::StrCat(refit->fit_ms)},
                            {"outputs_ms", absl::StrCat(refit->outputs_ms)},
                            {"persist_ms", absl::StrCat(refit->persist_ms)},
                            {"job_ms", ms_since(claimed_at)}});
    } else {
      outcome = refit.status();
    }
  }
  renewer.Stop();
  if (outcome.ok()) return true;
  if (absl::IsAborted(outcome)) {
    // Another worker owns the job now (our lease expired); nothing was stored.
    LogEvent("job_abandoned", {{"job", std::to_string(job.job_id)}, {"error", outcome.ToString()}});
    return true;
  }
  LogEvent("job_failed", {{"job", std::to_string(job.job_id)}, {"error", outcome.ToString()}});
  if (absl::Status s = storage_.jobs->Fail(job.job_id, options_.name, outcome.ToString(),
                                           options_.max_attempts);
      !s.ok() && !absl::IsAborted(s)) {
    return s;
  }
  return true;
}

}  // namespace verity::server
