#include "storage/entity_index.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pqxx/result"
#include "pqxx/stream_to"
#include "storage/sql_values.h"

namespace verity {
namespace storage {
namespace {

struct KindNames {
  const char* table;
  const char* index_column;
  const char* counter_column;
};

KindNames NamesFor(EntityKind kind) {
  switch (kind) {
    case EntityKind::kItem:
      return {"items", "item_index", "next_item_index"};
    case EntityKind::kAnnotator:
      return {"annotators", "annotator_index", "next_annotator_index"};
  }
  return {"items", "item_index", "next_item_index"};
}

}  // namespace

absl::StatusOr<std::vector<LockedProject>> LockProjects(
    pqxx::work& txn, absl::Span<const int64_t> project_ids) {
  std::vector<int64_t> ids(project_ids.begin(), project_ids.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const pqxx::result rows = txn.exec_params(
      "SELECT project_id, cardinality(classes), item_feature_dim, "
      "       annotator_feature_dim, next_item_index, next_annotator_index "
      "FROM projects WHERE project_id = ANY($1::bigint[]) "
      "ORDER BY project_id FOR NO KEY UPDATE",
      Int64ArrayLiteral(ids));
  std::vector<LockedProject> locked;
  locked.reserve(rows.size());
  for (const pqxx::row& row : rows) {
    LockedProject p;
    p.project_id = row[0].as<int64_t>();
    p.num_classes = row[1].as<int32_t>();
    p.item_feature_dim = row[2].as<int32_t>();
    p.annotator_feature_dim = row[3].as<int32_t>();
    p.next_item_index = row[4].as<int32_t>();
    p.next_annotator_index = row[5].as<int32_t>();
    locked.push_back(p);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i >= locked.size() || locked[i].project_id != ids[i]) {
      return absl::NotFoundError(absl::StrCat("project ", ids[i], " not found"));
    }
  }
  return locked;
}

absl::StatusOr<std::vector<int32_t>> ResolveOrCreateIndices(
    pqxx::work& txn, int64_t project_id, EntityKind kind,
    absl::Span<const absl::string_view> external_ids, int32_t* created) {
  const KindNames names = NamesFor(kind);
  // Distinct ids in order of first appearance.
  absl::flat_hash_map<absl::string_view, int32_t> index_of;
  std::vector<absl::string_view> distinct;
  index_of.reserve(external_ids.size());
  for (absl::string_view id : external_ids) {
    if (index_of.emplace(id, -1).second) distinct.push_back(id);
  }
  if (!distinct.empty()) {
    const pqxx::result existing = txn.exec_params(
        // One unique-index probe per id (LATERAL ... LIMIT 1 is never turned
        // into a hash join that would read every entity of the project).
        absl::StrCat("SELECT t.id, e.", names.index_column,
                     " FROM unnest($2::text[]) AS t(id) CROSS JOIN LATERAL ("
                     "SELECT ", names.index_column, " FROM ", names.table,
                     " WHERE project_id = $1 AND external_id = t.id LIMIT 1) "
                     "AS e"),
        project_id, TextArrayLiteral(absl::MakeConstSpan(distinct)));
    for (const pqxx::row& row : existing) {
      // External ids never contain NUL (ValidateExternalId).
      auto it = index_of.find(absl::string_view(row[0].c_str()));
      if (it != index_of.end()) it->second = row[1].as<int32_t>();
    }
  }
  std::vector<absl::string_view> missing;
  for (absl::string_view id : distinct) {
    if (index_of[id] < 0) missing.push_back(id);
  }
  if (created != nullptr) *created = static_cast<int32_t>(missing.size());
  if (!missing.empty()) {
    const pqxx::row counter = txn.exec_params1(
        absl::StrCat("SELECT ", names.counter_column,
                     " FROM projects WHERE project_id = $1"),
        project_id);
    const int32_t first = counter[0].as<int32_t>();
    if (absl::Status s = AppendNewEntities(txn, project_id, kind, first, missing);
        !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < missing.size(); ++i) {
      index_of[missing[i]] = static_cast<int32_t>(first + i);
    }
  }
  std::vector<int32_t> indices;
  indices.reserve(external_ids.size());
  for (absl::string_view id : external_ids) indices.push_back(index_of[id]);
  return indices;
}

absl::Status AppendNewEntities(pqxx::work& txn, int64_t project_id,
                               EntityKind kind, int32_t next_index,
                               absl::Span<const absl::string_view> new_ids) {
  if (new_ids.empty()) return absl::OkStatus();
  const KindNames names = NamesFor(kind);
  const int64_t end = int64_t{next_index} + static_cast<int64_t>(new_ids.size());
  if (end > std::numeric_limits<int32_t>::max()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("project ", project_id, " cannot hold more than ",
                     std::numeric_limits<int32_t>::max(), " ", names.table));
  }
  {
    pqxx::stream_to copy(
        txn, names.table,
        std::vector<std::string>{"project_id", names.index_column, "external_id"});
    std::tuple<int64_t, int32_t, std::string> row{project_id, next_index, ""};
    for (absl::string_view id : new_ids) {
      // stream_to escapes the text for COPY (ids never contain NUL).
      std::get<2>(row).assign(id.data(), id.size());
      copy << row;
      ++std::get<1>(row);
    }
    copy.complete();
  }
  txn.exec_params0(absl::StrCat("UPDATE projects SET ", names.counter_column,
                                " = $2 WHERE project_id = $1"),
                   project_id, end);
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace verity
