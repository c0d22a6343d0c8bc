// FitLocks: at most one fit of a project at a time across every server replica of a database.
//
// A fit holds a PostgreSQL session advisory lock named after its project for as long as it
// runs, on a pool connection it keeps meanwhile (a pool of its own in a server). Another
// replica's try fails at once and it leaves the project to the holder, adopting the version
// the holder stores. If the holder dies, PostgreSQL drops its session and the lock with it, so
// no lock outlives its fit.
//
// The key is one bigint: kKeySpace in the high 32 bits, the project id in the low 32 (project
// ids above 2^32 would share keys, which costs only a skipped fit; none exist in practice).
//
// Thread-safety: thread-safe. The pools must outlive the locks.
#ifndef VERITY_STORAGE_FIT_LOCK_H_
#define VERITY_STORAGE_FIT_LOCK_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "storage/connection_pool.h"

namespace verity::storage {

// A held lock; released (pg_advisory_unlock) when destroyed.
class FitLock {
 public:
  FitLock(const FitLock&) = delete;
  FitLock& operator=(const FitLock&) = delete;
  ~FitLock();

 private:
  friend class FitLocks;
  FitLock(PooledConnection connection, int64_t key)
      : connection_(std::move(connection)), key_(key) {}

  PooledConnection connection_;
  const int64_t key_;
};

class FitLocks {
 public:
  static constexpr int64_t kKeySpace = 0x56524654;  // "VRFT"

  explicit FitLocks(ConnectionPool* pool) : FitLocks(pool, pool) {}
  // Locks held on `lock_pool`'s connections, IsHeld asked on `query_pool`'s. A server gives
  // the locks their own pool, one connection per fit it runs at once: a fit holds its lock's
  // connection while it saves its version on another, so on a shared pool as many fits as
  // connections would each hold one and wait for another for good.
  FitLocks(ConnectionPool* lock_pool, ConnectionPool* query_pool)
      : lock_pool_(lock_pool), query_pool_(query_pool) {}

  // The lock of `project_id` if no other session holds it, else nullptr. UNAVAILABLE if
  // PostgreSQL cannot be reached.
  absl::StatusOr<std::unique_ptr<FitLock>> TryAcquire(int64_t project_id);

  // Whether some session of this database, this replica's own included, holds the lock of
  // `project_id` now, i.e. a fit of the project is running on some replica. UNAVAILABLE if
  // PostgreSQL cannot be reached.
  absl::StatusOr<bool> IsHeld(int64_t project_id);

  static int64_t KeyOf(int64_t project_id) {
    return static_cast<int64_t>((static_cast<uint64_t>(kKeySpace) << 32) |
                                (static_cast<uint64_t>(project_id) & 0xffffffffu));
  }

 private:
  ConnectionPool* const lock_pool_;
  ConnectionPool* const query_pool_;
};

}  // namespace verity::storage

#endif  // VERITY_STORAGE_FIT_LOCK_H_
