#include "storage/annotation_store.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "pqxx/result"
#include "pqxx/stream_to"
#include "storage/client_time_range.h"
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

// Whether a write's client_time `made` is later than the live label's `live` (or the live label
// has none): a duplicate that is, refreshes the live label's time.
bool IsLater(const std::optional<int64_t>& made, const std::optional<int64_t>& live) {
  return made.has_value() && (!live.has_value() || *made > *live);
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

// timestamptz in COPY's text form, exact to the microsecond.
constexpr char kCopyTimestampFormat[] = "%E4Y-%m-%d %H:%M:%E6S+00";

// Reserves the next `n` seqs of `project_id`, whose row this transaction has locked
// (LockProjects): the seqs first .. first+n-1 are this transaction's. One row update however
// many labels. Adds `history` to the project's history_rows in the same UPDATE, unless that
// would take them past `max_history` (> 0): then nothing is updated and the result is
// RESOURCE_EXHAUSTED. Returns the first seq and the project's history_rows after the addition.
absl::StatusOr<std::pair<int64_t, int64_t>> ReserveSeqs(pqxx::work& txn, int64_t project_id,
                                                        int64_t n, int64_t history,
                                                        int64_t max_history) {
  const pqxx::result rows = txn.exec_params(
      "UPDATE projects SET next_seq = next_seq + $2, history_rows = history_rows + $3 "
      "WHERE project_id = $1 AND ($3 = 0 OR $4 <= 0 OR history_rows + $3 <= $4) "
      "RETURNING next_seq - $2, history_rows",
      project_id, n, history, max_history);
  if (rows.empty()) {
    const int64_t held =
        txn.exec_params1("SELECT history_rows FROM projects WHERE project_id = $1", project_id)[0]
            .as<int64_t>();
    return absl::ResourceExhaustedError(absl::StrCat(
        "project limit max_revisions (", max_history,
        ", settings.limits.max_revisions or --max_revisions_per_project) would be passed: the "
        "project has ", held, " revised or stale labels and this commit adds ", history,
        "; nothing of it was written"));
  }
  return std::make_pair(rows[0][0].as<int64_t>(), rows[0][1].as<int64_t>());
}

// How the hints apply to one locked project.
struct ProjectHints {
  bool use = false;                  // Hints were given.
  bool items_complete = false;       // Item ids the hints do not know are new.
  bool annotators_complete = false;  // The same for annotators.
};

ProjectHints HintsFor(const WriteHints* hints, const LockedProject& p) {
  ProjectHints h;
  if (hints == nullptr) return h;
  h.use = true;
  int32_t items = -1, annotators = -1;
  for (const KnownEntities& k : hints->projects) {
    if (k.project_id != p.project_id) continue;
    items = items < 0 ? k.num_items : std::min(items, k.num_items);
    annotators = annotators < 0 ? k.num_annotators
                                : std::min(annotators, k.num_annotators);
  }
  // The caller knows only committed entities: equal counts mean it knows
  // every id of the project.
  h.items_complete = items == p.next_item_index;
  h.annotators_complete = annotators == p.next_annotator_index;
  return h;
}

// The indices of the item (or annotator) ids of writes[positions[j]], in the
// order of `positions`, creating the missing ones. Hinted indices are used as
// they are; the other ids are created without a lookup when the hints know
// every entity of the project, and looked up first otherwise.
absl::StatusOr<std::vector<int32_t>> ResolveIndices(
    pqxx::work& txn, const LockedProject& p, EntityKind kind,
    absl::Span<const AnnotationWrite> writes,
    absl::Span<const size_t> positions, const WriteHints* hints,
    const ProjectHints& h) {
  const bool items = kind == EntityKind::kItem;
  const int32_t next = items ? p.next_item_index : p.next_annotator_index;
  std::vector<int32_t> indices(positions.size(), -1);
  std::vector<size_t> unknown;  // Offsets into `positions`.
  std::vector<absl::string_view> unknown_ids;
  for (size_t j = 0; j < positions.size(); ++j) {
    const size_t i = positions[j];
    if (h.use) {
      const int32_t hinted = items ? hints->writes[i].item_index
                                   : hints->writes[i].annotator_index;
      // An index past the counter cannot be right: treat it as unknown.
      if (hinted >= 0 && hinted < next) {
        indices[j] = hinted;
        continue;
      }
    }
    unknown.push_back(j);
    unknown_ids.push_back(items ? writes[i].item_id : writes[i].annotator_id);
  }
  if (unknown.empty()) return indices;
  const bool complete = items ? h.items_complete : h.annotators_complete;
  std::vector<int32_t> resolved;
  if (complete) {
    // Every unknown id is new: number them in order of first appearance.
    absl::flat_hash_map<absl::string_view, int32_t> index_of;
    std::vector<absl::string_view> fresh;
    resolved.reserve(unknown_ids.size());
    for (absl::string_view id : unknown_ids) {
      auto [it, inserted] = index_of.emplace(
          id, next + static_cast<int32_t>(fresh.size()));
      if (inserted) fresh.push_back(id);
      resolved.push_back(it->second);
    }
    VERITY_RETURN_IF_ERROR(AppendNewEntities(txn, p.project_id, kind, next, fresh));
  } else {
    VERITY_ASSIGN_OR_RETURN(
        resolved, ResolveOrCreateIndices(txn, p.project_id, kind, unknown_ids));
  }
  for (size_t u = 0; u < unknown.size(); ++u) indices[unknown[u]] = resolved[u];
  return indices;
}

}  // namespace

