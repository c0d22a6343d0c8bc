// ApiKeyStore: the `api_keys` table (migration 8). A key's secret is never stored: rows hold a
// random salt and SHA-256(salt || secret), computed by the server (server/auth/api_keys.h).
// Rows are never deleted: revoking sets revoked_at, so the list keeps who had access and until
// when.
//
// Thread-safety: all methods are thread-safe (each call is one transaction on a pooled
// connection). The pool must outlive the store.
#ifndef VERITY_STORAGE_API_KEY_STORE_H_
#define VERITY_STORAGE_API_KEY_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/connection_pool.h"

namespace verity {
namespace storage {

struct ApiKeyRecord {
  std::string key_id;                 // Public id, unique.
  std::string name;                   // Free text.
  std::string role;                   // "reader", "writer" or "admin".
  std::vector<std::string> projects;  // Project names; empty = every project.
  std::string salt;                   // Raw bytes.
  std::string secret_hash;            // Raw bytes: SHA-256(salt || secret).
  std::string created_by;             // key_id of the creating key; "" for the bootstrap key.
  absl::Time created_at;              // Set by Insert.
  std::optional<absl::Time> revoked_at;
};

class ApiKeyStore {
 public:
  explicit ApiKeyStore(ConnectionPool* pool) : pool_(pool) {}

  // Inserts a key; created_at and revoked_at are ignored and returned filled in.
  // ALREADY_EXISTS when key_id is taken; INVALID_ARGUMENT for a role the table refuses.
  absl::StatusOr<ApiKeyRecord> Insert(const ApiKeyRecord& key);

  // Every key (or only the unrevoked ones), oldest first.
  absl::StatusOr<std::vector<ApiKeyRecord>> List(bool include_revoked);

  // Inserts `key` (an admin key for every project) unless an unrevoked one exists: nullopt
  // then. Serialised across servers with a PostgreSQL advisory lock, so that servers starting
  // at once on an empty database mint one bootstrap key between them.
  absl::StatusOr<std::optional<ApiKeyRecord>> InsertIfNoAdminForEveryProject(
      const ApiKeyRecord& key);

  // NOT_FOUND for an unknown key_id.
  absl::StatusOr<ApiKeyRecord> Get(absl::string_view key_id);

  // Sets revoked_at to now unless already set; returns the row. NOT_FOUND for an unknown id.
  absl::StatusOr<ApiKeyRecord> Revoke(absl::string_view key_id);

 private:
  ConnectionPool* const pool_;
};

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_API_KEY_STORE_H_
