#include "server/state/storage_handles.h"

#include "storage/schema_migrations.h"

namespace verity::server {

absl::StatusOr<std::unique_ptr<StorageHandles>> StorageHandles::Open(
    const std::string& postgres_url, int pool_size, absl::Duration db_timeout) {
  storage::ConnectionPool::Options pool_options;
  pool_options.url = postgres_url;
  pool_options.size = pool_size;
  pool_options.db_timeout = db_timeout;
  auto pool = storage::ConnectionPool::Create(pool_options);
  if (!pool.ok()) return pool.status();
  auto handles = std::make_unique<StorageHandles>();
  handles->pool = std::move(*pool);
  if (auto applied = storage::ApplySchemaMigrations(*handles->pool); !applied.ok()) {
    return applied.status();
  }
  handles->projects = std::make_unique<storage::ProjectStore>(handles->pool.get());
  handles->items = std::make_unique<storage::ItemStore>(handles->pool.get());
  handles->annotations = std::make_unique<storage::AnnotationStore>(handles->pool.get());
  handles->versions = std::make_unique<storage::ModelVersionStore>(handles->pool.get());
  handles->leases = std::make_unique<storage::LeaseStore>(handles->pool.get());
  handles->jobs = std::make_unique<storage::TrainingJobStore>(handles->pool.get());
  handles->api_keys = std::make_unique<storage::ApiKeyStore>(handles->pool.get());
  return handles;
}

}  // namespace verity::server
