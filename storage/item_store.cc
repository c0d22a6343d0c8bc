#include "storage/item_store.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "pqxx/result"
#include "storage/cursor_reader.h"
#include "storage/entity_index.h"
#include "storage/project_changes.h"
#include "storage/sql_values.h"

namespace verity {
namespace storage {
namespace {

constexpr int kLoadBatchRows = 50000;

// One write, independent of its kind.
struct EntityWrite {
  absl::string_view external_id;
  const std::optional<std::vector<float>>* features;
  std::optional<int32_t> gold_label;  // Items only.
  std::optional<double> priority;     // Items only.
};

absl::Status ValidateFeatures(const std::vector<float>& features,
                              int32_t dim, absl::string_view what,
                              absl::string_view external_id) {
  if (dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", external_id, "' has features but the project declares no ",
        what, " features (feature dimension 0)"));
  }
  if (static_cast<int64_t>(features.size()) != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", external_id, "' has ", features.size(),
        " features; the project's ", what, " feature dimension is ", dim));
  }
  for (float f : features) {
    if (!std::isfinite(f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", external_id, "' has a feature that is not finite"));
    }
  }
  return absl::OkStatus();
}

// `change_seq` (may be null): receives the project's change_seq after this write, when it
// marked the project changed (storage/project_changes.h).
absl::StatusOr<std::vector<int32_t>> UpsertEntities(
    ConnectionPool& pool, int64_t project_id, EntityKind kind,
    const std::vector<EntityWrite>& writes, int64_t* change_seq) {
  const bool items = kind == EntityKind::kItem;
  const char* what = items ? "item" : "annotator";
  for (const EntityWrite& w : writes) {
    VERITY_RETURN_IF_ERROR(
        ValidateExternalId(w.external_id, absl::StrCat(what, " external_id")));
    if (w.priority.has_value() && !std::isfinite(*w.priority)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "priority of item '", w.external_id, "' is not finite"));
    }
    if (w.gold_label.has_value() && *w.gold_label < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gold label ", *w.gold_label, " of item '", w.external_id,
          "' is negative"));
    }
  }
  std::vector<absl::string_view> ids;
  ids.reserve(writes.size());
  for (const EntityWrite& w : writes) ids.push_back(w.external_id);

  return pool.WithTransaction(
      absl::StrCat("upserting ", what, "s of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<int32_t>> {
        VERITY_ASSIGN_OR_RETURN(std::vector<LockedProject> locked,
                                LockProjects(txn, {project_id}));
        const LockedProject& project = locked.front();
        const int32_t dim = items ? project.item_feature_dim
                                  : project.annotator_feature_dim;
        for (const EntityWrite& w : writes) {
          if (w.features->has_value()) {
            VERITY_RETURN_IF_ERROR(
                ValidateFeatures(**w.features, dim, what, w.external_id));
          }
          if (w.gold_label.has_value() &&
              *w.gold_label >= project.num_classes) {
            return absl::InvalidArgumentError(absl::StrCat(
                "gold label ", *w.gold_label, " of item '", w.external_id,
                "' is out of range: the project has ", project.num_classes,
                " classes"));
          }
        }
        int32_t created = 0;
        VERITY_ASSIGN_OR_RETURN(
            std::vector<int32_t> indices,
            ResolveOrCreateIndices(txn, project_id, kind, ids, &created));

        // Attribute updates, merged per entity (the later write wins).
        struct Update {
          const std::vector<float>* features = nullptr;
          std::optional<int32_t> gold_label;
          std::optional<double> priority;
        };
        absl::flat_hash_map<int32_t, Update> updates;
        std::vector<int32_t> order;
        for (size_t i = 0; i < writes.size(); ++i) {
          const EntityWrite& w = writes[i];
          if (!w.features->has_value() && !w.gold_label.has_value() &&
              !w.priority.has_value()) {
            continue;
          }
          auto [it, inserted] = updates.try_emplace(indices[i]);
          if (inserted) order.push_back(indices[i]);
          if (w.features->has_value()) it->second.features = &**w.features;
          if (w.gold_label.has_value()) it->second.gold_label = w.gold_label;
          if (w.priority.has_value()) it->second.priority = w.priority;
        }
        // New items and annotators, and any attribute: what other server replicas must
        // re-read. (An annotator without features is not left for its first label to bring:
        // until then the other replicas would not know it.) Annotators already stored change
        // nothing, so SuggestItems' registration of a known annotator costs no re-read.
        if (items || created > 0 || !order.empty()) {
          const int64_t seq = MarkProjectChanged(txn, project_id);
          if (change_seq != nullptr) *change_seq = seq;
        }
        if (!order.empty()) {
          std::vector<std::optional<std::vector<float>>> features;
          std::vector<std::optional<int32_t>> gold;
          std::vector<std::optional<double>> priority;
          priority.reserve(order.size());
          features.reserve(order.size());
          gold.reserve(order.size());
          for (int32_t index : order) {
            const Update& u = updates[index];
            features.push_back(u.features == nullptr
                                   ? std::nullopt
                                   : std::make_optional(*u.features));
            gold.push_back(u.gold_label);
            priority.push_back(u.priority);
          }
          if (items) {
            txn.exec_params0(
                "UPDATE items AS i "
                "SET features = COALESCE(u.f::real[], i.features), "
                "    gold_label = COALESCE(u.g, i.gold_label), "
                "    priority = COALESCE(u.p, i.priority) "
                "FROM unnest($2::integer[], $3::text[], $4::integer[], "
                "            $5::double precision[]) AS u(idx, f, g, p) "
                "WHERE i.project_id = $1 AND i.item_index = u.idx",
                project_id, Int32ArrayLiteral(order),
                NestedFloatArrayLiteral(features), Int32ArrayLiteral(gold),
                Float64ArrayLiteral(priority));
          } else {
            txn.exec_params0(
                "UPDATE annotators AS a "
                "SET features = COALESCE(u.f::real[], a.features) "
                "FROM unnest($2::integer[], $3::text[]) AS u(idx, f) "
                "WHERE a.project_id = $1 AND a.annotator_index = u.idx",
                project_id, Int32ArrayLiteral(order),
                NestedFloatArrayLiteral(features));
          }
        }
        return indices;
      });
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

