#include "server/assignment/lease_persister.h"

#include <utility>

#include "server/observability/log.h"

namespace verity::server {

LeasePersister::LeasePersister(storage::LeaseStore& store, Options options)
    : store_(store), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

LeasePersister::~LeasePersister() { Shutdown(); }

void LeasePersister::Enqueue(int64_t project_id, std::vector<storage::LeaseRecord> leases) {
  if (leases.empty()) return;
  absl::MutexLock lock(&mu_);
  std::vector<storage::LeaseRecord>& queue = pending_[project_id];
  queue.insert(queue.end(), leases.begin(), leases.end());
}

absl::Status LeasePersister::Flush() {
  absl::MutexLock flush_lock(&flush_mu_);
  absl::flat_hash_map<int64_t, std::vector<storage::LeaseRecord>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(pending_);
  }
  absl::Status first_error;
  for (auto& [project_id, leases] : batch) {
    absl::Status s = store_.UpsertLeases(project_id, leases);
    if (s.ok()) continue;
    if (first_error.ok()) first_error = s;
    // Keep them for the next flush (upserts are idempotent; later extensions win on replay
    // because they are appended after these).
    absl::MutexLock lock(&mu_);
    std::vector<storage::LeaseRecord>& queue = pending_[project_id];
    queue.insert(queue.begin(), leases.begin(), leases.end());
  }
  return first_error;
}

void LeasePersister::Loop() {
  while (true) {
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), options_.flush_interval);
      stopping = stopping_;
    }
    if (absl::Status s = Flush(); !s.ok()) {
      LogEvent("lease_flush_failed", {{"error", s.ToString()}});
    }
    if (stopping) return;
  }
}

void LeasePersister::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace verity::server
