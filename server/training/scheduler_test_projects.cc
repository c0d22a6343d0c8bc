#include "server/training/scheduler_test_projects.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/annotation_store.h"
#include "storage/project_store.h"
#include "verity/v1/projects.pb.h"

namespace verity::server::testing {

absl::StatusOr<int64_t> StoreDsProjectWithLabels(storage::ConnectionPool& pool,
                                                 const std::string& name) {
  storage::ProjectStore projects(&pool);
  storage::ProjectRecord p;
  p.name = name;
  p.classes = {"a", "b"};
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  p.settings = settings.SerializeAsString();
  absl::StatusOr<storage::ProjectRecord> created = projects.CreateProject(p);
  if (!created.ok()) return created.status();
  std::vector<storage::AnnotationWrite> writes;
  for (int i = 0; i < 40; ++i) {
    for (int r = 0; r < 3; ++r) {
      const int annotator = (i + r) % 5;
      writes.push_back({created->project_id, absl::StrCat("i", i), absl::StrCat("w", annotator),
                        annotator < 4 ? i % 2 : 1 - i % 2, std::nullopt});
    }
  }
  storage::AnnotationStore annotations(&pool);
  if (auto committed = annotations.CommitAnnotations(writes); !committed.ok()) {
    return committed.status();
  }
  return created->project_id;
}

}  // namespace verity::server::testing
