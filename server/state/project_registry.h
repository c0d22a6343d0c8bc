// ProjectRegistry: the server's live projects by name, loaded from PostgreSQL.
//
// At start-up LoadAll() restores every project (labels, latest model version, posteriors).
// Get() also finds a project created by another server replica since, by loading it from
// PostgreSQL on first use. Projects are never unloaded while the server runs.
//
// Thread-safety: thread-safe.
#ifndef VERITY_SERVER_STATE_PROJECT_REGISTRY_H_
#define VERITY_SERVER_STATE_PROJECT_REGISTRY_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/state/live_project.h"
#include "server/state/storage_handles.h"
#include "verity/v1/projects.pb.h"

namespace verity::server {

class ProjectRegistry {
 public:
  explicit ProjectRegistry(StorageHandles& storage) : storage_(storage) {}

  // Loads every stored project. Fails on the first project that cannot be restored.
  absl::Status LoadAll() ABSL_LOCKS_EXCLUDED(mu_);

  // NOT_FOUND (naming the project) if no such project exists in memory or in PostgreSQL.
  absl::StatusOr<std::shared_ptr<LiveProject>> Get(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // Creates and persists a validated project. ALREADY_EXISTS if the name is taken;
  // UNIMPLEMENTED if its truth method is not built.
  absl::StatusOr<std::shared_ptr<LiveProject>> Create(const v1::Project& project)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Persists and applies new settings.
  absl::Status UpdateSettings(LiveProject& project, const v1::ProjectSettings& settings);

  std::vector<std::shared_ptr<LiveProject>> All() const ABSL_LOCKS_EXCLUDED(mu_);

  // Builds a project's live state from PostgreSQL without registering it (training workers
  // load a fresh copy for each job).
  absl::StatusOr<std::shared_ptr<LiveProject>> Load(const storage::ProjectRecord& record);

 private:
  StorageHandles& storage_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<LiveProject>> projects_ ABSL_GUARDED_BY(mu_);
};

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_PROJECT_REGISTRY_H_
