#include "models/annotation_matrix.h"

#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"

namespace verity::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

MATCHER_P2(EntryIs, other, label, "") {
  return arg.other == other && arg.label == label;
}

TEST(AnnotationMatrixTest, BuildsBothViewsSortedWhateverTheInputOrder) {
  const std::vector<Annotation> triples = {
      {2, 1, 0}, {0, 2, 1}, {2, 0, 2}, {0, 0, 0}, {1, 2, 2}, {0, 1, 1}};
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(/*num_items=*/4, /*num_annotators=*/3,
                              /*num_classes=*/3, triples);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->num_items(), 4);
  EXPECT_EQ(m->num_annotators(), 3);
  EXPECT_EQ(m->num_classes(), 3);
  EXPECT_EQ(m->num_labels(), 6);

  EXPECT_THAT(m->LabelsOfItem(0),
              ElementsAre(EntryIs(0, 0), EntryIs(1, 1), EntryIs(2, 1)));
  EXPECT_THAT(m->LabelsOfItem(1), ElementsAre(EntryIs(2, 2)));
  EXPECT_THAT(m->LabelsOfItem(2), ElementsAre(EntryIs(0, 2), EntryIs(1, 0)));
  EXPECT_THAT(m->LabelsOfItem(3), IsEmpty());

  EXPECT_THAT(m->LabelsOfAnnotator(0), ElementsAre(EntryIs(0, 0), EntryIs(2, 2)));
  EXPECT_THAT(m->LabelsOfAnnotator(1), ElementsAre(EntryIs(0, 1), EntryIs(2, 0)));
  EXPECT_THAT(m->LabelsOfAnnotator(2), ElementsAre(EntryIs(0, 1), EntryIs(1, 2)));
}

TEST(AnnotationMatrixTest, EmptyMatrixHasEmptyRows) {
  absl::StatusOr<AnnotationMatrix> m = AnnotationMatrix::Build(2, 1, 2, {});
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->num_labels(), 0);
  EXPECT_THAT(m->LabelsOfItem(1), IsEmpty());
  EXPECT_THAT(m->LabelsOfAnnotator(0), IsEmpty());

  AnnotationMatrix empty;
  EXPECT_EQ(empty.num_items(), 0);
  EXPECT_EQ(empty.num_labels(), 0);
}

TEST(AnnotationMatrixTest, RejectsOutOfRangeIdsNamingTheField) {
  const std::vector<Annotation> bad_item = {{0, 0, 0}, {5, 0, 0}};
  absl::StatusOr<AnnotationMatrix> m = AnnotationMatrix::Build(2, 1, 2, bad_item);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[1].item"));

  const std::vector<Annotation> bad_annotator = {{0, -1, 0}};
  m = AnnotationMatrix::Build(2, 1, 2, bad_annotator);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[0].annotator"));

  const std::vector<Annotation> bad_label = {{0, 0, 2}};
  m = AnnotationMatrix::Build(2, 1, 2, bad_label);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[0].label"));
}

// annotation_matrix.h: ids must lie in [0, count); the message names the
// field, the offending index and the range. An id equal to its count, or
// negative, is out of range.
TEST(AnnotationMatrixTest, RejectsIdsAtTheUpperBoundOrNegativeNamingTheRange) {
  const std::vector<Annotation> item_at_count = {{0, 0, 0}, {2, 0, 1}};
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(2, 3, 2, item_at_count);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[1].item = 2"));
  EXPECT_THAT(m.status().message(), HasSubstr("[0, 2)"));

  const std::vector<Annotation> negative_item = {{-1, 0, 0}};
  m = AnnotationMatrix::Build(2, 3, 2, negative_item);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[0].item = -1"));

  const std::vector<Annotation> annotator_at_count = {{1, 3, 0}};
  m = AnnotationMatrix::Build(2, 3, 2, annotator_at_count);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[0].annotator = 3"));
  EXPECT_THAT(m.status().message(), HasSubstr("[0, 3)"));

  const std::vector<Annotation> negative_label = {{1, 0, -1}};
  m = AnnotationMatrix::Build(2, 3, 2, negative_label);
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("annotations[0].label = -1"));
}

// annotation_matrix.h: a duplicate (item, annotator) pair is kept, and rows
// are sorted by annotator (item) *then label*, whatever the input order.
TEST(AnnotationMatrixTest, DuplicatePairsAppearTwiceSortedByLabel) {
  const std::vector<Annotation> triples = {
      {1, 0, 2}, {0, 1, 1}, {1, 0, 0}, {0, 1, 0}, {1, 1, 1}, {1, 0, 1}};
  absl::StatusOr<AnnotationMatrix> m =
      AnnotationMatrix::Build(2, 2, 3, triples);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->num_labels(), 6);
  EXPECT_THAT(m->LabelsOfItem(0), ElementsAre(EntryIs(1, 0), EntryIs(1, 1)));
  EXPECT_THAT(m->LabelsOfItem(1),
              ElementsAre(EntryIs(0, 0), EntryIs(0, 1), EntryIs(0, 2),
                          EntryIs(1, 1)));
  EXPECT_THAT(m->LabelsOfAnnotator(0),
              ElementsAre(EntryIs(1, 0), EntryIs(1, 1), EntryIs(1, 2)));
  EXPECT_THAT(m->LabelsOfAnnotator(1),
              ElementsAre(EntryIs(0, 0), EntryIs(0, 1), EntryIs(1, 1)));
}

// annotation_matrix.h: only negative counts are refused; zero items and
// zero annotators make a valid, empty matrix.
TEST(AnnotationMatrixTest, ZeroItemsAndAnnotatorsAreValid) {
  absl::StatusOr<AnnotationMatrix> m = AnnotationMatrix::Build(0, 0, 2, {});
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->num_items(), 0);
  EXPECT_EQ(m->num_annotators(), 0);
  EXPECT_EQ(m->num_labels(), 0);
}

TEST(AnnotationMatrixTest, RejectsBadSizes) {
  EXPECT_THAT(AnnotationMatrix::Build(-1, 1, 2, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AnnotationMatrix::Build(1, -1, 2, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<AnnotationMatrix> m = AnnotationMatrix::Build(1, 1, 1, {});
  EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.status().message(), HasSubstr("num_classes"));
}

}  // namespace
}  // namespace verity::models
