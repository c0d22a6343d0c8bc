// Versioned schema migrations.
//
// A Migration is an ordered, numbered piece of SQL. ApplyMigrations() brings a
// database up to date in ONE transaction: it takes a transaction-level
// advisory lock (so concurrent callers, in this or other processes, queue up
// instead of racing), creates the bookkeeping table
// `schema_migrations(version, description, applied_at)` if needed, runs the
// migrations whose version is not recorded there, in order, and records them.
// Either all pending migrations are applied or none is. Running it again is a
// no-op. Migrations, once released, must never be edited: add a new one.
//
// Verity's own schema is in storage/schema_migrations.h.
//
// Thread-safety: ApplyMigrations() may be called concurrently from any number
// of threads and processes against the same database.
#ifndef VERITY_STORAGE_MIGRATIONS_H_
#define VERITY_STORAGE_MIGRATIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/connection_pool.h"

namespace verity {
namespace storage {

struct Migration {
  int32_t version;          // Positive; strictly increasing along the list.
  std::string description;  // One line, recorded in schema_migrations.
  std::string sql;          // One or more statements.
};

// Key of the advisory lock serialising ApplyMigrations() calls.
inline constexpr int64_t kMigrationAdvisoryLockKey = 0x5665726974790001;

// Applies the pending `migrations` as described above and returns the
// versions this call applied (empty when the schema was already current).
// Errors: INVALID_ARGUMENT if the versions are not positive and strictly
// increasing; FAILED_PRECONDITION if the database records a version newer
// than the newest in `migrations` (a newer binary migrated it); a migration's
// SQL error is returned with its version in the message and nothing applied.
absl::StatusOr<std::vector<int32_t>> ApplyMigrations(
    ConnectionPool& pool, absl::Span<const Migration> migrations);

// Versions recorded in schema_migrations, ascending; empty if the table does
// not exist yet.
absl::StatusOr<std::vector<int32_t>> AppliedMigrationVersions(
    ConnectionPool& pool);

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_MIGRATIONS_H_
