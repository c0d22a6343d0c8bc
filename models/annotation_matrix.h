// AnnotationMatrix: the crowd labels of one project in compact, immutable form.
//
// Labels are (item, annotator, label) triples over dense ids: items in
// [0, num_items), annotators in [0, num_annotators), labels in [0, num_classes).
// Build() stores them twice, as two compressed sparse row (CSR) arrays:
//   - item-major: for each item, its (annotator, label) entries, sorted by
//     annotator id (then label);
//   - annotator-major: for each annotator, its (item, label) entries, sorted
//     by item id (then label).
// The sort orders are part of the contract: they make every computation that
// walks the matrix (an E-step, a serialized fit) independent of the order in
// which the triples were given. Memory is 16 bytes per label plus 8 bytes per
// item and per annotator.
//
// At most one label per (item, annotator) pair is expected; Build() does not
// check this (the caller keeps only the live label of each pair), and a
// duplicate simply appears twice.
//
// Thread safety: an AnnotationMatrix is immutable after Build(); any number of
// threads may read it concurrently. It is movable and copyable (a copy is a
// deep copy; pass by const reference).

#ifndef VERITY_MODELS_ANNOTATION_MATRIX_H_
#define VERITY_MODELS_ANNOTATION_MATRIX_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace verity::models {

struct Annotation {
  int32_t item;
  int32_t annotator;
  int32_t label;
};

class AnnotationMatrix {
 public:
  // One label in a CSR row. `other` is the annotator in an item's row and the
  // item in an annotator's row.
  struct Entry {
    int32_t other;
    int32_t label;
  };

  // Builds both CSR views. Returns INVALID_ARGUMENT, with a message naming the
  // field and the offending index, if num_items or num_annotators is negative,
  // num_classes < 2, or any item, annotator or label is out of range.
  static absl::StatusOr<AnnotationMatrix> Build(
      int32_t num_items, int32_t num_annotators, int32_t num_classes,
      absl::Span<const Annotation> annotations);

  // An empty matrix: no items, no annotators, two classes.
  AnnotationMatrix() = default;

  int32_t num_items() const { return num_items_; }
  int32_t num_annotators() const { return num_annotators_; }
  int32_t num_classes() const { return num_classes_; }
  int64_t num_labels() const {
    return static_cast<int64_t>(item_entries_.size());
  }

  // The labels of `item`, sorted by annotator. Precondition:
  // 0 <= item < num_items().
  absl::Span<const Entry> LabelsOfItem(int32_t item) const {
    return absl::MakeConstSpan(item_entries_.data() + item_offsets_[item],
                               item_entries_.data() + item_offsets_[item + 1]);
  }

  // The labels given by `annotator`, sorted by item. Precondition:
  // 0 <= annotator < num_annotators().
  absl::Span<const Entry> LabelsOfAnnotator(int32_t annotator) const {
    return absl::MakeConstSpan(
        annotator_entries_.data() + annotator_offsets_[annotator],
        annotator_entries_.data() + annotator_offsets_[annotator + 1]);
  }

 private:
  friend class IncrementalAnnotationMatrix;

  // Fills the annotator-major view from the item-major one with one counting
  // sort (walking items in order keeps each annotator's row sorted by item).
  void BuildAnnotatorMajorFromItemMajor();

  int32_t num_items_ = 0;
  int32_t num_annotators_ = 0;
  int32_t num_classes_ = 2;
  // Row r spans entries [offsets[r], offsets[r + 1]).
  std::vector<int64_t> item_offsets_ = {0};
  std::vector<Entry> item_entries_;
  std::vector<int64_t> annotator_offsets_ = {0};
  std::vector<Entry> annotator_entries_;
};

}  // namespace verity::models

#endif  // VERITY_MODELS_ANNOTATION_MATRIX_H_
