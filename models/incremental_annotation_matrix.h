// IncrementalAnnotationMatrix: the live labels of one project, held as the CSR
// arrays of an AnnotationMatrix plus a small overlay of rows changed since,
// so that labels can be added and revised one at a time and a fit still runs
// on compact arrays.
//
// Layout:
//   - `base`: an immutable AnnotationMatrix (shared, so a fit can hold it
//     while labels keep arriving);
//   - an overlay of whole item rows changed since `base` was built, each
//     sorted by annotator like a CSR row.
// Set() copies an item's row into the overlay on its first change, so the
// cost of a label is O(labels of its item); LabelsOfItem() reads the overlay
// row or the base row. Consolidate() merges base and overlay into a new
// AnnotationMatrix in O(labels + items + annotators): one pass over the item
// rows and one counting sort for the annotator-major view, instead of sorting
// every triple again.
//
// Consolidation is split in two so that the O(labels) merge can run without
// the owner's lock:
//   Pending p = m.PrepareConsolidation();   // under the lock: copies the overlay
//   AnnotationMatrix merged = Consolidate(p);   // off the lock
//   m.Rebase(std::make_shared<...>(merged), p);   // under the lock
// Rebase() keeps in the overlay only the rows changed after
// PrepareConsolidation(), so labels that arrived during the merge are kept.
//
// Thread safety: none; the owner serialises calls (LiveProject holds its mutex).
// The AnnotationMatrix objects handed out are immutable and may be read from
// any thread.

#ifndef VERITY_MODELS_INCREMENTAL_ANNOTATION_MATRIX_H_
#define VERITY_MODELS_INCREMENTAL_ANNOTATION_MATRIX_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "models/annotation_matrix.h"

namespace verity::models {

class IncrementalAnnotationMatrix {
 public:
  using Entry = AnnotationMatrix::Entry;

  // What Set() did to the (item, annotator) pair.
  enum class SetResult { kAdded, kRevised, kUnchanged };

  // The overlay rows and sizes a consolidation starts from.
  struct Pending {
    std::shared_ptr<const AnnotationMatrix> base;
    int32_t num_classes = 2;
    int32_t num_items = 0;
    int32_t num_annotators = 0;
    // (item, row) for every overlay row, sorted by item.
    std::vector<std::pair<int32_t, std::vector<Entry>>> rows;
  };

  // An empty matrix with `num_classes` (>= 2) classes.
  explicit IncrementalAnnotationMatrix(int32_t num_classes);

  int32_t num_classes() const { return num_classes_; }
  int32_t num_items() const { return num_items_; }
  int32_t num_annotators() const { return num_annotators_; }
  int64_t num_labels() const { return num_labels_; }
  // Rows changed since the base was built.
  int64_t num_overlay_rows() const { return static_cast<int64_t>(overlay_.size()); }
  // Slots of the overlay's hash table (memory accounting and tests).
  int64_t overlay_capacity() const { return static_cast<int64_t>(overlay_.capacity()); }

  // Replaces every label with those of `base` (same num_classes) and empties
  // the overlay; the id ranges grow to cover base's.
  void Reset(std::shared_ptr<const AnnotationMatrix> base);

  // Grows the id ranges (never shrinks them). New items have no labels.
  void EnsureItems(int32_t num_items);
  void EnsureAnnotators(int32_t num_annotators);

  // Sets `annotator`'s label on `item`, adding the pair or revising its label.
  // Preconditions: 0 <= item < num_items(), 0 <= annotator < num_annotators(),
  // 0 <= label < num_classes() (the caller validated them).
  SetResult Set(int32_t item, int32_t annotator, int32_t label);

  // The live labels of `item`, sorted by annotator. Valid until the next
  // non-const call. Precondition: 0 <= item < num_items().
  absl::Span<const Entry> LabelsOfItem(int32_t item) const;

  // Whether `annotator` has a label on `item` (false for ids out of range).
  bool HasLabel(int32_t item, int32_t annotator) const;

  // See the file comment.
  Pending PrepareConsolidation() const;
  static AnnotationMatrix Consolidate(const Pending& pending);
  void Rebase(std::shared_ptr<const AnnotationMatrix> merged, const Pending& pending);

  // PrepareConsolidation + Consolidate + Rebase in one call, for owners that
  // do not need to release a lock in between. Returns the consolidated matrix.
  std::shared_ptr<const AnnotationMatrix> ConsolidateNow();

 private:
  absl::Span<const Entry> BaseRow(int32_t item) const;

  int32_t num_classes_;
  int32_t num_items_ = 0;
  int32_t num_annotators_ = 0;
  int64_t num_labels_ = 0;
  std::shared_ptr<const AnnotationMatrix> base_;
  absl::flat_hash_map<int32_t, std::vector<Entry>> overlay_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_INCREMENTAL_ANNOTATION_MATRIX_H_
