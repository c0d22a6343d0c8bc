#include "storage/annotation_store.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "pqxx/result"
#include "storage/cursor_reader.h"
#include "storage/entity_index.h"
#include "storage/sql_values.h"

namespace verity {
namespace storage {
namespace {

constexpr int kLoadBatchRows = 100000;

struct PairKey {
  int64_t project_id;
  int32_t item_index;
  int32_t annotator_index;

  friend bool operator==(const PairKey& a, const PairKey& b) {
    return a.project_id == b.project_id && a.item_index == b.item_index &&
           a.annotator_index == b.annotator_index;
  }
  friend bool operator<(const PairKey& a, const PairKey& b) {
    return std::tie(a.project_id, a.item_index, a.annotator_index) <
           std::tie(b.project_id, b.item_index, b.annotator_index);
  }
  template <typename H>
  friend H AbslHashValue(H h, const PairKey& k) {
    return H::combine(std::move(h), k.project_id, k.item_index,
                      k.annotator_index);
  }
};

// The state of one (project, item, annotator) pair while a call is applied.
struct PairState {
  bool in_database = false;  // A live row existed before this transaction.
  bool changed = false;      // This call wrote a new version.
  int32_t label = -1;        // -1: no live label yet.
  int64_t seq = 0;
  int32_t revision = 0;
  std::optional<int64_t> client_us;
  std::optional<int64_t> committed_us;  // nullopt: committed by this call.
};

// Live rows of the given pairs. The project rows are locked, so nobody else
// can change them before this transaction ends. The LATERAL ... LIMIT 1 keeps
// the subquery from being flattened into a join, so each pair is one primary
// key probe whatever the (possibly stale) statistics say: a hash join would
// scan the whole table.
constexpr char kReadLiveSql[] =
    "SELECT t.project_id, t.item_index, t.annotator_index, a.label, a.seq, "
    "       a.revision, "
    "       (extract(epoch from a.client_time) * 1000000)::bigint, "
    "       (extract(epoch from a.committed_at) * 1000000)::bigint "
    "FROM unnest($1::bigint[], $2::integer[], $3::integer[]) "
    "  AS t(project_id, item_index, annotator_index) "
    "CROSS JOIN LATERAL ("
    "  SELECT label, seq, revision, client_time, committed_at "
    "  FROM annotations "
    "  WHERE project_id = t.project_id AND item_index = t.item_index "
    "    AND annotator_index = t.annotator_index "
    "  LIMIT 1) AS a";

// Column arrays for one multi-row statement.
struct Rows {
  std::vector<int64_t> project_id;
  std::vector<int32_t> item_index, annotator_index, label, revision;
  std::vector<int64_t> seq;
  std::vector<std::optional<int64_t>> client_us, committed_us;

