// TrainingScheduler: refits stale projects in the background.
//
// A background thread wakes every Options::poll_interval and asks each project whether a refit
// is due (LiveProject::RefitDue: enough new labels, staleness, or a method change), then
//   - in-process (the default): queues each due project that is not queued or being fit
//     already for the background fitters, Options::max_concurrent_fits threads that take the
//     queue in order, each project's fits one at a time (TrainModel's fits share the same
//     slots). The poll does not wait for the fits: one project's long fit holds one fitter,
//     and the others keep refitting the projects that become due meanwhile;
//   - with Options::use_workers: first serves any newer model version a worker process stored
//     (LiveProject::AdoptVersion; a pass polls the newest version's number and reads a
//     version's parameters once, and never again one that failed to restore), then enqueues a
//     training job for each due project (storage/training_job_store.h) for a verity_worker to
//     run.
// Tests call RefitDueProjectsNow() to drive it step by step.
//
// Each background fitter fits at most Options::max_busy_fraction of the time: after a fit
// that took d it rests d·(1 − f)/f, at most max_staleness, before its next (NextPassDelay;
// in worker mode the poll rests after a pass the same way). A bulk load makes a refit due as
// soon as the previous one ends; without the rest the trainer would take whole cores from
// ingest and PostgreSQL for as long as the load lasts. Served posteriors do not wait for
// refits (ingest publishes them under the current parameters), so the rest only delays new
// parameters.
//
// Thread-safety: thread-safe. Stop() (also run by the destructor) lets a running fit finish.
#ifndef VERITY_SERVER_TRAINING_TRAINING_SCHEDULER_H_
#define VERITY_SERVER_TRAINING_TRAINING_SCHEDULER_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/observability/metrics.h"
#include "server/state/project_registry.h"
#include "storage/fit_lock.h"
#include "storage/model_version_store.h"
#include "storage/training_job_store.h"

namespace verity::server {

class TrainingScheduler {
 public:
  struct Options {
    absl::Duration poll_interval = absl::Milliseconds(200);
    // A project with any new label is refit at least this often.
    absl::Duration max_staleness = absl::Seconds(30);
    // In (0, 1]: the most of its wall time the background thread spends fitting; 1 fits back
    // to back. RefitDueProjectsNow() and RefitProjectNow() are not limited.
    double max_busy_fraction = 0.5;
    // false: no background thread; only RefitDueProjectsNow() fits (tests).
    bool run_in_background = true;
    // Train in worker processes through the job table instead of in this process.
    bool use_workers = false;
    // With use_workers: how long TrainModel waits for a worker's version.
    absl::Duration train_wait = absl::Minutes(10);
    // In-process fits running at once, over all projects (>= 1); a project's fits run one at
    // a time. A background pass fits its due projects on up to this many threads, and
    // TrainModel calls take a slot too, so one project's long fit never holds up the others
    // while a slot is free.
    int max_concurrent_fits = 2;
    // Several server replicas over one database: in-process fits claim the project's fit lock
    // (storage/fit_lock.h), so that one replica fits a project at a time. A replica that finds
    // the lock held skips the fit; one that takes it first serves any version stored meanwhile
    // and fits only if that did not make the fit unnecessary. Null: no claim (one replica).
    // Must outlive the scheduler.
    storage::FitLocks* fit_locks = nullptr;
    // With fit_locks: called under the project's fit lock, after serving the newest stored
    // version and before deciding whether the fit is still due, to bring the project's
    // labels and settings up to the database's. Without it, a replica that had not yet seen another's
    // method change fitted the old method over the new one's version, and back again. Also
    // called first by RefitProjectNow (TrainModel), before it decides that nothing changed.
    std::function<void(LiveProject&)> refresh_before_fit;
    // Tests: called in the fitting thread once a fit holds its project, its slot and its fit
    // lock.
    std::function<void(const LiveProject&)> before_fit_for_testing;
  };

  // `jobs` may be null unless options.use_workers. `metrics` may be null (nothing measured);
  // otherwise it must outlive the scheduler (model versions served, fit durations and
  // failures, training jobs enqueued).
  TrainingScheduler(ProjectRegistry& registry, storage::ModelVersionStore& versions,
                    storage::TrainingJobStore* jobs, Options options,
                    MetricsRegistry* metrics = nullptr);
  ~TrainingScheduler();

  // Refits, synchronously, every project whose refit is due, or when `force` is true every
  // project with labels whose fit is not current (LiveProject::FitIsCurrent); with workers,
  // enqueues a job for each of them instead (with `force`, for every project with labels).
  // Returns the first error (after trying all projects).
  absl::Status RefitDueProjectsNow(bool force = false);

