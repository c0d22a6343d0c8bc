// TrainingWorker: runs training jobs from the PostgreSQL job table (storage/training_job_store.h)
// — the loop of verity_worker, usable in-process by tests.
//
// RunOnce() claims a job, loads the project's current labels and latest version from
// PostgreSQL into a fresh LiveProject, fits it (LiveProject::Refit: warm-started from that
// version as the server would) while a LeaseRenewer keeps the job's lease (lease_renewer.h),
// and stores the version in the transaction that ends the job — which commits only if this
// worker still owns the job. A fit that fails ends the attempt (Fail: requeued, or failed after
// max_attempts). A worker killed mid-job stores nothing; its lease expires and another worker
// runs the job again, and that lost attempt counts too: after max_attempts claims the next
// Claim marks the job failed, so a job that kills its workers does not block its project.
//
// Thread-safety: one thread per TrainingWorker.
#ifndef VERITY_SERVER_TRAINING_TRAINING_WORKER_H_
#define VERITY_SERVER_TRAINING_TRAINING_WORKER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/state/project_registry.h"
#include "server/state/storage_handles.h"

namespace verity::server {

class TrainingWorker {
 public:
  struct Options {
    std::string name;  // Unique among workers (e.g. host:pid). Required.
    absl::Duration lease = absl::Seconds(60);
    // The lease is renewed every lease / 3.
    int32_t max_attempts = 3;
  };

  TrainingWorker(StorageHandles& storage, Options options);

  // Runs at most one job. Returns whether one was claimed (false: the queue is empty). Errors
  // are those of the job table itself; a failed fit is recorded on the job and returns true.
  absl::StatusOr<bool> RunOnce();

 private:
  StorageHandles& storage_;
  ProjectRegistry loader_;
  const Options options_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_TRAINING_TRAINING_WORKER_H_