  void Add(const PairKey& key, const PairState& state) {
    project_id.push_back(key.project_id);
    item_index.push_back(key.item_index);
    annotator_index.push_back(key.annotator_index);
    label.push_back(state.label);
    revision.push_back(state.revision);
    seq.push_back(state.seq);
    client_us.push_back(state.client_us);
    committed_us.push_back(state.committed_us);
  }
  bool empty() const { return project_id.empty(); }
};

// Unnests Rows into (project_id, item_index, annotator_index, label, seq,
// revision, client_time, committed_at); committed_at NULL becomes now().
std::string UnnestRowsSql() {
  return absl::StrCat(
      "SELECT r.project_id, r.item_index, r.annotator_index, r.label, r.seq, "
      "       r.revision, ",
      TimestampFromMicrosSql("r.client_us"), ", COALESCE(",
      TimestampFromMicrosSql("r.committed_us"),
      ", now()) "
      "FROM unnest($1::bigint[], $2::integer[], $3::integer[], $4::integer[], "
      "            $5::bigint[], $6::integer[], $7::bigint[], $8::bigint[]) "
      "  AS r(project_id, item_index, annotator_index, label, seq, revision, "
      "       client_us, committed_us)");
}

pqxx::result ExecWithRows(pqxx::work& txn, const std::string& sql,
                          const Rows& rows) {
  return txn.exec_params(
      sql, Int64ArrayLiteral(rows.project_id),
      Int32ArrayLiteral(rows.item_index), Int32ArrayLiteral(rows.annotator_index),
      Int32ArrayLiteral(rows.label), Int64ArrayLiteral(rows.seq),
      Int32ArrayLiteral(rows.revision), Int64ArrayLiteral(rows.client_us),
      Int64ArrayLiteral(rows.committed_us));
}

std::optional<int64_t> OptionalMicros(const pqxx::field& field) {
  if (field.is_null()) return std::nullopt;
  return field.as<int64_t>();
}

absl::Status CheckProjectExists(pqxx::work& txn, int64_t project_id) {
  if (txn.exec_params("SELECT 1 FROM projects WHERE project_id = $1",
                      project_id)
          .empty()) {
    return absl::NotFoundError(
        absl::StrCat("project ", project_id, " not found"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<WriteResult>> AnnotationStore::CommitAnnotations(
    absl::Span<const AnnotationWrite> writes) {
  if (writes.empty()) return std::vector<WriteResult>();
  std::vector<int64_t> project_ids;
  for (size_t i = 0; i < writes.size(); ++i) {
    const AnnotationWrite& w = writes[i];
    VERITY_RETURN_IF_ERROR(ValidateExternalId(
        w.item_id, absl::StrCat("annotation #", i, ": item_id")));
    VERITY_RETURN_IF_ERROR(ValidateExternalId(
        w.annotator_id, absl::StrCat("annotation #", i, ": annotator_id")));
    if (w.label < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "annotation #", i, ": label ", w.label, " is negative"));
    }
    project_ids.push_back(w.project_id);
  }
  std::sort(project_ids.begin(), project_ids.end());
  project_ids.erase(std::unique(project_ids.begin(), project_ids.end()),
                    project_ids.end());

  return pool_->WithTransaction(
      "committing annotations",
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<WriteResult>> {
        // 1. Lock the projects: serialises writers per project, makes seq
        //    order commit order, and guards index allocation.
        VERITY_ASSIGN_OR_RETURN(std::vector<LockedProject> locked,
                                LockProjects(txn, project_ids));
        for (size_t i = 0; i < writes.size(); ++i) {
          const LockedProject& p = *std::lower_bound(
              locked.begin(), locked.end(), writes[i].project_id,
              [](const LockedProject& lp, int64_t id) {
                return lp.project_id < id;
              });
          if (writes[i].label >= p.num_classes) {
            return absl::InvalidArgumentError(absl::StrCat(
                "annotation #", i, ": label ", writes[i].label,
                " is out of range: project ", p.project_id, " has ",
                p.num_classes, " classes"));
          }
        }

        // 2. External ids -> dense indices, creating new entities.
        std::vector<PairKey> keys(writes.size());
        for (const LockedProject& p : locked) {
          std::vector<size_t> positions;
          std::vector<absl::string_view> item_ids, annotator_ids;
          for (size_t i = 0; i < writes.size(); ++i) {
            if (writes[i].project_id != p.project_id) continue;
            positions.push_back(i);
            item_ids.push_back(writes[i].item_id);
            annotator_ids.push_back(writes[i].annotator_id);
          }
          VERITY_ASSIGN_OR_RETURN(
              std::vector<int32_t> item_indices,
              ResolveOrCreateIndices(txn, p.project_id, EntityKind::kItem,
                                     item_ids));
          VERITY_ASSIGN_OR_RETURN(
              std::vector<int32_t> annotator_indices,
              ResolveOrCreateIndices(txn, p.project_id, EntityKind::kAnnotator,
                                     annotator_ids));
          for (size_t j = 0; j < positions.size(); ++j) {
            keys[positions[j]] = {p.project_id, item_indices[j],
                                  annotator_indices[j]};
          }
        }

        // 3. Read the live rows of the pairs (sorted for index locality).
        std::vector<PairKey> distinct(keys);
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()),
                       distinct.end());
        absl::flat_hash_map<PairKey, PairState> pairs;
        pairs.reserve(distinct.size());
        {
          std::vector<int64_t> p;
          std::vector<int32_t> i, a;
          p.reserve(distinct.size());
          i.reserve(distinct.size());
          a.reserve(distinct.size());
          for (const PairKey& k : distinct) {
            pairs.emplace(k, PairState());
            p.push_back(k.project_id);
            i.push_back(k.item_index);
            a.push_back(k.annotator_index);
          }
          for (const pqxx::row& row :
               txn.exec_params(kReadLiveSql, Int64ArrayLiteral(p),
                               Int32ArrayLiteral(i), Int32ArrayLiteral(a))) {
            const PairKey k{row[0].as<int64_t>(), row[1].as<int32_t>(),
                            row[2].as<int32_t>()};
            PairState& state = pairs.at(k);
            state.in_database = true;
            state.label = row[3].as<int32_t>();
            state.seq = row[4].as<int64_t>();
            state.revision = row[5].as<int32_t>();
            state.client_us = OptionalMicros(row[6]);
            state.committed_us = OptionalMicros(row[7]);
          }
        }

        // 4. Outcomes, in input order: a write repeating its pair's current
        //    label is a duplicate; every other write makes a new version.
        std::vector<WriteResult> results(writes.size());
        size_t new_versions = 0;
        {
          absl::flat_hash_map<PairKey, int32_t> label_now;
          label_now.reserve(pairs.size());
          for (const auto& [k, state] : pairs) label_now.emplace(k, state.label);
          for (size_t i = 0; i < writes.size(); ++i) {
            int32_t& current = label_now.at(keys[i]);
            results[i].item_index = keys[i].item_index;
            results[i].annotator_index = keys[i].annotator_index;
            if (current == writes[i].label) {
              results[i].outcome = WriteOutcome::kDuplicate;
            } else {
              results[i].outcome = current < 0 ? WriteOutcome::kAccepted
                                               : WriteOutcome::kRevised;
              current = writes[i].label;
              ++new_versions;
            }
          }
        }
        if (new_versions == 0) {
          for (size_t i = 0; i < writes.size(); ++i) {
            results[i].seq = pairs.at(keys[i]).seq;
          }
          return results;
        }

        // 5. Draw the seqs, under the project locks, in input order.
        std::vector<int64_t> seqs;
        seqs.reserve(new_versions);
        for (const pqxx::row& row : txn.exec_params(
                 "SELECT nextval('annotation_seq') "
                 "FROM generate_series(1, $1::integer)",
                 static_cast<int64_t>(new_versions))) {
          seqs.push_back(row[0].as<int64_t>());
        }
        std::sort(seqs.begin(), seqs.end());

        // 6. Replay with seqs: superseded versions go to the history.
        Rows history;
        size_t next_seq = 0;
        for (size_t i = 0; i < writes.size(); ++i) {
          PairState& state = pairs.at(keys[i]);
          if (results[i].outcome != WriteOutcome::kDuplicate) {
            if (results[i].outcome == WriteOutcome::kRevised) {
              history.Add(keys[i], state);
              ++state.revision;
            }
            state.label = writes[i].label;
            state.seq = seqs[next_seq++];
            state.client_us =
                writes[i].client_time.has_value()
                    ? std::make_optional(TimeToMicros(*writes[i].client_time))
                    : std::nullopt;
            state.committed_us = std::nullopt;
            state.changed = true;
          }
          results[i].seq = state.seq;
        }

        // 7. Write: new pairs, changed pairs, history.
        Rows inserts, updates;
        for (const PairKey& k : distinct) {
          const PairState& state = pairs.at(k);
          if (!state.changed) continue;
          (state.in_database ? updates : inserts).Add(k, state);
        }
        const std::string unnest_rows = UnnestRowsSql();
        if (!inserts.empty()) {
          ExecWithRows(txn,
                       absl::StrCat("INSERT INTO annotations (project_id, "
                                    "item_index, annotator_index, label, seq, "
                                    "revision, client_time, committed_at) ",
                                    unnest_rows),
                       inserts);
        }
        if (!updates.empty()) {
          ExecWithRows(
              txn,
              absl::StrCat(
                  "UPDATE annotations AS a SET label = u.label, seq = u.seq, "
                  "  revision = u.revision, client_time = u.client_time, "
                  "  committed_at = u.committed_at "
                  "FROM (",
                  unnest_rows,
                  ") AS u(project_id, item_index, annotator_index, label, seq, "
                  "       revision, client_time, committed_at) "
                  "WHERE a.project_id = u.project_id "
                  "  AND a.item_index = u.item_index "
                  "  AND a.annotator_index = u.annotator_index"),
              updates);
        }
        if (!history.empty()) {
          ExecWithRows(txn,
                       absl::StrCat("INSERT INTO annotation_history "
                                    "(project_id, item_index, annotator_index, "
                                    "label, seq, revision, client_time, "
                                    "committed_at) ",
                                    unnest_rows),
                       history);
        }
        return results;
      });
}

absl::StatusOr<std::vector<LiveAnnotation>>
AnnotationStore::LoadLiveAnnotations(int64_t project_id, int64_t after_seq) {
  return pool_->WithTransaction(
      absl::StrCat("loading annotations of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<LiveAnnotation>> {
        VERITY_RETURN_IF_ERROR(CheckProjectExists(txn, project_id));
        std::vector<LiveAnnotation> live;
        VERITY_RETURN_IF_ERROR(ReadInBatches(
            txn,
            "SELECT item_index, annotator_index, label, seq FROM annotations "
            "WHERE project_id = $1 AND seq > $2 ORDER BY seq",
            kLoadBatchRows,
            [&](const pqxx::result& rows) -> absl::Status {
              for (const pqxx::row& row : rows) {
                live.push_back({row[0].as<int32_t>(), row[1].as<int32_t>(),
                                row[2].as<int32_t>(), row[3].as<int64_t>()});
              }
              return absl::OkStatus();
            },
            project_id, after_seq));
        return live;
      });
}

absl::StatusOr<int64_t> AnnotationStore::CountLiveAnnotations(
    int64_t project_id) {
  return pool_->WithTransaction(
      absl::StrCat("counting annotations of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<int64_t> {
        VERITY_RETURN_IF_ERROR(CheckProjectExists(txn, project_id));
        return txn
            .exec_params1(
                "SELECT count(*) FROM annotations WHERE project_id = $1",
                project_id)[0]
            .as<int64_t>();
      });
}

}  // namespace storage
}  // namespace verity
