// ModelVersionStore: immutable results of training runs.
//
// A model version is written once by a trainer and never changed: the
// method, its serialized parameters (checkpoint, opaque to storage/), the
// watermark (largest annotation seq it saw; see storage/annotation_store.h),
// and training metrics. Versions are numbered 1, 2, ... per project in the
// order they are saved.
//
// Only the newest kCheckpointsKept versions of a project keep their checkpoint
// (parameters and stored outputs): saving a version frees the checkpoints of the
// older ones in its transaction (at most kCheckpointsFreedPerSave), so a project
// refit every few seconds does not fill the disk. A freed version keeps its
// metadata (it is still listed); reading its parameters or outputs is NOT_FOUND.
//
// Thread-safety: all methods are thread-safe, also across processes:
// concurrent saves for one project get distinct consecutive versions. The
// pool must outlive the store.
#ifndef VERITY_STORAGE_MODEL_VERSION_STORE_H_
#define VERITY_STORAGE_MODEL_VERSION_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/connection_pool.h"

namespace verity {
namespace storage {

struct ModelVersionRecord {
  int64_t project_id = 0;
  int32_t version = 0;      // Assigned by SaveModelVersion.
  std::string method;       // e.g. "ds", "lia".
  std::string parameters;   // Serialized model state; opaque bytes.
  int64_t watermark = 0;    // Largest annotation seq included in training.
  double log_likelihood = 0;
  int32_t iterations = 0;
  double duration_ms = 0;
  int64_t num_labels = 0;   // Live labels the model was trained on.
  // Live labels of the fit from scratch this version's chain of warm starts began with (its
  // own num_labels when it was fitted from scratch); 0 when not known (versions stored before
  // schema migration 15). A restarted server, a replica adopting the version and a training
  // worker base their next warm start on it (server/state/live_project.h, Refit).
  int64_t scratch_num_labels = 0;
  absl::Time created_at;    // Set by SaveModelVersion.
  // When set, SaveModelVersion also ends this training job 'done' with the new version, in the
  // same transaction, and stores nothing (ABORTED) unless `worker` still owns the running job
  // (storage/training_job_store.h). Not stored with the version.
  struct JobOwnership {
    int64_t job_id = 0;
    std::string worker;
  };
  std::optional<JobOwnership> completes_job;
};

// The outputs of a fit, stored beside its version (opaque encodings owned by the caller).
struct ModelVersionOutputs {
  std::string posteriors;
  std::string annotator_profiles;
};

class ModelVersionStore {
 public:
  // Large columns (parameters, stored posteriors and profiles) are read in chunks of
  // `read_chunk_bytes`: PostgreSQL sends bytea as hex text, twice its size, and no single
  // value it builds may pass 1 GB, so a blob read whole fails from about 512 MB on. Chunks
  // keep every allocation, on both sides, to a few times the chunk.
  static constexpr int64_t kDefaultReadChunkBytes = int64_t{64} << 20;
  // Versions per project whose checkpoints are kept. The server and the workers only ever
  // read the newest; the older two give a replica that listed the newest a margin to read it
  // while newer versions are saved.
  static constexpr int32_t kCheckpointsKept = 3;
  // Checkpoints one save frees at most, the oldest first: one in a steady state; a database
  // whose projects kept every checkpoint (before schema migration 14) is freed over later
  // saves, so that no save's transaction runs into the statement timeout.
  static constexpr int32_t kCheckpointsFreedPerSave = 8;
  explicit ModelVersionStore(ConnectionPool* pool,
                             int64_t read_chunk_bytes = kDefaultReadChunkBytes)
      : pool_(pool),
        read_chunk_bytes_(read_chunk_bytes > 0 ? read_chunk_bytes : kDefaultReadChunkBytes) {}

  // Stores `record` (its version and created_at are ignored) as the
  // project's next version (previous maximum + 1, starting at 1) and returns
  // it with version and created_at filled in; frees the checkpoints of the
  // project's oldest versions (kCheckpointsFreedPerSave at most) that are not
  // among the newest kCheckpointsKept. Errors:
  // NOT_FOUND for an unknown project; INVALID_ARGUMENT for an empty method.
  absl::StatusOr<ModelVersionRecord> SaveModelVersion(
      const ModelVersionRecord& record);
  // Same, and stores `outputs` with the version in the same transaction.
  absl::StatusOr<ModelVersionRecord> SaveModelVersion(
      const ModelVersionRecord& record, const ModelVersionOutputs& outputs);

  // The outputs stored with a version: NOT_FOUND if the version does not exist, was saved
  // without outputs or had them freed.
  absl::StatusOr<ModelVersionOutputs> GetModelVersionOutputs(int64_t project_id,
                                                             int32_t version);

  // The highest version of the project, with parameters. NOT_FOUND if the
  // project has no model version (or does not exist).
  absl::StatusOr<ModelVersionRecord> LatestModelVersion(int64_t project_id);

  // One version, with parameters. NOT_FOUND if it does not exist or its checkpoint was freed.
  absl::StatusOr<ModelVersionRecord> GetModelVersion(int64_t project_id,
                                                     int32_t version);
  // One version WITHOUT parameters (`parameters` empty): its metadata only, for status calls
  // that must not read a large checkpoint; also for a version whose checkpoint was freed.
  // NOT_FOUND if it does not exist.
  absl::StatusOr<ModelVersionRecord> GetModelVersionMetadata(int64_t project_id,
                                                             int32_t version);

  // Up to `limit` versions of the project, newest first, WITHOUT parameters
  // (`parameters` is left empty: checkpoints can be large). Empty for a
  // project without versions. INVALID_ARGUMENT if limit < 1.
  absl::StatusOr<std::vector<ModelVersionRecord>> ListModelVersions(
      int64_t project_id, int limit);

  // (project id, newest version) of every project that has a version, by project id.
  absl::StatusOr<std::vector<std::pair<int64_t, int32_t>>> ListNewestVersions();

  // Every SaveModelVersion sends NOTIFY on this channel with the project's id as the payload,
  // inside its transaction: delivered once the version is committed (server replicas adopt it).
  static constexpr char kVersionsChannel[] = "verity_versions";

 private:
  absl::StatusOr<ModelVersionRecord> SaveVersion(const ModelVersionRecord& record,
                                                 const ModelVersionOutputs* outputs);
  absl::StatusOr<ModelVersionRecord> GetOneVersion(int64_t project_id, int32_t version,
                                                   bool with_parameters);
  ConnectionPool* const pool_;
  const int64_t read_chunk_bytes_;
};

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_MODEL_VERSION_STORE_H_