  // Refits `project` now, whether or not a refit is due (TrainModel), after any fitting pass
  // in progress. FAILED_PRECONDITION when the project has no labels yet. With workers: enqueues
  // a job and waits (up to train_wait, DEADLINE_EXCEEDED after) for the version it produces.
  // `cancelled`, if given, is asked before each wait (TrainModel: the call was cancelled or
  // passed its deadline): once it says true the call stops waiting and answers CANCELLED, so
  // a caller that gave up does not hold a server thread for train_wait (a job already
  // enqueued stays, and its version is served when a worker stores it).
  absl::StatusOr<storage::ModelVersionRecord> RefitProjectNow(
      LiveProject& project, const std::function<bool()>& cancelled = nullptr);

  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Serves the newest version stored for `project` (by a worker, or by another replica) if it
  // is newer than the one served: reads the newest version's number, and its parameters only
  // when newer and not refused before. Returns the version now served (0 before any). Safe to
  // call from any thread (the replica follower calls it when a version is stored).
  absl::StatusOr<int32_t> AdoptStoredVersion(LiveProject& project);

  // How long a background fitter rests after a fit that took `busy` (and the worker-mode poll
  // after a pass): busy·(1 − f)/f, at least poll_interval and at most max_staleness (so that
  // the rest never delays a refit by more than the staleness bound). An f outside (0, 1]
  // counts as 1.
  static absl::Duration NextPassDelay(absl::Duration busy, double max_busy_fraction,
                                      absl::Duration poll_interval, absl::Duration max_staleness);

 private:
  // The background poll: queues the due projects (in-process) or runs a worker-mode pass.
  void Loop();
  // In-process: queues each project whose refit is due and that is not queued or being fit by
  // a background fitter already.
  void QueueDueProjects() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // A background fitter: fits the queued projects one after another, resting after each fit
  // (NextPassDelay), until Stop().
  void FitQueuedProjects() ABSL_LOCKS_EXCLUDED(queue_mu_, mu_);
  // Waits up to `delay`; true once Stop() was called.
  bool WaitUnlessStopping(absl::Duration delay) ABSL_LOCKS_EXCLUDED(mu_);
  // Refits one project and logs the outcome: waits for the project's fit in progress, if any,
  // then for a free slot (max_concurrent_fits), then claims the fit lock (Options::fit_locks).
  // Returns nullopt, without fitting, when another replica holds the lock; or when, after
  // serving the version another replica stored, the refit is no longer due (`only_if_due`) or
  // the served version is current. `cancelled`, if given, is asked while it waits for the
  // project and for a slot, and once more before the fit: CANCELLED once it says true.
  absl::StatusOr<std::optional<storage::ModelVersionRecord>> RefitAndLog(
      LiveProject& project, bool only_if_due, const std::function<bool()>& cancelled = nullptr)
      ABSL_LOCKS_EXCLUDED(slots_mu_, project_fits_mu_);
  // The mutex that serialises `project`'s fits.
  std::shared_ptr<absl::Mutex> ProjectFitMutex(int64_t project_id)
      ABSL_LOCKS_EXCLUDED(project_fits_mu_);

  ProjectRegistry& registry_;
  storage::ModelVersionStore& versions_;
  storage::TrainingJobStore* const jobs_;
  const Options options_;
  struct Metrics;  // The scheduler's metric children; null without a registry.
  const std::unique_ptr<Metrics> metrics_;
  absl::Mutex pass_mu_;  // One RefitDueProjectsNow pass (or worker-mode poll) at a time.
  // In-process background fits: the due projects waiting for a fitter, in the order they
  // became due, and the ids of those queued or being fit (a project is queued once). The
  // queue holds its projects, so the memory budget does not unload one while it waits
  // (ProjectRegistry::EnforceMemoryBudget unloads only projects nothing else holds).
  absl::Mutex queue_mu_;
  std::deque<std::shared_ptr<LiveProject>> queue_ ABSL_GUARDED_BY(queue_mu_);
  absl::flat_hash_set<int64_t> queued_or_fitting_ ABSL_GUARDED_BY(queue_mu_);
  // Worker mode: per project, the newest stored version that failed to restore, so that its
  // parameters are not read again on every pass (AdoptStoredVersion).
  absl::Mutex refused_mu_;
  absl::flat_hash_map<int64_t, int32_t> refused_versions_ ABSL_GUARDED_BY(refused_mu_);
  absl::Mutex project_fits_mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<absl::Mutex>> project_fits_
      ABSL_GUARDED_BY(project_fits_mu_);
  absl::Mutex slots_mu_;
  int free_slots_ ABSL_GUARDED_BY(slots_mu_);
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::vector<std::thread> fitters_;  // In-process background fitters.
};

}  // namespace verity::server

#endif  // VERITY_SERVER_TRAINING_TRAINING_SCHEDULER_H_
