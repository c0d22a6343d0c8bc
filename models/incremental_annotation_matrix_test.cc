#include "models/incremental_annotation_matrix.h"

#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "models/annotation_matrix.h"

namespace verity::models {
namespace {

using Entry = AnnotationMatrix::Entry;
using Live = std::map<std::pair<int32_t, int32_t>, int32_t>;  // (item, annotator) -> label

// Both CSR views of `m` equal those of a matrix built from scratch from `live`.
void ExpectMatches(const AnnotationMatrix& m, const Live& live, int32_t num_items,
                   int32_t num_annotators, int32_t num_classes) {
  std::vector<Annotation> triples;
  for (const auto& [key, label] : live) triples.push_back({key.first, key.second, label});
  auto expected = AnnotationMatrix::Build(num_items, num_annotators, num_classes, triples);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(m.num_items(), num_items);
  ASSERT_EQ(m.num_annotators(), num_annotators);
  ASSERT_EQ(m.num_classes(), num_classes);
  ASSERT_EQ(m.num_labels(), static_cast<int64_t>(live.size()));
  auto same = [](absl::Span<const Entry> a, absl::Span<const Entry> b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k) {
      if (a[k].other != b[k].other || a[k].label != b[k].label) return false;
    }
    return true;
  };
  for (int32_t i = 0; i < num_items; ++i) {
    EXPECT_TRUE(same(m.LabelsOfItem(i), expected->LabelsOfItem(i))) << "item " << i;
  }
  for (int32_t a = 0; a < num_annotators; ++a) {
    EXPECT_TRUE(same(m.LabelsOfAnnotator(a), expected->LabelsOfAnnotator(a))) << "annotator " << a;
  }
}

TEST(IncrementalAnnotationMatrixTest, SetReportsAddedRevisedUnchanged) {
  IncrementalAnnotationMatrix m(3);
  m.EnsureItems(2);
  m.EnsureAnnotators(2);
  EXPECT_EQ(m.Set(1, 1, 2), IncrementalAnnotationMatrix::SetResult::kAdded);
  EXPECT_EQ(m.Set(1, 0, 0), IncrementalAnnotationMatrix::SetResult::kAdded);
  EXPECT_EQ(m.Set(1, 1, 2), IncrementalAnnotationMatrix::SetResult::kUnchanged);
  EXPECT_EQ(m.Set(1, 1, 1), IncrementalAnnotationMatrix::SetResult::kRevised);
  EXPECT_EQ(m.num_labels(), 2);
  // Rows stay sorted by annotator whatever the arrival order.
  absl::Span<const Entry> row = m.LabelsOfItem(1);
  ASSERT_EQ(row.size(), 2u);
  EXPECT_EQ(row[0].other, 0);
  EXPECT_EQ(row[1].other, 1);
  EXPECT_EQ(row[1].label, 1);
  EXPECT_TRUE(m.LabelsOfItem(0).empty());
  EXPECT_TRUE(m.HasLabel(1, 0));
  EXPECT_FALSE(m.HasLabel(0, 0));
  EXPECT_FALSE(m.HasLabel(7, 0));
}

TEST(IncrementalAnnotationMatrixTest, ConsolidationGivesTheOverlaysSlotsBack) {
  IncrementalAnnotationMatrix m(2);
  m.EnsureItems(20000);
  m.EnsureAnnotators(3);
  for (int32_t item = 0; item < 20000; ++item) m.Set(item, item % 3, item % 2);
  EXPECT_EQ(m.num_overlay_rows(), 20000);
  EXPECT_GE(m.overlay_capacity(), 20000);
  // A label arriving between the copy and the merge stays in the overlay.
  IncrementalAnnotationMatrix::Pending pending = m.PrepareConsolidation();
  auto merged = std::make_shared<const AnnotationMatrix>(IncrementalAnnotationMatrix::Consolidate(pending));
  m.Set(5, 1, 1);
  m.Rebase(merged, pending);
  EXPECT_EQ(m.num_overlay_rows(), 1);
  EXPECT_LT(m.overlay_capacity(), 64);
  EXPECT_EQ(m.num_labels(), 20001);
  EXPECT_EQ(m.LabelsOfItem(5).size(), 2u);
  EXPECT_EQ(m.LabelsOfItem(19999).size(), 1u);
}

TEST(IncrementalAnnotationMatrixTest, ConsolidationEqualsBuildFromScratchUnderRandomUpdates) {
  constexpr int32_t kClasses = 4;
  std::mt19937 rng(7);
  IncrementalAnnotationMatrix m(kClasses);
  Live live;
  int32_t num_items = 0, num_annotators = 0;
  for (int round = 0; round < 30; ++round) {
    num_items += std::uniform_int_distribution<int32_t>(0, 20)(rng);
    num_annotators += std::uniform_int_distribution<int32_t>(0, 3)(rng);
    m.EnsureItems(num_items);
    m.EnsureAnnotators(num_annotators);
    if (num_items == 0 || num_annotators == 0) continue;
    auto set_some = [&](int count) {
      for (int s = 0; s < count; ++s) {
        int32_t i = std::uniform_int_distribution<int32_t>(0, num_items - 1)(rng);
        int32_t a = std::uniform_int_distribution<int32_t>(0, num_annotators - 1)(rng);
        int32_t l = std::uniform_int_distribution<int32_t>(0, kClasses - 1)(rng);
        m.Set(i, a, l);
        live[{i, a}] = l;
      }
    };
    set_some(50);
    ASSERT_EQ(m.num_labels(), static_cast<int64_t>(live.size()));
    // Two-phase consolidation with labels arriving between the phases: the merged matrix
    // holds the state at PrepareConsolidation, and the later labels survive Rebase.
    IncrementalAnnotationMatrix::Pending pending = m.PrepareConsolidation();
    const Live at_prepare = live;
    const int32_t items_at_prepare = num_items, annotators_at_prepare = num_annotators;
    AnnotationMatrix merged = IncrementalAnnotationMatrix::Consolidate(pending);
    ExpectMatches(merged, at_prepare, items_at_prepare, annotators_at_prepare, kClasses);
    set_some(10);
    m.Rebase(std::make_shared<const AnnotationMatrix>(std::move(merged)), pending);
    for (int32_t i = 0; i < num_items; ++i) {
      for (int32_t a = 0; a < num_annotators; ++a) {
        auto it = live.find({i, a});
        ASSERT_EQ(m.HasLabel(i, a), it != live.end()) << i << "," << a;
      }
    }
    if (round % 3 == 0) {
      std::shared_ptr<const AnnotationMatrix> now = m.ConsolidateNow();
      ExpectMatches(*now, live, num_items, num_annotators, kClasses);
      EXPECT_EQ(m.num_overlay_rows(), 0);
    }
  }
}

TEST(IncrementalAnnotationMatrixTest, ResetStartsFromABuiltMatrix) {
  auto base = AnnotationMatrix::Build(3, 2, 2, std::vector<Annotation>{{0, 1, 1}, {2, 0, 0}});
  ASSERT_TRUE(base.ok());
  IncrementalAnnotationMatrix m(2);
  m.Reset(std::make_shared<const AnnotationMatrix>(*base));
  EXPECT_EQ(m.num_items(), 3);
  EXPECT_EQ(m.num_labels(), 2);
  EXPECT_TRUE(m.HasLabel(0, 1));
  EXPECT_EQ(m.Set(0, 1, 0), IncrementalAnnotationMatrix::SetResult::kRevised);
  EXPECT_EQ(m.Set(1, 0, 0), IncrementalAnnotationMatrix::SetResult::kAdded);
  ExpectMatches(*m.ConsolidateNow(), Live{{{0, 1}, 0}, {{1, 0}, 0}, {{2, 0}, 0}}, 3, 2, 2);
}

// incremental_annotation_matrix.h: EnsureItems / EnsureAnnotators grow the id ranges and never
// shrink them; Reset replaces every label with base's, empties the overlay, and grows the id
// ranges to cover base's (never shrinking them).
TEST(IncrementalAnnotationMatrixTest, IdRangesNeverShrinkAndResetDropsTheOverlay) {
  IncrementalAnnotationMatrix m(2);
  m.EnsureItems(10);
  m.EnsureAnnotators(6);
  m.EnsureItems(4);
  m.EnsureAnnotators(2);
  EXPECT_EQ(m.num_items(), 10);
  EXPECT_EQ(m.num_annotators(), 6);
  m.Set(1, 5, 1);
  m.Set(7, 0, 0);
  EXPECT_EQ(m.num_overlay_rows(), 2);
  absl::StatusOr<AnnotationMatrix> base = AnnotationMatrix::Build(3, 2, 2, {{1, 0, 0}});
  ASSERT_TRUE(base.ok());
  m.Reset(std::make_shared<AnnotationMatrix>(*std::move(base)));
  EXPECT_EQ(m.num_items(), 10);
  EXPECT_EQ(m.num_annotators(), 6);
  EXPECT_EQ(m.num_overlay_rows(), 0);
  EXPECT_EQ(m.num_labels(), 1);
  ASSERT_EQ(m.LabelsOfItem(1).size(), 1u);
  EXPECT_EQ(m.LabelsOfItem(1)[0].other, 0);
  EXPECT_TRUE(m.LabelsOfItem(7).empty());
  EXPECT_FALSE(m.HasLabel(1, 5));
  EXPECT_FALSE(m.HasLabel(7, 0));
  // Reset to a base with more ids grows the ranges.
  absl::StatusOr<AnnotationMatrix> bigger = AnnotationMatrix::Build(12, 8, 2, {});
  ASSERT_TRUE(bigger.ok());
  m.Reset(std::make_shared<AnnotationMatrix>(*std::move(bigger)));
  EXPECT_EQ(m.num_items(), 12);
  EXPECT_EQ(m.num_annotators(), 8);
  EXPECT_EQ(m.num_labels(), 0);
}

// incremental_annotation_matrix.h: HasLabel is false for ids out of range, negative ones
// included, whether the row would come from the base or the overlay.
TEST(IncrementalAnnotationMatrixTest, HasLabelIsFalseForIdsOutOfRange) {
  absl::StatusOr<AnnotationMatrix> base =
      AnnotationMatrix::Build(3, 2, 2, {{0, 0, 1}, {1, 1, 0}, {2, 0, 0}});
  ASSERT_TRUE(base.ok());
  IncrementalAnnotationMatrix m(2);
  m.Reset(std::make_shared<AnnotationMatrix>(*std::move(base)));
  m.Set(1, 0, 1);  // item 1's row now in the overlay
  EXPECT_TRUE(m.HasLabel(0, 0));
  EXPECT_TRUE(m.HasLabel(1, 0));
  EXPECT_FALSE(m.HasLabel(0, 1));
  for (int32_t item : {-1, -2, 3, 100}) {
    for (int32_t annotator : {-1, 0, 1}) {
      EXPECT_FALSE(m.HasLabel(item, annotator)) << item << "," << annotator;
    }
  }
  EXPECT_FALSE(m.HasLabel(0, -1));
  EXPECT_FALSE(m.HasLabel(0, 2));
}

}  // namespace
}  // namespace verity::models
