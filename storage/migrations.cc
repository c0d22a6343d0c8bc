#include "storage/migrations.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pqxx/except"
#include "pqxx/result"
#include "storage/pg_status.h"

namespace verity {
namespace storage {
namespace {

absl::Status ValidateMigrations(absl::Span<const Migration> migrations) {
  int32_t previous = 0;
  for (const Migration& m : migrations) {
    if (m.version <= previous) {
      return absl::InvalidArgumentError(absl::StrCat(
          "migration versions must be positive and strictly increasing; ",
          m.version, " follows ", previous));
    }
    previous = m.version;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ApplyMigrations(
    ConnectionPool& pool, absl::Span<const Migration> migrations) {
  VERITY_RETURN_IF_ERROR(ValidateMigrations(migrations));
  return pool.WithTransaction(
      "applying schema migrations",
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
        // "relation already exists, skipping" notices are expected noise.
        txn.exec0("SET LOCAL client_min_messages = warning");
        txn.exec_params("SELECT pg_advisory_xact_lock($1)",
                         kMigrationAdvisoryLockKey);
        // Everything below runs after the lock is held, with snapshots that
        // include whatever a previous holder committed.
        txn.exec0(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "  version integer PRIMARY KEY,"
            "  description text NOT NULL,"
            "  applied_at timestamptz NOT NULL DEFAULT now())");
        absl::flat_hash_set<int32_t> applied;
        int32_t newest_applied = 0;
        for (const pqxx::row& row :
             txn.exec("SELECT version FROM schema_migrations")) {
          const int32_t version = row[0].as<int32_t>();
          applied.insert(version);
          newest_applied = std::max(newest_applied, version);
        }
        const int32_t newest_known =
            migrations.empty() ? 0 : migrations.back().version;
        if (newest_applied > newest_known) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the database schema is at version ", newest_applied,
              ", newer than this binary knows (", newest_known,
              "); upgrade the binary"));
        }
        std::vector<int32_t> applied_now;
        for (const Migration& m : migrations) {
          if (applied.contains(m.version)) continue;
          try {
            // exec, not exec0: a migration's last statement may return rows
            // (SELECT setval(...)), which exec0 would refuse.
            txn.exec(m.sql);
          } catch (const std::exception&) {
            // Any failure, not only pqxx::sql_error, names the migration.
            return StatusFromCurrentException(absl::StrCat(
                "migration ", m.version, " (", m.description, ")"));
          }
          txn.exec_params0(
              "INSERT INTO schema_migrations (version, description) "
              "VALUES ($1, $2)",
              m.version, m.description);
          applied_now.push_back(m.version);
        }
        return applied_now;
      });
}

absl::StatusOr<std::vector<int32_t>> AppliedMigrationVersions(
    ConnectionPool& pool) {
  return pool.WithTransaction(
      "reading schema_migrations",
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
        std::vector<int32_t> versions;
        const pqxx::row exists =
            txn.exec1("SELECT to_regclass('schema_migrations') IS NOT NULL");
        if (!exists[0].as<bool>()) return versions;
        for (const pqxx::row& row : txn.exec(
                 "SELECT version FROM schema_migrations ORDER BY version")) {
          versions.push_back(row[0].as<int32_t>());
        }
        return versions;
      });
}

}  // namespace storage
}  // namespace verity
