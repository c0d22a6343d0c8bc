// CatchUpLabels: brings a live project up to the labels every writer has committed to it.
//
// Several server replicas may write one project. Each commit notifies the others (NOTIFY in
// storage::AnnotationStore::CommitAnnotations); a replica then reads the live labels with seq
// above what its memory holds and applies them (LiveProject::ApplyFollowed). Seq order is
// commit order within a project, so one read by seq misses nothing, and a read that comes late
// or twice costs time, never a label.
#ifndef VERITY_SERVER_STATE_LABEL_CATCH_UP_H_
#define VERITY_SERVER_STATE_LABEL_CATCH_UP_H_

#include "absl/status/status.h"
#include "server/state/live_project.h"
#include "storage/annotation_store.h"

namespace verity::server {

// Reads the project's labels with seq > project.applied_seq() and applies them. Errors are
// the read's (UNAVAILABLE when PostgreSQL is unreachable); memory is then unchanged.
absl::Status CatchUpLabels(storage::AnnotationStore& store, LiveProject& project);

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_LABEL_CATCH_UP_H_
