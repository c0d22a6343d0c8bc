// StorageHandles: the PostgreSQL-backed stores the server uses, over one connection pool.
//
// Thread-safety: the stores are thread-safe; the struct is built once and then only read.
#ifndef VERITY_SERVER_STATE_STORAGE_HANDLES_H_
#define VERITY_SERVER_STATE_STORAGE_HANDLES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/api_key_store.h"
#include "storage/annotation_store.h"
#include "storage/connection_pool.h"
#include "storage/item_store.h"
#include "storage/lease_store.h"
#include "storage/training_job_store.h"
#include "storage/model_version_store.h"
#include "storage/project_store.h"

namespace verity::server {

struct StorageHandles {
  std::unique_ptr<storage::ConnectionPool> pool;
  std::unique_ptr<storage::ProjectStore> projects;
  std::unique_ptr<storage::ItemStore> items;
  std::unique_ptr<storage::AnnotationStore> annotations;
  std::unique_ptr<storage::ModelVersionStore> versions;
  std::unique_ptr<storage::LeaseStore> leases;
  std::unique_ptr<storage::TrainingJobStore> jobs;
  std::unique_ptr<storage::ApiKeyStore> api_keys;

  // Connects to `postgres_url` with a pool of `pool_size` connections, every database wait
  // bounded by `db_timeout` (storage::ConnectionPool::Options::db_timeout), and applies the
  // schema migrations. UNAVAILABLE if PostgreSQL cannot be reached.
  static absl::StatusOr<std::unique_ptr<StorageHandles>> Open(
      const std::string& postgres_url, int pool_size,
      absl::Duration db_timeout = storage::ConnectionPool::Options().db_timeout);
};

}  // namespace verity::server

#endif  // VERITY_SERVER_STATE_STORAGE_HANDLES_H_
