// ProjectStore: the `projects` table, one row per labelling job.
//
// A project fixes its ordered class names (K >= 2) and optional feature
// dimensions at creation; `settings` is an opaque blob owned by the server
// (truth model, hyper-parameters, assignment policy) that storage/ never
// interprets. Project ids are assigned by PostgreSQL.
//
// Thread-safety: all methods are thread-safe (each call is one transaction
// on a pooled connection). The pool must outlive the store.
#ifndef VERITY_STORAGE_PROJECT_STORE_H_
#define VERITY_STORAGE_PROJECT_STORE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/connection_pool.h"

namespace verity {
namespace storage {

struct ProjectRecord {
  int64_t project_id = 0;  // Assigned by CreateProject.
  std::string name;        // Unique, non-empty.
  std::vector<std::string> classes;  // Ordered class names, at least 2.
  int32_t item_feature_dim = 0;       // 0: items have no features.
  int32_t annotator_feature_dim = 0;  // 0: annotators have no features.
  std::string settings;               // Opaque bytes owned by the server.
  absl::Time created_at;              // Set by CreateProject.
  // Writes of the project's items, annotator features and settings so far
  // (storage/project_changes.h); read only.
  int64_t change_seq = 0;
  // Items and annotators stored so far (the project's next dense indices); read only.
  int64_t num_items = 0;
  int64_t num_annotators = 0;
  // Rows of annotation_history (revised and stale labels) stored so far; read only.
  int64_t history_rows = 0;
};

class ProjectStore {
 public:
  explicit ProjectStore(ConnectionPool* pool) : pool_(pool) {}

  // Inserts a project; `project.project_id` and `created_at` are ignored and
  // returned filled in. Errors: ALREADY_EXISTS if the name is taken;
  // INVALID_ARGUMENT for an empty name, fewer than 2 classes or a negative
  // feature dimension; UNAVAILABLE when PostgreSQL is unreachable.
  absl::StatusOr<ProjectRecord> CreateProject(const ProjectRecord& project);

  // NOT_FOUND if there is no such project.
  absl::StatusOr<ProjectRecord> GetProject(int64_t project_id);
  absl::StatusOr<ProjectRecord> GetProjectByName(absl::string_view name);

  // All projects, by ascending project_id.
  absl::StatusOr<std::vector<ProjectRecord>> ListProjects();

  // Replaces the settings blob (and marks the project changed, see
  // storage/project_changes.h); UpdateSettingsFrom with a blob that does not depend on the
  // stored one. NOT_FOUND if there is no such project.
  // `change_seq` (may be null) receives the project's change_seq after it.
  absl::Status UpdateSettings(int64_t project_id, absl::string_view settings,
                              int64_t* change_seq = nullptr);

  // Replaces the settings blob with next(stored blob), read and written in one transaction
  // under the project row's lock (FOR NO KEY UPDATE, as the write takes anyway), so that
  // concurrent updates, through any server replica, each build on the one before it. An error
  // from `next` writes nothing and is returned. NOT_FOUND if there is no such project.
  // `change_seq` (may be null) receives the project's change_seq after it.
  absl::Status UpdateSettingsFrom(
      int64_t project_id,
      const std::function<absl::StatusOr<std::string>(absl::string_view stored)>& next,
      int64_t* change_seq = nullptr);

  // (project id, change_seq) of every project, by project id.
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ListChangeSeqs();

 private:
  ConnectionPool* const pool_;
};

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_PROJECT_STORE_H_
