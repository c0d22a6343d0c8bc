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
