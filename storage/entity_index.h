// Dense per-project indices for items and annotators, allocated inside the
// caller's transaction.
//
// Items and annotators are named by clients with external string ids and
// stored with dense integer indices 0..n-1 per project, which the in-memory
// models use as array positions. New indices come from the project row's
// next_item_index / next_annotator_index counters, which are only read and
// advanced while the project row is locked (LockProjects), so concurrent
// transactions never allocate the same index and never leave gaps: an
// aborted transaction rolls its counter update back with its rows.
//
// These are building blocks for the stores' transaction functions: they take
// a pqxx::work and let libpqxx exceptions propagate to
// ConnectionPool::RunInTransaction, which converts them. Stateless and
// thread-safe; each transaction is used by one thread.
#ifndef VERITY_STORAGE_ENTITY_INDEX_H_
#define VERITY_STORAGE_ENTITY_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pqxx/transaction"

namespace verity {
namespace storage {

enum class EntityKind { kItem, kAnnotator };

// A project row locked by LockProjects, with the fields writers check.
struct LockedProject {
  int64_t project_id = 0;
  int32_t num_classes = 0;
  int32_t item_feature_dim = 0;
  int32_t annotator_feature_dim = 0;
  // The index counters as read under the lock: the project holds exactly the
  // items 0..next_item_index-1 and annotators 0..next_annotator_index-1.
  int32_t next_item_index = 0;
  int32_t next_annotator_index = 0;
};

// Locks the rows of `project_ids` (FOR NO KEY UPDATE, in ascending id order so
// that transactions locking several projects cannot deadlock) until the end
// of the transaction, and returns them sorted by id. Duplicates are ignored.
// All writers of items, annotators and annotations of a project hold this
// lock, which serialises them per project. Returns NOT_FOUND naming the first
// missing project.
absl::StatusOr<std::vector<LockedProject>> LockProjects(
    pqxx::work& txn, absl::Span<const int64_t> project_ids);

// Requires: the project's row is locked by this transaction (LockProjects).
// Returns the dense index of each of `external_ids` (aligned with the input;
// ids may repeat), creating the missing ones with consecutive new indices in
// order of first appearance. Ids must already be validated
// (ValidateExternalId). Returns RESOURCE_EXHAUSTED if the project would exceed
// 2^31 - 1 entities of the kind. `created`, when given, receives how many were created.
absl::StatusOr<std::vector<int32_t>> ResolveOrCreateIndices(
    pqxx::work& txn, int64_t project_id, EntityKind kind,
    absl::Span<const absl::string_view> external_ids, int32_t* created = nullptr);

// Requires: the project's row is locked by this transaction, `next_index` is
// the kind's counter as read under that lock (LockedProject), and `new_ids`
// are distinct, validated and not yet in the project. Creates them with the
// indices next_index, next_index + 1, ... (streamed with COPY, no lookups) and
// advances the counter. Returns RESOURCE_EXHAUSTED past 2^31 - 1 entities;
// ALREADY_EXISTS (from the unique index, via the transaction's error) if an
// id did exist after all.
absl::Status AppendNewEntities(pqxx::work& txn, int64_t project_id,
                               EntityKind kind, int32_t next_index,
                               absl::Span<const absl::string_view> new_ids);

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_ENTITY_INDEX_H_
