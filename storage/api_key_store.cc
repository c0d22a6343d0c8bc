#include "storage/api_key_store.h"

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

std::string SelectKeysSql(absl::string_view where) {
  return absl::StrCat("SELECT key_id, name, role, projects, salt, secret_hash, created_by, ",
                      MicrosFromTimestampSql("created_at"), ", ",
                      MicrosFromTimestampSql("revoked_at"), " FROM api_keys ", where);
}

absl::StatusOr<ApiKeyRecord> KeyFromRow(const pqxx::row& row) {
  ApiKeyRecord key;
  key.key_id = row[0].as<std::string>();
  key.name = row[1].as<std::string>();
  key.role = row[2].as<std::string>();
  VERITY_ASSIGN_OR_RETURN(key.projects, ParseTextArray(row[3].c_str()));
  key.salt = pqxx::binarystring(row[4]).str();
  key.secret_hash = pqxx::binarystring(row[5]).str();
  key.created_by = row[6].as<std::string>();
  key.created_at = MicrosToTime(row[7].as<int64_t>());
  if (!row[8].is_null()) key.revoked_at = MicrosToTime(row[8].as<int64_t>());
  return key;
}

absl::Status CheckNoNul(absl::string_view field, absl::string_view value) {
  if (value.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must not contain NUL"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// The advisory lock that serialises bootstrap admin keys across servers (an arbitrary constant:
// "verity" in ASCII).
constexpr int64_t kBootstrapAdminLock = 0x766572697479;

absl::Status CheckInsertable(const ApiKeyRecord& key) {
  VERITY_RETURN_IF_ERROR(CheckNoNul("key_id", key.key_id));
  VERITY_RETURN_IF_ERROR(CheckNoNul("name", key.name));
  VERITY_RETURN_IF_ERROR(CheckNoNul("created_by", key.created_by));
  for (const std::string& p : key.projects) VERITY_RETURN_IF_ERROR(CheckNoNul("projects", p));
  return absl::OkStatus();
}

// Inserts `key` in `txn`; returns it with created_at filled in.
ApiKeyRecord InsertRow(pqxx::work& txn, const ApiKeyRecord& key) {
  const pqxx::row row = txn.exec_params1(
      absl::StrCat("INSERT INTO api_keys (key_id, name, role, projects, salt, "
                   "secret_hash, created_by) VALUES ($1, $2, $3, $4::text[], $5, $6, $7) "
                   "RETURNING ",
                   MicrosFromTimestampSql("created_at")),
      key.key_id, key.name, key.role, TextArrayLiteral(key.projects),
      pqxx::binarystring(key.salt), pqxx::binarystring(key.secret_hash), key.created_by);
  ApiKeyRecord created = key;
  created.created_at = MicrosToTime(row[0].as<int64_t>());
  created.revoked_at.reset();
  return created;
}

}  // namespace

absl::StatusOr<ApiKeyRecord> ApiKeyStore::Insert(const ApiKeyRecord& key) {
  VERITY_RETURN_IF_ERROR(CheckInsertable(key));
  return pool_->WithTransaction(
      absl::StrCat("creating API key ", key.key_id),
      [&](pqxx::work& txn) -> absl::StatusOr<ApiKeyRecord> { return InsertRow(txn, key); });
}

absl::StatusOr<std::optional<ApiKeyRecord>> ApiKeyStore::InsertIfNoAdminForEveryProject(
    const ApiKeyRecord& key) {
  VERITY_RETURN_IF_ERROR(CheckInsertable(key));
  return pool_->WithTransaction(
      absl::StrCat("creating bootstrap API key ", key.key_id),
      [&](pqxx::work& txn) -> absl::StatusOr<std::optional<ApiKeyRecord>> {
        // Held to the end of the transaction: a second server checks only after this one's
        // key is committed (or rolled back).
        txn.exec_params("SELECT pg_advisory_xact_lock($1)", kBootstrapAdminLock);
        const pqxx::result admins = txn.exec(
            "SELECT 1 FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL "
            "AND cardinality(projects) = 0 LIMIT 1");
        if (!admins.empty()) return std::optional<ApiKeyRecord>();
        return std::optional<ApiKeyRecord>(InsertRow(txn, key));
      });
}

absl::StatusOr<std::vector<ApiKeyRecord>> ApiKeyStore::List(bool include_revoked) {
  return pool_->WithTransaction(
      "listing API keys", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<ApiKeyRecord>> {
        const pqxx::result rows = txn.exec(SelectKeysSql(absl::StrCat(
            include_revoked ? "" : "WHERE revoked_at IS NULL ", "ORDER BY created_at, key_id")));
        std::vector<ApiKeyRecord> keys;
        keys.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          VERITY_ASSIGN_OR_RETURN(ApiKeyRecord key, KeyFromRow(row));
          keys.push_back(std::move(key));
        }
        return keys;
      });
}

absl::StatusOr<ApiKeyRecord> ApiKeyStore::Get(absl::string_view key_id) {
  VERITY_RETURN_IF_ERROR(CheckNoNul("key_id", key_id));
  return pool_->WithTransaction(
      "reading an API key", [&](pqxx::work& txn) -> absl::StatusOr<ApiKeyRecord> {
        const pqxx::result rows =
            txn.exec_params(SelectKeysSql("WHERE key_id = $1"), std::string(key_id));
        if (rows.empty()) return absl::NotFoundError(absl::StrCat("no API key ", key_id));
        return KeyFromRow(rows[0]);
      });
}

absl::StatusOr<ApiKeyRecord> ApiKeyStore::Revoke(absl::string_view key_id) {
  VERITY_RETURN_IF_ERROR(CheckNoNul("key_id", key_id));
  return pool_->WithTransaction(
      absl::StrCat("revoking API key ", key_id),
      [&](pqxx::work& txn) -> absl::StatusOr<ApiKeyRecord> {
        txn.exec_params(
            "UPDATE api_keys SET revoked_at = now() WHERE key_id = $1 AND revoked_at IS NULL",
            std::string(key_id));
        const pqxx::result rows =
            txn.exec_params(SelectKeysSql("WHERE key_id = $1"), std::string(key_id));
        if (rows.empty()) return absl::NotFoundError(absl::StrCat("no API key ", key_id));
        return KeyFromRow(rows[0]);
      });
}

}  // namespace storage
}  // namespace verity
