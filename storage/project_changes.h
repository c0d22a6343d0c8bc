// Project changes other than labels, for server replicas that follow each other.
//
// Every write of a project's items (AddItems: new items, gold labels, priorities, features),
// annotator features or settings bumps projects.change_seq and sends NOTIFY on
// kProjectChangesChannel with the project's id, inside its transaction (delivered after
// COMMIT). A replica that serves the project re-reads those from PostgreSQL when its
// change_seq is behind (server/replication/replica_follower.h). Labels follow by their own
// seq (storage/annotation_store.h).
#ifndef VERITY_STORAGE_PROJECT_CHANGES_H_
#define VERITY_STORAGE_PROJECT_CHANGES_H_

#include <cstdint>

#include "pqxx/transaction"

namespace verity::storage {

inline constexpr char kProjectChangesChannel[] = "verity_project_changes";

// Bumps the project's change_seq and notifies, in `txn` (which should hold the project row
// lock already, as every writer of the project's entities does). Returns the new change_seq:
// the writer's own change is the one numbered so.
int64_t MarkProjectChanged(pqxx::work& txn, int64_t project_id);

}  // namespace verity::storage

#endif  // VERITY_STORAGE_PROJECT_CHANGES_H_
