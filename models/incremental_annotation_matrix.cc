#include "models/incremental_annotation_matrix.h"

#include <algorithm>
#include <utility>

namespace verity::models {
namespace {

bool SameRow(absl::Span<const AnnotationMatrix::Entry> a,
             absl::Span<const AnnotationMatrix::Entry> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const auto& x, const auto& y) {
                      return x.other == y.other && x.label == y.label;
                    });
}

}  // namespace

IncrementalAnnotationMatrix::IncrementalAnnotationMatrix(int32_t num_classes)
    : num_classes_(num_classes), base_(std::make_shared<AnnotationMatrix>()) {}

void IncrementalAnnotationMatrix::Reset(std::shared_ptr<const AnnotationMatrix> base) {
  overlay_.clear();
  num_items_ = std::max(num_items_, base->num_items());
  num_annotators_ = std::max(num_annotators_, base->num_annotators());
  num_labels_ = base->num_labels();
  base_ = std::move(base);
}

void IncrementalAnnotationMatrix::EnsureItems(int32_t num_items) {
  num_items_ = std::max(num_items_, num_items);
}

void IncrementalAnnotationMatrix::EnsureAnnotators(int32_t num_annotators) {
  num_annotators_ = std::max(num_annotators_, num_annotators);
}

absl::Span<const AnnotationMatrix::Entry> IncrementalAnnotationMatrix::BaseRow(
    int32_t item) const {
  if (item >= base_->num_items()) return {};
  return base_->LabelsOfItem(item);
}

absl::Span<const AnnotationMatrix::Entry> IncrementalAnnotationMatrix::LabelsOfItem(
    int32_t item) const {
  auto it = overlay_.find(item);
  if (it != overlay_.end()) return it->second;
  return BaseRow(item);
}

bool IncrementalAnnotationMatrix::HasLabel(int32_t item, int32_t annotator) const {
  if (item < 0 || item >= num_items_) return false;
  absl::Span<const Entry> row = LabelsOfItem(item);
  auto it = std::lower_bound(row.begin(), row.end(), annotator,
                             [](const Entry& e, int32_t a) { return e.other < a; });
  return it != row.end() && it->other == annotator;
}

IncrementalAnnotationMatrix::SetResult IncrementalAnnotationMatrix::Set(int32_t item,
                                                                        int32_t annotator,
                                                                        int32_t label) {
  auto [slot, inserted] = overlay_.try_emplace(item);
  std::vector<Entry>& row = slot->second;
  if (inserted) {
    absl::Span<const Entry> base = BaseRow(item);
    row.reserve(base.size() + 1);
    row.assign(base.begin(), base.end());
  }
  auto it = std::lower_bound(row.begin(), row.end(), annotator,
                             [](const Entry& e, int32_t a) { return e.other < a; });
  if (it != row.end() && it->other == annotator) {
    if (it->label == label) return SetResult::kUnchanged;
    it->label = label;
    return SetResult::kRevised;
  }
  row.insert(it, Entry{annotator, label});
  ++num_labels_;
  return SetResult::kAdded;
}

IncrementalAnnotationMatrix::Pending IncrementalAnnotationMatrix::PrepareConsolidation() const {
  Pending pending;
  pending.base = base_;
  pending.num_classes = num_classes_;
  pending.num_items = num_items_;
  pending.num_annotators = num_annotators_;
  pending.rows.reserve(overlay_.size());
  for (const auto& [item, row] : overlay_) pending.rows.emplace_back(item, row);
  std::sort(pending.rows.begin(), pending.rows.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  return pending;
}

AnnotationMatrix IncrementalAnnotationMatrix::Consolidate(const Pending& pending) {
  const AnnotationMatrix& base = *pending.base;
  AnnotationMatrix m;
  m.num_items_ = pending.num_items;
  m.num_annotators_ = pending.num_annotators;
  m.num_classes_ = pending.num_classes;

  // Item-major: each item's row from the overlay when it changed, else from the base.
  int64_t total = base.num_labels();
  for (const auto& [item, row] : pending.rows) {
    total += static_cast<int64_t>(row.size());
    if (item < base.num_items()) total -= static_cast<int64_t>(base.LabelsOfItem(item).size());
  }
  m.item_offsets_.assign(static_cast<size_t>(m.num_items_) + 1, 0);
  m.item_entries_.resize(static_cast<size_t>(total));
  auto changed = pending.rows.begin();
  int64_t at = 0;
  for (int32_t item = 0; item < m.num_items_; ++item) {
    absl::Span<const Entry> row;
    if (changed != pending.rows.end() && changed->first == item) {
      row = changed->second;
      ++changed;
    } else if (item < base.num_items()) {
      row = base.LabelsOfItem(item);
    }
    std::copy(row.begin(), row.end(), m.item_entries_.begin() + at);
    at += static_cast<int64_t>(row.size());
    m.item_offsets_[item + 1] = at;
  }
  m.BuildAnnotatorMajorFromItemMajor();
  return m;
}

void IncrementalAnnotationMatrix::Rebase(std::shared_ptr<const AnnotationMatrix> merged,
                                         const Pending& pending) {
  // Overlay rows that have not changed since PrepareConsolidation are in `merged` now; rows
  // changed since stay (they are whole rows, so they remain correct over the new base).
  for (const auto& [item, row] : pending.rows) {
    auto it = overlay_.find(item);
    if (it != overlay_.end() && SameRow(it->second, row)) overlay_.erase(it);
  }
  // Give the table's slots back once it is mostly empty: a bulk load passes every new item
  // through the overlay, and absl tables keep their capacity when emptied (69 MB after a
  // million items). Rehashing the few rows left is cheap next to the merge that precedes it.
  if (overlay_.capacity() > 4 * overlay_.size() + 64) overlay_.rehash(0);
  base_ = std::move(merged);
}

std::shared_ptr<const AnnotationMatrix> IncrementalAnnotationMatrix::ConsolidateNow() {
  Pending pending = PrepareConsolidation();
  auto merged = std::make_shared<const AnnotationMatrix>(Consolidate(pending));
  Rebase(merged, pending);
  return merged;
}

}  // namespace verity::models
