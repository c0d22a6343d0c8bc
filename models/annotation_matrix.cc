#include "models/annotation_matrix.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace verity::models {
namespace {

// Stable counting sort of `in` by key(a) in [0, num_keys). Returns the sorted
// triples and fills `offsets` (size num_keys + 1) with the bucket boundaries.
template <typename KeyFn>
std::vector<Annotation> StableSortByKey(const std::vector<Annotation>& in,
                                        int32_t num_keys, KeyFn key,
                                        std::vector<int64_t>& offsets) {
  offsets.assign(static_cast<size_t>(num_keys) + 1, 0);
  for (const Annotation& a : in) ++offsets[key(a) + 1];
  for (int32_t k = 0; k < num_keys; ++k) offsets[k + 1] += offsets[k];
  std::vector<int64_t> next(offsets.begin(), offsets.end() - 1);
  std::vector<Annotation> out(in.size());
  for (const Annotation& a : in) out[next[key(a)]++] = a;
  return out;
}

}  // namespace

absl::StatusOr<AnnotationMatrix> AnnotationMatrix::Build(
    int32_t num_items, int32_t num_annotators, int32_t num_classes,
    absl::Span<const Annotation> annotations) {
  if (num_items < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_items must be >= 0, got ", num_items));
  }
  if (num_annotators < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_annotators must be >= 0, got ", num_annotators));
  }
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  for (size_t i = 0; i < annotations.size(); ++i) {
    const Annotation& a = annotations[i];
    if (a.item < 0 || a.item >= num_items) {
      return absl::InvalidArgumentError(
          absl::StrCat("annotations[", i, "].item = ", a.item,
                       " is out of range [0, ", num_items, ")"));
    }
    if (a.annotator < 0 || a.annotator >= num_annotators) {
      return absl::InvalidArgumentError(
          absl::StrCat("annotations[", i, "].annotator = ", a.annotator,
                       " is out of range [0, ", num_annotators, ")"));
    }
    if (a.label < 0 || a.label >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("annotations[", i, "].label = ", a.label,
                       " is out of range [0, ", num_classes, ")"));
    }
  }

  // LSD radix sort: by label, then annotator, then item gives the item-major
  // order (item, annotator, label); re-sorting that by annotator gives the
  // annotator-major order (annotator, item, label).
  std::vector<Annotation> triples(annotations.begin(), annotations.end());
  std::vector<int64_t> unused_offsets;
  triples = StableSortByKey(
      triples, num_classes, [](const Annotation& a) { return a.label; },
      unused_offsets);
  triples = StableSortByKey(
      triples, num_annotators, [](const Annotation& a) { return a.annotator; },
      unused_offsets);

  AnnotationMatrix m;
  m.num_items_ = num_items;
  m.num_annotators_ = num_annotators;
  m.num_classes_ = num_classes;

  triples = StableSortByKey(
      triples, num_items, [](const Annotation& a) { return a.item; },
      m.item_offsets_);
  m.item_entries_.resize(triples.size());
  for (size_t i = 0; i < triples.size(); ++i) {
    m.item_entries_[i] = Entry{triples[i].annotator, triples[i].label};
  }
  m.BuildAnnotatorMajorFromItemMajor();
  return m;
}

void AnnotationMatrix::BuildAnnotatorMajorFromItemMajor() {
  annotator_offsets_.assign(static_cast<size_t>(num_annotators_) + 1, 0);
  for (const Entry& e : item_entries_) ++annotator_offsets_[e.other + 1];
  for (int32_t a = 0; a < num_annotators_; ++a) {
    annotator_offsets_[a + 1] += annotator_offsets_[a];
  }
  std::vector<int64_t> next(annotator_offsets_.begin(),
                            annotator_offsets_.end() - 1);
  annotator_entries_.resize(item_entries_.size());
  for (int32_t item = 0; item < num_items_; ++item) {
    for (int64_t k = item_offsets_[item]; k < item_offsets_[item + 1]; ++k) {
      const Entry& e = item_entries_[k];
      annotator_entries_[next[e.other]++] = Entry{item, e.label};
    }
  }
}

}  // namespace verity::models
