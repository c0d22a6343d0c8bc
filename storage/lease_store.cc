#include "storage/lease_store.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "pqxx/pqxx"
#include "storage/sql_values.h"

namespace verity::storage {

absl::Status LeaseStore::UpsertLeases(int64_t project_id, absl::Span<const LeaseRecord> leases) {
  if (leases.empty()) return absl::OkStatus();
  std::vector<int32_t> items, annotators;
  std::vector<int64_t> expiry_micros;
  for (const LeaseRecord& l : leases) {
    items.push_back(l.item_index);
    annotators.push_back(l.annotator_index);
    expiry_micros.push_back(absl::ToUnixMicros(l.expires_at));
  }
  return pool_->RunInTransaction(
      absl::StrCat("writing assignment leases of project ", project_id), [&](pqxx::work& txn) {
        txn.exec0("SET LOCAL synchronous_commit = off");
        txn.exec_params0(
            absl::StrCat("INSERT INTO assignment_leases "
                         "  (project_id, item_index, annotator_index, expires_at) "
                         "SELECT $1, u.i, u.a, ", TimestampFromMicrosSql("u.e"),
                         " FROM unnest($2::integer[], $3::integer[], $4::bigint[]) AS u(i, a, e) "
                         "ON CONFLICT (project_id, item_index, annotator_index) "
                         "DO UPDATE SET expires_at = EXCLUDED.expires_at"),
            project_id, Int32ArrayLiteral(items), Int32ArrayLiteral(annotators),
            Int64ArrayLiteral(expiry_micros));
        return absl::OkStatus();
      });
}

absl::StatusOr<std::vector<LeaseRecord>> LeaseStore::LoadOpenLeases(int64_t project_id,
                                                                    absl::Time now) {
  const int64_t now_micros = absl::ToUnixMicros(now);
  return pool_->WithTransaction(
      absl::StrCat("loading assignment leases of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<LeaseRecord>> {
        txn.exec_params0(
            absl::StrCat("DELETE FROM assignment_leases l WHERE l.project_id = $1 AND "
                         "(l.expires_at <= ", TimestampFromMicrosSql("$2::bigint"),
                         " OR EXISTS (SELECT 1 FROM annotations a WHERE a.project_id = $1 "
                         "AND a.item_index = l.item_index "
                         "AND a.annotator_index = l.annotator_index))"),
            project_id, now_micros);
        const pqxx::result rows = txn.exec_params(
            absl::StrCat("SELECT item_index, annotator_index, ",
                         MicrosFromTimestampSql("expires_at"),
                         " FROM assignment_leases WHERE project_id = $1"),
            project_id);
        std::vector<LeaseRecord> leases;
        leases.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          leases.push_back({row[0].as<int32_t>(), row[1].as<int32_t>(),
                            absl::FromUnixMicros(row[2].as<int64_t>())});
        }
        return leases;
      });
}

}  // namespace verity::storage
