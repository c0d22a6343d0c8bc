#include "storage/lease_store.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pqxx/pqxx"
#include "storage/sql_values.h"

namespace verity::storage {

namespace {

// The leases as three array literals, for unnest($2::integer[], $3::integer[], $4::bigint[]).
struct LeaseColumns {
  std::string items, annotators, expiry_micros;
};

// One row per (item, annotator), the last entry of each pair: INSERT ... ON CONFLICT DO UPDATE
// refuses to touch a row twice in one statement.
LeaseColumns ToColumns(absl::Span<const LeaseRecord> leases) {
  absl::flat_hash_map<std::pair<int32_t, int32_t>, size_t> last;
  for (size_t n = 0; n < leases.size(); ++n) {
    last[{leases[n].item_index, leases[n].annotator_index}] = n;
  }
  std::vector<int32_t> items, annotators;
  std::vector<int64_t> expiry_micros;
  for (size_t n = 0; n < leases.size(); ++n) {
    const LeaseRecord& l = leases[n];
    if (last[{l.item_index, l.annotator_index}] != n) continue;
    items.push_back(l.item_index);
    annotators.push_back(l.annotator_index);
    expiry_micros.push_back(absl::ToUnixMicros(l.expires_at));
  }
  return {Int32ArrayLiteral(items), Int32ArrayLiteral(annotators),
          Int64ArrayLiteral(expiry_micros)};
}

}  // namespace

absl::Status LeaseStore::UpsertLeases(int64_t project_id, absl::Span<const LeaseRecord> leases) {
  if (leases.empty()) return absl::OkStatus();
  const LeaseColumns columns = ToColumns(leases);
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
            project_id, columns.items, columns.annotators, columns.expiry_micros);
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

namespace {

// The open leases of `project_id` claimed after `after_claim`, and the newest claim of the rows
// still stored (the ones filtered out included; `after_claim` covers claims whose rows
// LoadOpenLeases has since deleted; the index answers it from its last entry).
LeaseStore::Claims ClaimsSince(pqxx::work& txn, int64_t project_id, int64_t after_claim,
                               int64_t now_micros) {
  LeaseStore::Claims claims;
  claims.newest = std::max(
      after_claim,
      txn.exec_params1("SELECT COALESCE(max(claim_seq), 0) FROM assignment_leases "
                       "WHERE project_id = $1",
                       project_id)[0]
          .as<int64_t>());
  for (const pqxx::row& row : txn.exec_params(
           absl::StrCat("SELECT l.item_index, l.annotator_index, ",
                        MicrosFromTimestampSql("l.expires_at"),
                        " FROM assignment_leases l "
                        "WHERE l.project_id = $1 AND l.claim_seq > $2 AND l.expires_at > ",
                        TimestampFromMicrosSql("$3::bigint"),
                        " AND NOT EXISTS (SELECT 1 FROM annotations a "
                        "  WHERE a.project_id = $1 AND a.item_index = l.item_index "
                        "  AND a.annotator_index = l.annotator_index)"),
           project_id, after_claim, now_micros)) {
    claims.open.push_back({row[0].as<int32_t>(), row[1].as<int32_t>(),
                           absl::FromUnixMicros(row[2].as<int64_t>())});
  }
  return claims;
}

}  // namespace

absl::StatusOr<LeaseStore::Claims> LeaseStore::ReadClaimsSince(int64_t project_id,
                                                               int64_t after_claim,
                                                               absl::Time now) {
  return pool_->WithTransaction(
      absl::StrCat("reading assignment lease claims of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<Claims> {
        // The rows are read after the newest claim: they hold every claim up to it (a claim
        // committed in between adds a lease the next read finds again).
        return ClaimsSince(txn, project_id, after_claim, absl::ToUnixMicros(now));
      });
}

absl::StatusOr<int64_t> LeaseStore::ClaimLeases(int64_t project_id, int64_t after_claim,
                                                 absl::Time now, const ChooseLeases& choose) {
  const int64_t now_micros = absl::ToUnixMicros(now);
  const int64_t lock_key = static_cast<int64_t>((static_cast<uint64_t>(kClaimKeySpace) << 32) |
                                                (static_cast<uint64_t>(project_id) & 0xffffffffu));
  return pool_->WithTransaction(
      absl::StrCat("claiming assignment leases of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
        txn.exec0("SET LOCAL synchronous_commit = off");
        txn.exec_params("SELECT pg_advisory_xact_lock($1)", lock_key);
        const Claims others = ClaimsSince(txn, project_id, after_claim, now_micros);
        const int64_t newest = others.newest;
        const std::vector<LeaseRecord> chosen = choose(others.open);
        if (chosen.empty()) return newest;
        const LeaseColumns columns = ToColumns(chosen);
        const pqxx::row written = txn.exec_params1(
            absl::StrCat("WITH claimed AS ("
                         "  INSERT INTO assignment_leases "
                         "    (project_id, item_index, annotator_index, expires_at, claim_seq) "
                         "  SELECT $1, u.i, u.a, ", TimestampFromMicrosSql("u.e"),
                         "    , nextval('assignment_lease_claim_seq') "
                         "  FROM unnest($2::integer[], $3::integer[], $4::bigint[]) AS u(i, a, e) "
                         "  ON CONFLICT (project_id, item_index, annotator_index) "
                         "  DO UPDATE SET expires_at = EXCLUDED.expires_at, "
                         "                claim_seq = EXCLUDED.claim_seq "
                         "  RETURNING claim_seq) "
                         "SELECT COALESCE(max(claim_seq), 0) FROM claimed"),
            project_id, columns.items, columns.annotators, columns.expiry_micros);
        return std::max(newest, written[0].as<int64_t>());
      });
}

}  // namespace verity::storage