absl::StatusOr<std::vector<WriteResult>> AnnotationStore::CommitAnnotations(
    absl::Span<const AnnotationWrite> writes, const WriteHints* hints,
    std::vector<DrawnSeqs>* drawn, absl::Span<const HistoryLimit> history_limits) {
  if (drawn != nullptr) drawn->clear();
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
    if (w.client_time.has_value() && !ClientTimeInStoreRange(*w.client_time)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "annotation #", i, ": client_time ",
          absl::FormatTime(*w.client_time, absl::UTCTimeZone()),
          " is outside [0001-01-01, 9999-12-31T23:59:59.999999] UTC"));
    }
    project_ids.push_back(w.project_id);
  }
  if (hints != nullptr && hints->writes.size() != writes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hints for ", hints->writes.size(), " writes given with ",
                     writes.size(), " writes"));
  }
  std::sort(project_ids.begin(), project_ids.end());
  project_ids.erase(std::unique(project_ids.begin(), project_ids.end()),
                    project_ids.end());

  std::vector<DrawnSeqs> committed_seqs;
  absl::StatusOr<std::vector<WriteResult>> results =
      CommitOnce(writes, project_ids, hints, history_limits, committed_seqs);
  if (hints != nullptr && absl::IsAlreadyExists(results.status())) {
    // An id or a pair the hints called new exists after all (the caller's
    // memory was behind the database). Nothing was written; do it the slow way.
    results = CommitOnce(writes, project_ids, nullptr, history_limits, committed_seqs);
  }
  if (results.ok() && drawn != nullptr) *drawn = std::move(committed_seqs);
  return results;
}

