// TrainingScheduler: refits stale projects in the background (in-process trainer).
//
// A background thread wakes every Options::poll_interval, asks each project whether a refit
// is due (LiveProject::RefitDue: enough new labels, staleness, or a method change) and runs
// the due fits one after another. Tests call RefitDueProjectsNow() to drive it step by step.
//
// Thread-safety: thread-safe. Stop() (also run by the destructor) lets a running fit finish.
#ifndef VERITY_SERVER_TRAINING_SCHEDULER_H_
#define VERITY_SERVER_TRAINING_SCHEDULER_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/project_registry.h"
#include "storage/model_version_store.h"

namespace verity::server {

class TrainingScheduler {
 public:
  struct Options {
    absl::Duration poll_interval = absl::Milliseconds(200);
    // A project with any new label is refit at least this often.
    absl::Duration max_staleness = absl::Seconds(30);
    // false: no background thread; only RefitDueProjectsNow() fits (tests).
    bool run_in_background = true;
  };

  TrainingScheduler(ProjectRegistry& registry, storage::ModelVersionStore& versions,
                    Options options);
  ~TrainingScheduler();

  // Refits, synchronously, every project whose refit is due, or every project with labels
  // when `force` is true. Returns the first error (after trying all projects).
  absl::Status RefitDueProjectsNow(bool force = false);

  // Refits `project` now, whether or not a refit is due (TrainModel), after any fitting pass
  // in progress. FAILED_PRECONDITION when the project has no labels yet.
  absl::StatusOr<storage::ModelVersionRecord> RefitProjectNow(LiveProject& project);

  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // Refits one project and logs the outcome. Requires fit_mu_.
  absl::StatusOr<storage::ModelVersionRecord> RefitAndLog(LiveProject& project)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(fit_mu_);

  ProjectRegistry& registry_;
  storage::ModelVersionStore& versions_;
  const Options options_;
  absl::Mutex fit_mu_;  // One fitting pass at a time.
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_TRAINING_SCHEDULER_H_
