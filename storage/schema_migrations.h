// Verity's PostgreSQL schema, as an ordered list of migrations.
//
// Every table is keyed by project_id first, so the schema can be distributed
// by project (e.g. Citus) without changes. Item and annotator indices are
// dense per project (0..n-1), allocated from projects.next_item_index /
// next_annotator_index while holding the project row lock; in-memory models
// index arrays by them directly. annotations holds the one live label per
// (item, annotator); every superseded label is kept in annotation_history.
// annotations.seq comes from projects.next_seq (advanced under the project row
// lock), taking a new value on every insert or revision: ascending in commit
// order within a project, it is the watermark of model versions.
//
// The list is immutable program data: thread-safe.
#ifndef VERITY_STORAGE_SCHEMA_MIGRATIONS_H_
#define VERITY_STORAGE_SCHEMA_MIGRATIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/connection_pool.h"
#include "storage/migrations.h"

namespace verity {
namespace storage {

// All migrations of Verity's schema, in version order.
const std::vector<Migration>& SchemaMigrations();

// ApplyMigrations(pool, SchemaMigrations()): call once at startup.
absl::StatusOr<std::vector<int32_t>> ApplySchemaMigrations(ConnectionPool& pool);

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_SCHEMA_MIGRATIONS_H_
