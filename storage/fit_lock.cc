#include "storage/fit_lock.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pqxx/nontransaction"

namespace verity::storage {

FitLock::~FitLock() {
  try {
    pqxx::nontransaction(*connection_).exec_params("SELECT pg_advisory_unlock($1)", key_);
  } catch (const std::exception&) {
    // The session is broken and PostgreSQL dropped the lock with it; so must the pool.
    connection_.MarkBroken();
  }
}

absl::StatusOr<std::unique_ptr<FitLock>> FitLocks::TryAcquire(int64_t project_id) {
  absl::StatusOr<PooledConnection> connection = lock_pool_->Acquire();
  if (!connection.ok()) return connection.status();
  const int64_t key = KeyOf(project_id);
  try {
    const bool held = pqxx::nontransaction(**connection)
                          .exec_params1("SELECT pg_try_advisory_lock($1)", key)[0]
                          .as<bool>();
    if (!held) return std::unique_ptr<FitLock>();
  } catch (const std::exception& e) {
    connection->MarkBroken();
    return absl::UnavailableError(
        absl::StrCat("taking the fit lock of project ", project_id, ": ", e.what()));
  }
  return std::unique_ptr<FitLock>(new FitLock(std::move(*connection), key));
}

absl::StatusOr<bool> FitLocks::IsHeld(int64_t project_id) {
  absl::StatusOr<PooledConnection> connection = query_pool_->Acquire();
  if (!connection.ok()) return connection.status();
  const int64_t key = KeyOf(project_id);
  try {
    // pg_locks shows a bigint advisory key as classid (high half), objid (low half) and
    // objsubid 1, for every database of the cluster.
    return pqxx::nontransaction(**connection)
        .exec_params1(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1)",
            static_cast<int64_t>(static_cast<uint64_t>(key) >> 32),
            static_cast<int64_t>(static_cast<uint64_t>(key) & 0xffffffffu))[0]
        .as<bool>();
  } catch (const std::exception& e) {
    connection->MarkBroken();
    return absl::UnavailableError(
        absl::StrCat("reading the fit lock of project ", project_id, ": ", e.what()));
  }
}

}  // namespace verity::storage
