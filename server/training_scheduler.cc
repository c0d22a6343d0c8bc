#include "server/training_scheduler.h"

#include "absl/strings/str_cat.h"

#include <iostream>

#include "server/log.h"

namespace verity::server {

TrainingScheduler::TrainingScheduler(ProjectRegistry& registry,
                                     storage::ModelVersionStore& versions, Options options)
    : registry_(registry), versions_(versions), options_(options) {
  if (options_.run_in_background) thread_ = std::thread([this] { Loop(); });
}

TrainingScheduler::~TrainingScheduler() { Stop(); }

void TrainingScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status TrainingScheduler::RefitDueProjectsNow(bool force) {
  absl::MutexLock fit_lock(&fit_mu_);
  absl::Status first_error;
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    const bool due = force ? project->Counts().num_labels > 0
                           : project->RefitDue(absl::Now(), options_.max_staleness);
    if (!due) continue;
    absl::StatusOr<storage::ModelVersionRecord> version = RefitAndLog(*project);
    if (!version.ok() && first_error.ok()) first_error = version.status();
  }
  return first_error;
}

absl::StatusOr<storage::ModelVersionRecord> TrainingScheduler::RefitProjectNow(LiveProject& project) {
  absl::MutexLock fit_lock(&fit_mu_);
  if (project.Counts().num_labels == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("project ", project.identity().name, " has no labels to fit yet"));
  }
  return RefitAndLog(project);
}

absl::StatusOr<storage::ModelVersionRecord> TrainingScheduler::RefitAndLog(LiveProject& project) {
  auto refit = project.Refit(versions_);
  if (!refit.ok()) {
    LogEvent("refit_failed", {{"project", project.identity().name},
                              {"error", refit.status().ToString()}});
    return refit.status();
  }
  const storage::ModelVersionRecord& version = refit->version;
  LogEvent("model_version", {{"project", project.identity().name},
                             {"version", std::to_string(version.version)},
                             {"method", version.method},
                             {"labels", std::to_string(version.num_labels)},
                             {"iterations", std::to_string(version.iterations)},
                             {"log_likelihood", std::to_string(version.log_likelihood)},
                             {"duration_ms", std::to_string(version.duration_ms)},
                             {"consolidate_ms", std::to_string(refit->consolidate_ms)},
                             {"outputs_ms", std::to_string(refit->outputs_ms)},
                             {"persist_ms", std::to_string(refit->persist_ms)},
                             {"publish_ms", std::to_string(refit->publish_ms)}});
  return version;
}

void TrainingScheduler::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.poll_interval);
      if (stopping_) return;
    }
    RefitDueProjectsNow().IgnoreError();
  }
}

}  // namespace verity::server
