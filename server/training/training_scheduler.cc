#include "server/training/training_scheduler.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <iostream>
#include <thread>
#include <vector>

#include "server/observability/log.h"

namespace verity::server {
namespace {

// CANCELLED once `cancelled` (may be null: never) says the caller gave up; OK otherwise.
absl::Status CancelledWhileWaiting(const std::function<bool()>& cancelled,
                                   const LiveProject& project) {
  if (cancelled == nullptr || !cancelled()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("TrainModel of project ", project.identity().name,
                                           " was cancelled while it waited"));
}

}  // namespace

struct TrainingScheduler::Metrics {
  explicit Metrics(MetricsRegistry& registry)
      : versions(registry.AddCounter("verity_model_versions_total",
                                     "Model versions served, by truth method and where they were "
                                     "fit (inprocess; worker for versions adopted from "
                                     "verity_worker processes; replica for versions another "
                                     "server replica fit).",
                                     {"method", "source"})),
        fit_seconds(registry.AddHistogram("verity_training_duration_seconds",
                                          "Duration of in-process fits, by truth method.",
                                          {"method"}, TrainingDurationBuckets())),
        fit_failures(registry.AddCounter("verity_training_failures_total",
                                         "In-process fits that failed.").Get()),
        jobs_enqueued(registry.AddCounter("verity_training_jobs_enqueued_total",
                                          "Training jobs enqueued for verity_worker processes.")
                          .Get()),
        fits_left_to_other_replicas(registry.AddCounter(
                                      "verity_training_fits_left_to_other_replicas_total",
                                      "Due in-process fits skipped because another server "
                                      "replica held the project's fit lock.")
                                        .Get()),
        version_downloads(registry.AddCounter(
                                      "verity_model_version_downloads_total",
                                      "Stored model versions whose parameters this server read "
                                      "to serve them (from workers or other replicas).")
                              .Get()) {}

  MetricFamily<Counter>& versions;
  MetricFamily<Histogram>& fit_seconds;
  Counter& fit_failures;
  Counter& jobs_enqueued;
  Counter& fits_left_to_other_replicas;
  Counter& version_downloads;
};

TrainingScheduler::TrainingScheduler(ProjectRegistry& registry,
                                     storage::ModelVersionStore& versions,
                                     storage::TrainingJobStore* jobs, Options options,
                                     MetricsRegistry* metrics)
    : registry_(registry),
      versions_(versions),
      jobs_(jobs),
      options_(options),
      metrics_(metrics != nullptr ? std::make_unique<Metrics>(*metrics) : nullptr),
      free_slots_(std::max(1, options.max_concurrent_fits)) {
  if (!options_.run_in_background) return;
  if (!options_.use_workers) {
    for (int i = 0; i < std::max(1, options_.max_concurrent_fits); ++i) {
      fitters_.emplace_back([this] { FitQueuedProjects(); });
    }
  }
  thread_ = std::thread([this] { Loop(); });
}

TrainingScheduler::~TrainingScheduler() { Stop(); }

void TrainingScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  for (std::thread& fitter : fitters_) fitter.join();
  fitters_.clear();
}