absl::StatusOr<std::vector<WriteResult>> AnnotationStore::CommitOnce(
    absl::Span<const AnnotationWrite> writes,
    absl::Span<const int64_t> project_ids, const WriteHints* hints,
    absl::Span<const HistoryLimit> history_limits, std::vector<DrawnSeqs>& drawn) {
  return pool_->WithTransaction(
      "committing annotations",
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<WriteResult>> {
        drawn.clear();  // A retried transaction starts over.
        // 1. Lock the projects: serialises writers per project, makes seq
        //    order commit order, and guards index allocation.
        VERITY_ASSIGN_OR_RETURN(std::vector<LockedProject> locked,
                                LockProjects(txn, project_ids));
        // locked_of[i]: write i's project in `locked`.
        std::vector<size_t> locked_of(writes.size());
        for (size_t i = 0; i < writes.size(); ++i) {
          locked_of[i] = static_cast<size_t>(
              std::lower_bound(locked.begin(), locked.end(),
                               writes[i].project_id,
                               [](const LockedProject& lp, int64_t id) {
                                 return lp.project_id < id;
                               }) -
              locked.begin());
          const LockedProject& p = locked[locked_of[i]];
          if (writes[i].label >= p.num_classes) {
            return absl::InvalidArgumentError(absl::StrCat(
                "annotation #", i, ": label ", writes[i].label,
                " is out of range: project ", p.project_id, " has ",
                p.num_classes, " classes"));
          }
        }

        // 2. External ids -> dense indices, creating new entities. An index
        //    at or past the counter read under the lock was created by this
        //    transaction, so its pairs have no live row yet.
        std::vector<PairKey> keys(writes.size());
        // Pairs known to have no live row: an entity created by this
        // transaction, or the hints say so (checked by the primary key).
        std::vector<bool> no_live_row(writes.size(), false);
        for (const LockedProject& p : locked) {
          std::vector<size_t> positions;
          for (size_t i = 0; i < writes.size(); ++i) {
            if (writes[i].project_id == p.project_id) positions.push_back(i);
          }
          const ProjectHints h = HintsFor(hints, p);
          VERITY_ASSIGN_OR_RETURN(
              std::vector<int32_t> item_indices,
              ResolveIndices(txn, p, EntityKind::kItem, writes, positions,
                             hints, h));
          VERITY_ASSIGN_OR_RETURN(
              std::vector<int32_t> annotator_indices,
              ResolveIndices(txn, p, EntityKind::kAnnotator, writes,
                             positions, hints, h));
          for (size_t j = 0; j < positions.size(); ++j) {
            const size_t i = positions[j];
            keys[i] = {p.project_id, item_indices[j], annotator_indices[j]};
            no_live_row[i] = item_indices[j] >= p.next_item_index ||
                             annotator_indices[j] >= p.next_annotator_index;
            if (h.use) {
              const KnownWrite& known = hints->writes[i];
              no_live_row[i] = no_live_row[i] ||
                               (known.unlabelled &&
                                known.item_index == item_indices[j] &&
                                known.annotator_index == annotator_indices[j]);
            }
          }
        }

        // 3. The distinct pairs, sorted (index locality for reads and
        //    inserts); pair_of[i] is write i's pair. Read the live rows of
        //    the pairs that may have one.
        std::vector<uint32_t> order(writes.size());
        std::iota(order.begin(), order.end(), 0u);
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
          return keys[a] < keys[b];
        });
        std::vector<PairKey> distinct;
        std::vector<uint32_t> pair_of(writes.size());
        std::vector<bool> absent;  // Known to have no live row.
        for (uint32_t i : order) {
          if (distinct.empty() || !(distinct.back() == keys[i])) {
            distinct.push_back(keys[i]);
            absent.push_back(false);
          }
          pair_of[i] = static_cast<uint32_t>(distinct.size() - 1);
          if (no_live_row[i]) absent.back() = true;
        }
        std::vector<PairState> pairs(distinct.size());
        {
          std::vector<int64_t> p;
          std::vector<int32_t> i, a;
          for (size_t k = 0; k < distinct.size(); ++k) {
            if (absent[k]) continue;
            p.push_back(distinct[k].project_id);
            i.push_back(distinct[k].item_index);
            a.push_back(distinct[k].annotator_index);
          }
          if (!p.empty()) {
            for (const pqxx::row& row :
                 txn.exec_params(kReadLiveSql, Int64ArrayLiteral(p),
                                 Int32ArrayLiteral(i), Int32ArrayLiteral(a))) {
              const PairKey k{row[0].as<int64_t>(), row[1].as<int32_t>(),
                              row[2].as<int32_t>()};
              PairState& state =
                  pairs[std::lower_bound(distinct.begin(), distinct.end(), k) -
                        distinct.begin()];
              state.in_database = true;
              state.label = row[3].as<int32_t>();
              state.seq = row[4].as<int64_t>();
              state.revision = row[5].as<int32_t>();
              state.client_us = OptionalMicros(row[6]);
              state.committed_us = OptionalMicros(row[7]);
            }
          }
        }

        // 4. Outcomes, in input order: a write repeating its pair's current
        //    label is a duplicate; a different label older (by client_time,
        //    both set) than the current one is stale; every other write
        //    makes a new live version. Stale writes go to the history. A
        //    duplicate carrying a later client_time than the current label
        //    (or the only one) moves the current label's client_time to it:
        //    the annotator said so again then, so a label made between the
        //    two that arrives late is stale.
        std::vector<WriteResult> results(writes.size());
        std::vector<std::optional<int64_t>> client_us(writes.size());
        size_t new_versions = 0;  // Including stale ones: each gets a seq.
        size_t later_duplicates = 0;  // Duplicates that move a client_time.
        {
          std::vector<int32_t> label_now(pairs.size());
          std::vector<std::optional<int64_t>> client_us_now(pairs.size());
          for (size_t k = 0; k < pairs.size(); ++k) {
            label_now[k] = pairs[k].label;
            client_us_now[k] = pairs[k].client_us;
          }
          for (size_t i = 0; i < writes.size(); ++i) {
            int32_t& current = label_now[pair_of[i]];
            std::optional<int64_t>& current_us = client_us_now[pair_of[i]];
            if (writes[i].client_time.has_value()) {
              client_us[i] = TimeToMicros(*writes[i].client_time);
            }
            results[i].item_index = keys[i].item_index;
            results[i].annotator_index = keys[i].annotator_index;
            if (current == writes[i].label) {
              results[i].outcome = WriteOutcome::kDuplicate;
              if (IsLater(client_us[i], current_us)) {
                current_us = client_us[i];
                ++later_duplicates;
              }
              continue;
            }
            ++new_versions;
            if (current >= 0 && client_us[i].has_value() &&
                current_us.has_value() && *client_us[i] < *current_us) {
              results[i].outcome = WriteOutcome::kStale;
              continue;
            }
            results[i].outcome = current < 0 ? WriteOutcome::kAccepted
                                             : WriteOutcome::kRevised;
            current = writes[i].label;
            current_us = client_us[i];
          }
        }
        if (new_versions == 0 && later_duplicates == 0) {
          for (size_t i = 0; i < writes.size(); ++i) {
            results[i].label = pairs[pair_of[i]].label;
            results[i].seq = pairs[pair_of[i]].seq;
          }
          return results;
        }

        // 5. Reserve each project's seqs, under its lock; they are handed
        //    out in input order.
        //    Each revised or stale write adds one history row (step 6).
        std::vector<int64_t> project_new_versions(locked.size(), 0);
        std::vector<int64_t> project_history(locked.size(), 0);
        for (size_t i = 0; i < writes.size(); ++i) {
          if (results[i].outcome != WriteOutcome::kDuplicate) {
            ++project_new_versions[locked_of[i]];
          }
          if (results[i].outcome == WriteOutcome::kRevised ||
              results[i].outcome == WriteOutcome::kStale) {
            ++project_history[locked_of[i]];
          }
        }
        std::vector<int64_t> next_seq(locked.size(), 0);
        for (size_t l = 0; l < locked.size(); ++l) {
          if (project_new_versions[l] == 0) continue;
          int64_t max_history = 0;
          for (const HistoryLimit& limit : history_limits) {
            if (limit.project_id == locked[l].project_id && limit.max_rows > 0) {
              max_history =
                  max_history > 0 ? std::min(max_history, limit.max_rows) : limit.max_rows;
            }
          }
          VERITY_ASSIGN_OR_RETURN(
              const auto reserved, ReserveSeqs(txn, locked[l].project_id, project_new_versions[l],
                                               project_history[l], max_history));
          const auto [first_seq, history_rows] = reserved;
          next_seq[l] = first_seq;
          drawn.push_back({locked[l].project_id, next_seq[l],
                           next_seq[l] + project_new_versions[l] - 1, history_rows});
          // Delivered to the listeners only if this transaction commits.
          txn.exec_params("SELECT pg_notify($1, $2)", kLabelsChannel,
                          std::to_string(locked[l].project_id));
        }

        // 6. Replay with seqs: superseded versions go to the history. A
        //    stale version goes there directly, with the live row's revision
        //    number; the live row moves to the next one (its label, seq and
        //    times stay), so revisions stay unique and the live one highest.
        Rows history;
        for (size_t i = 0; i < writes.size(); ++i) {
          PairState& state = pairs[pair_of[i]];
          switch (results[i].outcome) {
            case WriteOutcome::kDuplicate:
              // The same version (label, seq, revision), made again later.
              if (IsLater(client_us[i], state.client_us)) {
                state.client_us = client_us[i];
                state.changed = true;
              }
              break;
            case WriteOutcome::kStale: {
              PairState stale;
              stale.label = writes[i].label;
              stale.seq = next_seq[locked_of[i]]++;
              stale.revision = state.revision;
              stale.client_us = client_us[i];
              history.Add(keys[i], stale);  // committed_at: now().
              ++state.revision;
              state.changed = true;
              break;
            }
            case WriteOutcome::kRevised:
              history.Add(keys[i], state);
              ++state.revision;
              [[fallthrough]];
            case WriteOutcome::kAccepted:
              state.label = writes[i].label;
              state.seq = next_seq[locked_of[i]]++;
              state.client_us = client_us[i];
              state.committed_us = std::nullopt;
              state.changed = true;
              break;
          }
          results[i].label = state.label;
          results[i].seq = state.seq;
        }

        // 7. Write: new pairs (COPY; committed_at takes its default, now(),
        //    the transaction's start), changed pairs, history. Most new pairs
        //    are a first label without client_time: their rows leave
        //    revision and client_time to the defaults too.
        Rows updates;
        std::vector<size_t> full_rows;  // Inserts with a revision or client_time.
        {
          pqxx::stream_to copy(
              txn, "annotations",
              std::vector<std::string>{"project_id", "item_index",
                                       "annotator_index", "label", "seq"});
          for (size_t k = 0; k < distinct.size(); ++k) {
            const PairState& state = pairs[k];
            if (!state.changed) continue;
            if (state.in_database) {
              updates.Add(distinct[k], state);
            } else if (state.revision != 0 || state.client_us.has_value()) {
              full_rows.push_back(k);
            } else {
              copy << std::make_tuple(distinct[k].project_id,
                                      distinct[k].item_index,
                                      distinct[k].annotator_index, state.label,
                                      state.seq);
            }
          }
          copy.complete();
        }
        if (!full_rows.empty()) {
          pqxx::stream_to copy(
              txn, "annotations",
              std::vector<std::string>{"project_id", "item_index",
                                       "annotator_index", "label", "seq",
                                       "revision", "client_time"});
          std::string client_time;
          for (size_t k : full_rows) {
            const PairState& state = pairs[k];
            const char* client_time_text = nullptr;  // NULL
            if (state.client_us.has_value()) {
              client_time = absl::FormatTime(kCopyTimestampFormat,
                                             MicrosToTime(*state.client_us),
                                             absl::UTCTimeZone());
              client_time_text = client_time.c_str();
            }
            copy << std::make_tuple(distinct[k].project_id,
                                    distinct[k].item_index,
                                    distinct[k].annotator_index, state.label,
                                    state.seq, state.revision, client_time_text);
          }
          copy.complete();
        }
        const std::string unnest_rows = UnnestRowsSql();
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

absl::StatusOr<LabelsSince> AnnotationStore::ReadLabelsSince(
    int64_t project_id, int64_t after_seq, int32_t ids_from_item,
    int32_t ids_from_annotator) {
  return pool_->WithTransaction(
      absl::StrCat("reading the labels of project ", project_id, " after seq ",
                   after_seq),
      [&](pqxx::work& txn) -> absl::StatusOr<LabelsSince> {
        LabelsSince since;
        // Read first, in its own statement: every seq <= it belongs to a
        // commit that the label query below (a later snapshot) sees.
        pqxx::result counter = txn.exec_params(
            "SELECT next_seq - 1, history_rows FROM projects WHERE project_id = $1",
            project_id);
        if (counter.empty()) {
          return absl::NotFoundError(
              absl::StrCat("project ", project_id, " not found"));
        }
        since.drawn_through = counter[0][0].as<int64_t>();
        since.history_rows = counter[0][1].as<int64_t>();
        VERITY_RETURN_IF_ERROR(ReadInBatches(
            txn,
            // An id is looked up only where the caller may lack it (CASE
            // evaluates the subquery only then): most catch-up rows are of
            // items and annotators it knows.
            "SELECT a.item_index, "
            "       CASE WHEN a.item_index >= $3 THEN (SELECT i.external_id "
            "         FROM items i WHERE i.project_id = a.project_id "
            "         AND i.item_index = a.item_index) END, "
            "       a.annotator_index, "
            "       CASE WHEN a.annotator_index >= $4 THEN (SELECT n.external_id "
            "         FROM annotators n WHERE n.project_id = a.project_id "
            "         AND n.annotator_index = a.annotator_index) END, "
            "       a.label, a.seq "
            "FROM annotations a "
            "WHERE a.project_id = $1 AND a.seq > $2 ORDER BY a.seq",
            kLoadBatchRows,
            [&](const pqxx::result& rows) -> absl::Status {
              for (const pqxx::row& row : rows) {
                since.labels.push_back(
                    {row[0].as<int32_t>(),
                     row[1].is_null() ? std::string() : row[1].as<std::string>(),
                     row[2].as<int32_t>(),
                     row[3].is_null() ? std::string() : row[3].as<std::string>(),
                     row[4].as<int32_t>(), row[5].as<int64_t>()});
              }
              return absl::OkStatus();
            },
            project_id, after_seq, ids_from_item, ids_from_annotator));
        // A label newer than the counter read above is complete too: its
        // snapshot holds every commit before it (seq order is commit order).
        if (!since.labels.empty()) {
          since.drawn_through =
              std::max(since.drawn_through, since.labels.back().seq);
        }
        return since;
      });
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>>
AnnotationStore::ListDrawnThrough() {
  return pool_->WithTransaction(
      "listing the projects' newest seqs",
      [&](pqxx::work& txn)
          -> absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> {
        std::vector<std::pair<int64_t, int64_t>> drawn;
        for (const pqxx::row& row : txn.exec(
                 "SELECT project_id, next_seq - 1 FROM projects "
                 "ORDER BY project_id")) {
          drawn.emplace_back(row[0].as<int64_t>(), row[1].as<int64_t>());
        }
        return drawn;
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
