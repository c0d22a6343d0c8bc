// TrainingJobStore: the PostgreSQL job table through which training runs in worker processes
// (server/training/training_worker.h, //server/training:verity_worker).
//
// Life of a job: Enqueue() creates it 'queued' (at most one queued or running job per project;
// enqueueing again while one is open returns the open one). Claim() hands the oldest claimable
// job to a worker: 'queued', or 'running' with an expired lease (its worker died), using
// FOR UPDATE SKIP LOCKED so that concurrent workers never claim the same job; the job becomes
// 'running' under the worker's name with a lease, and `attempts` counts the claims; an expired
// job that has had its `max_attempts` claims is marked 'failed' instead (its workers keep dying),
// which frees the project for its next job. The worker
// renews the lease with Renew() while it fits. The job ends 'done' in the same transaction that
// stores its model version (ModelVersionStore::SaveModelVersion with
// ModelVersionRecord::completes_job), which commits only if the worker still owns the job: a
// worker whose lease was taken over cannot store a second version. Fail() ends an attempt with
// an error: the job is queued again, or 'failed' after `max_attempts` claims.
//
// Thread-safe.
#ifndef VERITY_STORAGE_TRAINING_JOB_STORE_H_
#define VERITY_STORAGE_TRAINING_JOB_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/connection_pool.h"

namespace verity::storage {

struct TrainingJob {
  int64_t job_id = 0;
  int64_t project_id = 0;
  std::string state;  // queued, running, done, failed
  int32_t attempts = 0;
  std::string worker;            // The last claimant ("" if never claimed).
  std::optional<int32_t> version;  // The version a done job stored.
  std::string error;             // The last attempt's error, if any.
  // Enqueue only: true when this call created the job, false when it returned the project's
  // job that was already open (queued or running).
  bool created = false;
};

class TrainingJobStore {
 public:
  explicit TrainingJobStore(ConnectionPool* pool) : pool_(pool) {}

  // The project's open job, created 'queued' if there is none (then `created` is true). NOT_FOUND
  // for an unknown project.
  absl::StatusOr<TrainingJob> Enqueue(int64_t project_id);

  // Claims the oldest claimable job for `worker` with a lease of `lease`; nullopt when there is
  // none. First marks 'failed' every expired job with `max_attempts` claims (error: the lost
  // lease). INVALID_ARGUMENT for an empty worker name or max_attempts < 1.
  absl::StatusOr<std::optional<TrainingJob>> Claim(absl::string_view worker, absl::Duration lease,
                                                   int32_t max_attempts = 3);

  // Extends the lease of a job `worker` owns. ABORTED if it no longer owns it (the lease expired
  // and another worker claimed the job, or the job ended).
  absl::Status Renew(int64_t job_id, absl::string_view worker, absl::Duration lease);

  // Ends `worker`'s attempt with `error`: queued again, or failed after `max_attempts` claims.
  // ABORTED if `worker` does not own the job.
  absl::Status Fail(int64_t job_id, absl::string_view worker, absl::string_view error,
                    int32_t max_attempts);

  absl::StatusOr<TrainingJob> GetJob(int64_t job_id);
  // Every job of the project, oldest first.
  absl::StatusOr<std::vector<TrainingJob>> ListJobs(int64_t project_id);
  // Whether a worker is fitting the project now: its job is 'running' and the lease has not
  // expired (an expired lease is a dead worker's).
  absl::StatusOr<bool> HasRunningJob(int64_t project_id);

 private:
  ConnectionPool* const pool_;
};

}  // namespace verity::storage

#endif  // VERITY_STORAGE_TRAINING_JOB_STORE_H_