absl::Status TrainingScheduler::RefitDueProjectsNow(bool force) {
  absl::MutexLock pass_lock(&pass_mu_);
  absl::Status first_error;
  std::vector<std::shared_ptr<LiveProject>> due_fits;
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    const bool due = force ? project->Counts().num_labels > 0
                           : project->RefitDue(absl::Now(), options_.max_staleness);
    if (options_.use_workers) {
      // A version a worker stored since the last pass is served first, so that a project whose
      // job just finished is not enqueued again for the labels that version already saw.
      // A stored version that does not restore is reported, and the project still gets a job
      // when it is due: the next version replaces it, where skipping would leave the project
      // on its last served model for good.
      absl::StatusOr<int32_t> adopted = AdoptStoredVersion(*project);
      if (!adopted.ok() && first_error.ok()) first_error = adopted.status();
      const bool still_due = force ? project->Counts().num_labels > 0
                                   : project->RefitDue(absl::Now(), options_.max_staleness);
      if (!due || !still_due) continue;
      absl::StatusOr<storage::TrainingJob> job = jobs_->Enqueue(project->identity().project_id);
      if (!job.ok()) {
        if (first_error.ok()) first_error = job.status();
        continue;
      }
      if (job->created) {
        if (metrics_) metrics_->jobs_enqueued.Increment();
        LogEvent("training_job", {{"project", project->identity().name},
                                  {"job", std::to_string(job->job_id)},
                                  {"state", job->state}});
      }
      continue;
    }
    if (due) due_fits.push_back(project);
  }
  // The due fits on up to max_concurrent_fits threads (RefitAndLog takes the slots).
  absl::Mutex next_mu;
  size_t next = 0;
  auto fit_next = [&] {
    while (true) {
      std::shared_ptr<LiveProject> project;
      {
        absl::MutexLock lock(&next_mu);
        if (next == due_fits.size()) return;
        project = due_fits[next++];
      }
      absl::StatusOr<std::optional<storage::ModelVersionRecord>> version =
          RefitAndLog(*project, /*only_if_due=*/!force);
      absl::MutexLock lock(&next_mu);
      if (!version.ok() && first_error.ok()) first_error = version.status();
    }
  };
  const size_t threads = std::min<size_t>(due_fits.size(),
                                          static_cast<size_t>(std::max(1, options_.max_concurrent_fits)));
  std::vector<std::thread> fitters;
  for (size_t t = 1; t < threads; ++t) fitters.emplace_back(fit_next);
  fit_next();
  for (std::thread& fitter : fitters) fitter.join();
  return first_error;
}

std::shared_ptr<absl::Mutex> TrainingScheduler::ProjectFitMutex(int64_t project_id) {
  absl::MutexLock lock(&project_fits_mu_);
  std::shared_ptr<absl::Mutex>& mu = project_fits_[project_id];
  if (mu == nullptr) mu = std::make_shared<absl::Mutex>();
  return mu;
}

absl::StatusOr<int32_t> TrainingScheduler::AdoptStoredVersion(LiveProject& project) {
  const int64_t project_id = project.identity().project_id;
  // The newest version's number first (no parameters): a pass reads a checkpoint only when it
  // is newer than the one served and has not failed to restore before.
  absl::StatusOr<std::vector<storage::ModelVersionRecord>> newest =
      versions_.ListModelVersions(project_id, 1);
  if (!newest.ok()) return newest.status();
  if (newest->empty() || newest->front().version <= project.model_version()) {
    return project.model_version();
  }
  const int32_t version = newest->front().version;
  {
    absl::MutexLock lock(&refused_mu_);
    auto refused = refused_versions_.find(project_id);
    if (refused != refused_versions_.end() && refused->second >= version) {
      return project.model_version();
    }
  }
  absl::StatusOr<storage::ModelVersionRecord> latest = versions_.GetModelVersion(project_id, version);
  if (!latest.ok()) return latest.status();
  if (metrics_) metrics_->version_downloads.Increment();
  absl::StatusOr<bool> adopted = project.AdoptVersion(*latest);
  if (!adopted.ok()) {
    absl::MutexLock lock(&refused_mu_);
    refused_versions_[project_id] = version;  // reported once; a newer version replaces it
    return adopted.status();
  }
  if (*adopted) {
    if (metrics_) {
      metrics_->versions.WithLabels({latest->method, options_.use_workers ? "worker" : "replica"})
          .Increment();
    }
    LogEvent("model_version_adopted", {{"project", project.identity().name},
                                       {"version", std::to_string(latest->version)},
                                       {"method", latest->method},
                                       {"labels", std::to_string(latest->num_labels)}});
  }
  return project.model_version();
}

