#include "storage/model_version_store.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pqxx/binarystring"
#include "pqxx/result"
#include "storage/sql_values.h"

namespace verity {
namespace storage {
namespace {

// Concurrent savers that both computed the same next version retry; each
// retry sees the competitor's committed row, so this bounds pathological
// contention only.
constexpr int kMaxVersionAttempts = 20;
// A version whose blobs reach this size is saved on a connection that is closed afterwards:
// libpq keeps its send buffer at the largest message sent (64 MiB for a 5M-label ds model),
// and a pooled connection would hold that memory for good.
constexpr size_t kCloseConnectionAfterBytes = size_t{8} << 20;

// The metadata columns of model_versions (VersionFromRow), then checkpoint_freed (column
// kFreedColumn) and scratch_num_labels (kScratchColumn, also VersionFromRow's); parameters
// come as '' (ReadByteaInChunks reads them).
constexpr int kFreedColumn = 10;
constexpr int kScratchColumn = 11;
std::string SelectVersionsSql(absl::string_view rest) {
  return absl::StrCat(
      "SELECT project_id, version, method, ''::bytea",
      ", watermark, log_likelihood, iterations, duration_ms, num_labels, ",
      MicrosFromTimestampSql("created_at"),
      ", checkpoint_freed, scratch_num_labels FROM model_versions ", rest);
}

absl::Status CheckpointFreedError(int64_t project_id, int32_t version) {
  return absl::NotFoundError(absl::StrCat(
      "model version ", version, " of project ", project_id,
      ": its checkpoint was freed (only the newest ", ModelVersionStore::kCheckpointsKept,
      " versions of a project keep theirs)"));
}

// The bytea `column` of the row of `table` with (project_id, version), read `chunk_bytes` at a
// time into one string sized once. NOT_FOUND if there is no such row. A model_versions row
// whose checkpoint is freed counts as none, also when it is freed while read (each statement
// sees the commits before it).
absl::StatusOr<std::string> ReadByteaInChunks(pqxx::work& txn, absl::string_view table,
                                              absl::string_view column, int64_t project_id,
                                              int32_t version, int64_t chunk_bytes) {
  const std::string where =
      absl::StrCat(" WHERE project_id = $1 AND version = $2",
                   table == "model_versions" ? " AND NOT checkpoint_freed" : "");
  const pqxx::result length = txn.exec_params(
      absl::StrCat("SELECT octet_length(", column, ") FROM ", table, where), project_id,
      version);
  if (length.empty()) {
    return absl::NotFoundError(absl::StrCat("model version ", version, " of project ",
                                            project_id, " not found in ", table));
  }
  const int64_t total = length[0][0].as<int64_t>();
  std::string bytes;
  bytes.reserve(static_cast<size_t>(total));
  for (int64_t offset = 0; offset < total; offset += chunk_bytes) {
    // substring counts from 1.
    const pqxx::result chunk = txn.exec_params(
        absl::StrCat("SELECT substring(", column, " FROM $3 FOR $4) FROM ", table, where),
        project_id, version, offset + 1, chunk_bytes);
    if (chunk.empty()) {
      return absl::AbortedError(absl::StrCat("model version ", version, " of project ",
                                             project_id, " disappeared while read"));
    }
    const pqxx::binarystring part(chunk[0][0]);
    bytes.append(part.get(), part.size());
  }
  if (static_cast<int64_t>(bytes.size()) != total) {
    return absl::DataLossError(absl::StrCat("model version ", version, " of project ",
                                            project_id, ": read ", bytes.size(), " of ", total,
                                            " bytes of ", column));
  }
  return bytes;
}

ModelVersionRecord VersionFromRow(const pqxx::row& row) {
  ModelVersionRecord r;
  r.project_id = row[0].as<int64_t>();
  r.version = row[1].as<int32_t>();
  r.method = row[2].as<std::string>();
  r.parameters = pqxx::binarystring(row[3]).str();
  r.watermark = row[4].as<int64_t>();
  r.log_likelihood = row[5].as<double>();
  r.iterations = row[6].as<int32_t>();
  r.duration_ms = row[7].as<double>();
  r.num_labels = row[8].as<int64_t>();
  r.created_at = MicrosToTime(row[9].as<int64_t>());
  r.scratch_num_labels = row[kScratchColumn].as<int64_t>();
  return r;
}

}  // namespace

absl::StatusOr<ModelVersionRecord> ModelVersionStore::SaveModelVersion(
    const ModelVersionRecord& record) {
  return SaveVersion(record, nullptr);
}

absl::StatusOr<ModelVersionRecord> ModelVersionStore::SaveModelVersion(
    const ModelVersionRecord& record, const ModelVersionOutputs& outputs) {
  return SaveVersion(record, &outputs);
}

absl::StatusOr<ModelVersionOutputs> ModelVersionStore::GetModelVersionOutputs(
    int64_t project_id, int32_t version) {
  return pool_->WithTransaction(
      "reading model version outputs",
      [&](pqxx::work& txn) -> absl::StatusOr<ModelVersionOutputs> {
        absl::StatusOr<std::string> posteriors = ReadByteaInChunks(
            txn, "model_version_outputs", "posteriors", project_id, version, read_chunk_bytes_);
        if (absl::IsNotFound(posteriors.status())) {
          return absl::NotFoundError(absl::StrCat(
              "model version ", version, " of project ", project_id,
              " has no stored outputs (saved without them, or freed: only the newest ",
              kCheckpointsKept, " versions of a project keep theirs)"));
        }
        if (!posteriors.ok()) return posteriors.status();
        absl::StatusOr<std::string> profiles =
            ReadByteaInChunks(txn, "model_version_outputs", "annotator_profiles", project_id,
                              version, read_chunk_bytes_);
        if (!profiles.ok()) return profiles.status();
        ModelVersionOutputs outputs;
        outputs.posteriors = *std::move(posteriors);
        outputs.annotator_profiles = *std::move(profiles);
        return outputs;
      });
}

absl::StatusOr<ModelVersionRecord> ModelVersionStore::SaveVersion(
    const ModelVersionRecord& record, const ModelVersionOutputs* outputs) {
  if (record.method.empty() || record.method.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        "model version method must be non-empty and contain no NUL");
  }
  const pqxx::binarystring parameters(record.parameters.data(),
                                      record.parameters.size());
  const size_t bytes = record.parameters.size() +
                       (outputs == nullptr ? 0
                                           : outputs->posteriors.size() +
                                                 outputs->annotator_profiles.size());
  const ConnectionPool::After after = bytes >= kCloseConnectionAfterBytes
                                          ? ConnectionPool::After::kClose
                                          : ConnectionPool::After::kReturnToPool;
  return pool_->WithTransaction(
      absl::StrCat("saving a model version of project ", record.project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<ModelVersionRecord> {
        // KEY SHARE: the project cannot disappear, yet ingest (which holds
        // NO KEY UPDATE on the row) is not blocked by a large upload.
        if (txn.exec_params("SELECT 1 FROM projects WHERE project_id = $1 "
                            "FOR KEY SHARE",
                            record.project_id)
                .empty()) {
          return absl::NotFoundError(
              absl::StrCat("project ", record.project_id, " not found"));
        }
        for (int attempt = 0; attempt < kMaxVersionAttempts; ++attempt) {
          // ON CONFLICT DO NOTHING waits for a concurrent saver of the same
          // version and yields no row if it committed; the next statement's
          // snapshot then sees its version.
          const pqxx::result rows = txn.exec_params(
              absl::StrCat(
                  "INSERT INTO model_versions (project_id, version, method, "
                  "    parameters, watermark, log_likelihood, iterations, "
                  "    duration_ms, num_labels, scratch_num_labels) "
                  "SELECT $1, COALESCE(max(version), 0) + 1, $2, $3, $4, $5, "
                  "       $6, $7, $8, $9 "
                  "FROM model_versions WHERE project_id = $1 "
                  "ON CONFLICT (project_id, version) DO NOTHING "
                  "RETURNING version, ",
                  MicrosFromTimestampSql("created_at")),
              record.project_id, record.method, parameters, record.watermark,
              record.log_likelihood, record.iterations, record.duration_ms,
              record.num_labels, record.scratch_num_labels);
          if (rows.empty()) continue;
          ModelVersionRecord saved = record;
          saved.version = rows[0][0].as<int32_t>();
          if (outputs != nullptr) {
            txn.exec_params(
                "INSERT INTO model_version_outputs (project_id, version, posteriors, "
                "annotator_profiles) VALUES ($1, $2, $3, $4)",
                record.project_id, saved.version,
                pqxx::binarystring(outputs->posteriors.data(), outputs->posteriors.size()),
                pqxx::binarystring(outputs->annotator_profiles.data(),
                                   outputs->annotator_profiles.size()));
          }
          saved.created_at = MicrosToTime(rows[0][1].as<int64_t>());
          if (record.completes_job.has_value()) {
            const pqxx::result done = txn.exec_params(
                "UPDATE training_jobs SET state = 'done', version = $3, finished_at = now(), "
                "    lease_expires_at = NULL "
                "WHERE job_id = $1 AND worker = $2 AND state = 'running' AND project_id = $4 "
                "RETURNING 1",
                record.completes_job->job_id, record.completes_job->worker, saved.version,
                record.project_id);
            if (done.empty()) {
              // Rolls the version back with the transaction.
              return absl::AbortedError(absl::StrCat(
                  "training job ", record.completes_job->job_id, " is no longer owned by ",
                  record.completes_job->worker, "; its version was not stored"));
            }
          }
          // The checkpoints only the newest kCheckpointsKept keep, the oldest
          // kCheckpointsFreedPerSave at a time. Savers of a project are serialised by the
          // version's insert, so no two free the same rows at once.
          const int32_t newest_freed = saved.version - kCheckpointsKept;
          if (newest_freed >= 1) {
            txn.exec_params(
                "WITH freed AS ("
                "  UPDATE model_versions SET parameters = ''::bytea, checkpoint_freed = true "
                "  WHERE project_id = $1 AND version IN ("
                "    SELECT version FROM model_versions "
                "    WHERE project_id = $1 AND version <= $2 AND NOT checkpoint_freed "
                "    ORDER BY version LIMIT $3) "
                "  RETURNING version) "
                "DELETE FROM model_version_outputs o USING freed f "
                "WHERE o.project_id = $1 AND o.version = f.version",
                record.project_id, newest_freed, kCheckpointsFreedPerSave);
          }
          // Delivered to the listeners (other server replicas) only if this commits.
          txn.exec_params("SELECT pg_notify($1, $2)", kVersionsChannel,
                          std::to_string(record.project_id));
          return saved;
        }
        return absl::AbortedError(absl::StrCat(
            "could not allocate a model version number for project ",
            record.project_id, " after ", kMaxVersionAttempts, " attempts"));
      },
      after);
}

absl::StatusOr<ModelVersionRecord> ModelVersionStore::LatestModelVersion(
    int64_t project_id) {
  return pool_->WithTransaction(
      "reading the latest model version",
      [&](pqxx::work& txn) -> absl::StatusOr<ModelVersionRecord> {
        const pqxx::result rows = txn.exec_params(
            SelectVersionsSql("WHERE project_id = $1 "
                              "ORDER BY version DESC LIMIT 1"),
            project_id);
        if (rows.empty()) {
          return absl::NotFoundError(absl::StrCat(
              "project ", project_id, " has no model version"));
        }
        ModelVersionRecord record = VersionFromRow(rows[0]);
        absl::StatusOr<std::string> parameters =
            ReadByteaInChunks(txn, "model_versions", "parameters", project_id, record.version,
                              read_chunk_bytes_);
        if (!parameters.ok()) return parameters.status();
        record.parameters = *std::move(parameters);
        return record;
      });
}

absl::StatusOr<ModelVersionRecord> ModelVersionStore::GetModelVersion(
    int64_t project_id, int32_t version) {
  return GetOneVersion(project_id, version, /*with_parameters=*/true);
}

absl::StatusOr<ModelVersionRecord> ModelVersionStore::GetModelVersionMetadata(
    int64_t project_id, int32_t version) {
  return GetOneVersion(project_id, version, /*with_parameters=*/false);
}

absl::StatusOr<ModelVersionRecord> ModelVersionStore::GetOneVersion(
    int64_t project_id, int32_t version, bool with_parameters) {
  return pool_->WithTransaction(
      "reading a model version",
      [&](pqxx::work& txn) -> absl::StatusOr<ModelVersionRecord> {
        const pqxx::result rows = txn.exec_params(
            SelectVersionsSql("WHERE project_id = $1 AND version = $2"),
            project_id, version);
        if (rows.empty()) {
          return absl::NotFoundError(absl::StrCat(
              "model version ", version, " of project ", project_id,
              " not found"));
        }
        ModelVersionRecord record = VersionFromRow(rows[0]);
        if (with_parameters) {
          if (rows[0][kFreedColumn].as<bool>()) return CheckpointFreedError(project_id, version);
          absl::StatusOr<std::string> parameters = ReadByteaInChunks(
              txn, "model_versions", "parameters", project_id, version, read_chunk_bytes_);
          if (absl::IsNotFound(parameters.status())) {
            return CheckpointFreedError(project_id, version);  // freed since the select
          }
          if (!parameters.ok()) return parameters.status();
          record.parameters = *std::move(parameters);
        }
        return record;
      });
}

absl::StatusOr<std::vector<ModelVersionRecord>>
ModelVersionStore::ListModelVersions(int64_t project_id, int limit) {
  if (limit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be at least 1, got ", limit));
  }
  return pool_->WithTransaction(
      "listing model versions",
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<ModelVersionRecord>> {
        std::vector<ModelVersionRecord> versions;
        for (const pqxx::row& row : txn.exec_params(
                 SelectVersionsSql("WHERE project_id = $1 "
                                   "ORDER BY version DESC LIMIT $2"),
                 project_id, limit)) {
          versions.push_back(VersionFromRow(row));
        }
        return versions;
      });
}

absl::StatusOr<std::vector<std::pair<int64_t, int32_t>>>
ModelVersionStore::ListNewestVersions() {
  return pool_->WithTransaction(
      "listing the projects' newest model versions",
      [&](pqxx::work& txn)
          -> absl::StatusOr<std::vector<std::pair<int64_t, int32_t>>> {
        std::vector<std::pair<int64_t, int32_t>> newest;
        // One index probe per project, however many versions each has.
        for (const pqxx::row& row : txn.exec(
                 "SELECT p.project_id, "
                 "       (SELECT max(v.version) FROM model_versions v "
                 "        WHERE v.project_id = p.project_id) "
                 "FROM projects p ORDER BY p.project_id")) {
          if (row[1].is_null()) continue;
          newest.emplace_back(row[0].as<int64_t>(), row[1].as<int32_t>());
        }
        return newest;
      });
}

}  // namespace storage
}  // namespace verity
