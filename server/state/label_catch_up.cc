#include "server/state/label_catch_up.h"

#include "absl/status/statusor.h"

namespace verity::server {

absl::Status CatchUpLabels(storage::AnnotationStore& store, LiveProject& project) {
  const auto [item_prefix, annotator_prefix] = project.KnownIdPrefixes();
  absl::StatusOr<storage::LabelsSince> since = store.ReadLabelsSince(
      project.identity().project_id, project.applied_seq(), item_prefix, annotator_prefix);
  if (!since.ok()) return since.status();
  project.ApplyFollowed(*since);
  return absl::OkStatus();
}

}  // namespace verity::server