absl::StatusOr<std::optional<std::vector<float>>> ParseOptionalFeatures(
    const pqxx::field& field) {
  if (field.is_null()) return std::optional<std::vector<float>>();
  VERITY_ASSIGN_OR_RETURN(std::vector<float> features,
                          ParseFloatArray(field.c_str()));
  return std::make_optional(std::move(features));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ItemStore::UpsertItems(
    int64_t project_id, absl::Span<const ItemWrite> items, int64_t* change_seq) {
  std::vector<EntityWrite> writes;
  writes.reserve(items.size());
  for (const ItemWrite& item : items) {
    writes.push_back({item.external_id, &item.features, item.gold_label, item.priority});
  }
  return UpsertEntities(*pool_, project_id, EntityKind::kItem, writes, change_seq);
}

absl::StatusOr<std::vector<int32_t>> ItemStore::UpsertAnnotators(
    int64_t project_id, absl::Span<const AnnotatorWrite> annotators, int64_t* change_seq) {
  std::vector<EntityWrite> writes;
  writes.reserve(annotators.size());
  for (const AnnotatorWrite& annotator : annotators) {
    writes.push_back({annotator.external_id, &annotator.features, std::nullopt, std::nullopt});
  }
  return UpsertEntities(*pool_, project_id, EntityKind::kAnnotator, writes, change_seq);
}

absl::StatusOr<std::vector<ItemRecord>> ItemStore::LoadItems(
    int64_t project_id) {
  return pool_->WithTransaction(
      absl::StrCat("loading items of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<ItemRecord>> {
        VERITY_RETURN_IF_ERROR(CheckProjectExists(txn, project_id));
        std::vector<ItemRecord> records;
        VERITY_RETURN_IF_ERROR(ReadInBatches(
            txn,
            "SELECT item_index, external_id, gold_label, features, priority FROM items "
            "WHERE project_id = $1 ORDER BY item_index",
            kLoadBatchRows,
            [&](const pqxx::result& rows) -> absl::Status {
              for (const pqxx::row& row : rows) {
                ItemRecord r;
                r.index = row[0].as<int32_t>();
                r.external_id = row[1].as<std::string>();
                if (!row[2].is_null()) r.gold_label = row[2].as<int32_t>();
                VERITY_ASSIGN_OR_RETURN(r.features,
                                        ParseOptionalFeatures(row[3]));
                r.priority = row[4].as<double>();
                records.push_back(std::move(r));
              }
              return absl::OkStatus();
            },
            project_id));
        return records;
      });
}

absl::StatusOr<std::vector<AnnotatorRecord>> ItemStore::LoadAnnotators(
    int64_t project_id) {
  return pool_->WithTransaction(
      absl::StrCat("loading annotators of project ", project_id),
      [&](pqxx::work& txn) -> absl::StatusOr<std::vector<AnnotatorRecord>> {
        VERITY_RETURN_IF_ERROR(CheckProjectExists(txn, project_id));
        std::vector<AnnotatorRecord> records;
        VERITY_RETURN_IF_ERROR(ReadInBatches(
            txn,
            "SELECT annotator_index, external_id, features FROM annotators "
            "WHERE project_id = $1 ORDER BY annotator_index",
            kLoadBatchRows,
            [&](const pqxx::result& rows) -> absl::Status {
              for (const pqxx::row& row : rows) {
                AnnotatorRecord r;
                r.index = row[0].as<int32_t>();
                r.external_id = row[1].as<std::string>();
                VERITY_ASSIGN_OR_RETURN(r.features,
                                        ParseOptionalFeatures(row[2]));
                records.push_back(std::move(r));
              }
              return absl::OkStatus();
            },
            project_id));
        return records;
      });
}

}  // namespace storage
}  // namespace verity
