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

  triples = StableSortByKey(
      triples, num_annotators, [](const Annotation& a) { return a.annotator; },
      m.annotator_offsets_);
  m.annotator_entries_.resize(triples.size());
  for (size_t i = 0; i < triples.size(); ++i) {
    m.annotator_entries_[i] = Entry{triples[i].item, triples[i].label};
  }
  return m;
}

}  // namespace verity::models
