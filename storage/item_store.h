// ItemStore: the items (things to label) and annotators (who label) of a
// project, each named by an external string id and stored under a dense
// per-project index 0..n-1 (see storage/entity_index.h).
//
// Upserts create missing entities and update the optional attributes that a
// write carries (features, gold label); attributes a write leaves unset keep
// their stored value. Loads return everything of a project ordered by index,
// which is the layout the in-memory models use.
//
// Thread-safety: all methods are thread-safe; each call is one transaction.
// Writers of one project are serialised by the project row lock. The pool
// must outlive the store.
#ifndef VERITY_STORAGE_ITEM_STORE_H_
#define VERITY_STORAGE_ITEM_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/connection_pool.h"

namespace verity {
namespace storage {

struct ItemWrite {
  std::string external_id;
  // Length must equal the project's item_feature_dim (> 0); finite values.
  std::optional<std::vector<float>> features;
  // Known true class (control question), in [0, K).
  std::optional<int32_t> gold_label;
  // Assignment priority (finite); unset leaves it as it was (0 for a new item).
  std::optional<double> priority;
};

struct AnnotatorWrite {
  std::string external_id;
  // Length must equal the project's annotator_feature_dim (> 0).
  std::optional<std::vector<float>> features;
};

struct ItemRecord {
  int32_t index = 0;
  std::string external_id;
  std::optional<int32_t> gold_label;
  double priority = 0;
  std::optional<std::vector<float>> features;
};

struct AnnotatorRecord {
  int32_t index = 0;
  std::string external_id;
  std::optional<std::vector<float>> features;
};

class ItemStore {
 public:
  explicit ItemStore(ConnectionPool* pool) : pool_(pool) {}

  // Creates the items that do not exist yet and applies the given features /
  // gold labels (for an id listed twice, the later write wins). Returns the
  // index of each write, in input order. All or nothing. Errors: NOT_FOUND
  // for an unknown project; INVALID_ARGUMENT for an empty external id, a gold
  // label outside [0, K), or features of the wrong length or not finite.
  //
  // Marks the project changed (storage/project_changes.h): always for items,
  // for annotators when a write creates one or carries features. `change_seq` (may be
  // null) then receives the project's change_seq after this write (left
  // as is otherwise).
  absl::StatusOr<std::vector<int32_t>> UpsertItems(
      int64_t project_id, absl::Span<const ItemWrite> items,
      int64_t* change_seq = nullptr);

  // The same for annotators.
  absl::StatusOr<std::vector<int32_t>> UpsertAnnotators(
      int64_t project_id, absl::Span<const AnnotatorWrite> annotators,
      int64_t* change_seq = nullptr);

  // All items / annotators of the project ordered by index (so
  // result[i].index == i). NOT_FOUND for an unknown project.
  absl::StatusOr<std::vector<ItemRecord>> LoadItems(int64_t project_id);
  absl::StatusOr<std::vector<AnnotatorRecord>> LoadAnnotators(
      int64_t project_id);

 private:
  ConnectionPool* const pool_;
};

}  // namespace storage
}  // namespace verity

#endif  // VERITY_STORAGE_ITEM_STORE_H_