absl::StatusOr<storage::ModelVersionRecord> TrainingScheduler::RefitProjectNow(
    LiveProject& project, const std::function<bool()>& cancelled) {
  auto given_up = [&cancelled, &project] { return CancelledWhileWaiting(cancelled, project); };
  // Another replica may have acked labels or written items, gold or settings that this one has
  // not followed yet (notifications take milliseconds, its poll runs once a second): brought up
  // to the database's before deciding that there is nothing to fit or nothing changed.
  if (options_.refresh_before_fit) options_.refresh_before_fit(project);
  if (project.Counts().num_labels == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("project ", project.identity().name, " has no labels to fit yet"));
  }
  // Nothing changed since the current version's fit: it is the answer, and nothing is written.
  if (project.FitIsCurrent()) {
    absl::StatusOr<storage::ModelVersionRecord> current =
        versions_.GetModelVersionMetadata(project.identity().project_id, project.model_version());
    if (current.ok() || !absl::IsNotFound(current.status())) return current;
  }
  if (!options_.use_workers) {
    // Another replica may hold the project's fit lock: wait for its version, then fit unless
    // that version is current.
    const absl::Time give_up = absl::Now() + options_.train_wait;
    while (true) {
      if (absl::Status s = given_up(); !s.ok()) return s;
      absl::StatusOr<std::optional<storage::ModelVersionRecord>> fitted =
          RefitAndLog(project, /*only_if_due=*/false, cancelled);
      if (!fitted.ok()) return fitted.status();
      if (fitted->has_value()) return **fitted;
      if (project.FitIsCurrent()) {
        return versions_.GetModelVersionMetadata(project.identity().project_id,
                                                 project.model_version());
      }
      if (absl::Now() >= give_up) {
        return absl::DeadlineExceededError(absl::StrCat(
            "another server replica held the fit of project ", project.identity().name,
            " for ", absl::FormatDuration(options_.train_wait)));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  // Workers fit; this waits without holding a slot (AdoptVersion is safe to race).
  const int32_t before = project.model_version();
  absl::StatusOr<storage::TrainingJob> job = jobs_->Enqueue(project.identity().project_id);
  if (!job.ok()) return job.status();
  const absl::Time give_up = absl::Now() + options_.train_wait;
  while (absl::Now() < give_up) {
    if (absl::Status s = given_up(); !s.ok()) return s;
    absl::StatusOr<storage::TrainingJob> state = jobs_->GetJob(job->job_id);
    if (!state.ok()) return state.status();
    if (state->state == "failed") {
      return absl::InternalError(absl::StrCat("training job ", job->job_id, " failed: ", state->error));
    }
    if (state->state == "done") {
      if (absl::StatusOr<int32_t> adopted = AdoptStoredVersion(project); !adopted.ok()) {
        return adopted.status();
      }
      if (project.model_version() > before) {
        return versions_.LatestModelVersion(project.identity().project_id);
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("no worker finished training job ", job->job_id,
                                                  " within ", absl::FormatDuration(options_.train_wait)));
}

absl::StatusOr<std::optional<storage::ModelVersionRecord>> TrainingScheduler::RefitAndLog(
    LiveProject& project, bool only_if_due, const std::function<bool()>& cancelled) {
  auto given_up = [&cancelled, &project] { return CancelledWhileWaiting(cancelled, project); };
  // While waiting, how often `cancelled` is asked.
  constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);
  // The project first (its fits run one at a time), then a slot: a fit waiting behind its own
  // project's does not hold a slot another project could use.
  const std::shared_ptr<absl::Mutex> project_mu = ProjectFitMutex(project.identity().project_id);
  if (cancelled == nullptr) {
    project_mu->Lock();
  } else {
    // A mutex wait cannot be interrupted: poll, asking `cancelled` in between.
    while (!project_mu->TryLock()) {
      if (absl::Status s = given_up(); !s.ok()) return s;
      absl::SleepFor(kCancelPoll);
    }
  }
  struct UnlockProject {
    absl::Mutex& mu;
    ~UnlockProject() { mu.Unlock(); }
  } unlock_project{*project_mu};
  {
    absl::MutexLock lock(&slots_mu_);
    auto has_slot = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(slots_mu_) { return free_slots_ > 0; };
    while (!slots_mu_.AwaitWithTimeout(absl::Condition(&has_slot), kCancelPoll)) {
      if (absl::Status s = given_up(); !s.ok()) return s;
    }
    --free_slots_;
  }
  struct ReleaseSlot {
    TrainingScheduler& self;
    ~ReleaseSlot() {
      absl::MutexLock lock(&self.slots_mu_);
      ++self.free_slots_;
    }
  } release_slot{*this};
  std::unique_ptr<storage::FitLock> fit_lock;
  if (options_.fit_locks != nullptr) {
    absl::StatusOr<std::unique_ptr<storage::FitLock>> claimed =
        options_.fit_locks->TryAcquire(project.identity().project_id);
    if (!claimed.ok()) return claimed.status();
    if (*claimed == nullptr) {
      if (metrics_) metrics_->fits_left_to_other_replicas.Increment();
      return std::nullopt;  // Another replica fits it; its version is adopted when stored.
    }
    fit_lock = std::move(*claimed);
    // The last holder may have stored a version this replica does not serve yet.
    if (absl::StatusOr<int32_t> adopted = AdoptStoredVersion(project); !adopted.ok()) {
      LogEvent("model_version_adopt_failed", {{"project", project.identity().name},
                                              {"error", adopted.status().ToString()}});
    }
    if (options_.refresh_before_fit) options_.refresh_before_fit(project);
  }
  // Checked again now that the project's fits are this call's: a fit that held the project
  // while this call waited (here, or in another replica) may have made this one unneeded;
  // TrainModel calls arriving together would otherwise each store a version of the same input.
  if (only_if_due ? !project.RefitDue(absl::Now(), options_.max_staleness)
                  : project.FitIsCurrent()) {
    return std::nullopt;
  }
  // A caller that gave up while this waited gets no fit (a fit, once started, runs to its end).
  if (absl::Status s = given_up(); !s.ok()) return s;
  if (options_.before_fit_for_testing) options_.before_fit_for_testing(project);
  auto refit = project.Refit(versions_);
  if (!refit.ok()) {
    if (metrics_) metrics_->fit_failures.Increment();
    LogEvent("refit_failed", {{"project", project.identity().name},
                              {"error", refit.status().ToString()}});
    return refit.status();
  }
  const storage::ModelVersionRecord& version = refit->version;
  if (metrics_) {
    metrics_->versions.WithLabels({version.method, "inprocess"}).Increment();
    metrics_->fit_seconds.WithLabels({version.method}).Observe(version.duration_ms / 1000.0);
  }
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

absl::Duration TrainingScheduler::NextPassDelay(absl::Duration busy, double max_busy_fraction,
                                                absl::Duration poll_interval,
                                                absl::Duration max_staleness) {
  if (!(max_busy_fraction > 0.0 && max_busy_fraction <= 1.0)) return poll_interval;
  const absl::Duration rest = busy * ((1.0 - max_busy_fraction) / max_busy_fraction);
  return std::max(poll_interval, std::min(rest, max_staleness));
}

bool TrainingScheduler::WaitUnlessStopping(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), delay);
  return stopping_;
}

void TrainingScheduler::Loop() {
  absl::Duration delay = options_.poll_interval;
  while (!WaitUnlessStopping(delay)) {
    if (!options_.use_workers) {
      QueueDueProjects();
      continue;
    }
    const absl::Time start = absl::Now();
    RefitDueProjectsNow().IgnoreError();
    delay = NextPassDelay(absl::Now() - start, options_.max_busy_fraction, options_.poll_interval,
                          options_.max_staleness);
  }
}

void TrainingScheduler::QueueDueProjects() {
  for (const std::shared_ptr<LiveProject>& project : registry_.All()) {
    const int64_t project_id = project->identity().project_id;
    {
      absl::MutexLock lock(&queue_mu_);
      if (queued_or_fitting_.contains(project_id)) continue;
    }
    // Asked outside queue_mu_: RefitDue takes the project's own lock.
    if (!project->RefitDue(absl::Now(), options_.max_staleness)) continue;
    absl::MutexLock lock(&queue_mu_);
    if (queued_or_fitting_.insert(project_id).second) queue_.push_back(project);
  }
}

void TrainingScheduler::FitQueuedProjects() {
  while (true) {
    std::shared_ptr<LiveProject> project;
    {
      absl::MutexLock lock(&queue_mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return !queue_.empty();
      };
      // Woken by the queue, and at least every poll interval to see Stop().
      queue_mu_.AwaitWithTimeout(absl::Condition(&has_work), options_.poll_interval);
      if (!queue_.empty()) {
        project = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    {
      // A fit already started runs to its end; none starts after Stop().
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (project == nullptr) continue;
    const absl::Time start = absl::Now();
    // Errors are logged and counted by RefitAndLog; the project is queued again when due.
    RefitAndLog(*project, /*only_if_due=*/true).IgnoreError();
    const absl::Duration busy = absl::Now() - start;
    {
      absl::MutexLock lock(&queue_mu_);
      queued_or_fitting_.erase(project->identity().project_id);
    }
    project.reset();
    if (WaitUnlessStopping(NextPassDelay(busy, options_.max_busy_fraction,
                                         options_.poll_interval, options_.max_staleness))) {
      return;
    }
  }
}

}  // namespace verity::server
