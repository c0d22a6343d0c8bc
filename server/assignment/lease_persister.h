// LeasePersister: writes assignment leases to PostgreSQL behind the request path.
//
// SuggestItems answers as soon as its leases are in the in-memory LeaseBook; this persister
// batches the new leases of all projects and writes them every Options::flush_interval (and
// at Shutdown), so a suggestion does not wait for a database round trip. Leases are hints, not
// data (storage/lease_store.h already writes them with asynchronous commit): a crash can
// forget at most the last flush interval's leases, which at worst lets an item get one label
// more than planned. A failed write is retried at the next flush (leases are upserts).
//
// Thread-safety: thread-safe.
#ifndef VERITY_SERVER_ASSIGNMENT_LEASE_PERSISTER_H_
#define VERITY_SERVER_ASSIGNMENT_LEASE_PERSISTER_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/lease_store.h"

namespace verity::server {

class LeasePersister {
 public:
  struct Options {
    absl::Duration flush_interval = absl::Milliseconds(20);
  };

  LeasePersister(storage::LeaseStore& store, Options options);
  ~LeasePersister();  // Shutdown().

  void Enqueue(int64_t project_id, std::vector<storage::LeaseRecord> leases) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes everything queued so far; returns the first error.
  absl::Status Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // Flushes and stops the background thread.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  storage::LeaseStore& store_;
  const Options options_;
  absl::Mutex flush_mu_;  // One flush at a time.
  absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::vector<storage::LeaseRecord>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace verity::server

#endif  // VERITY_SERVER_ASSIGNMENT_LEASE_PERSISTER_H_
