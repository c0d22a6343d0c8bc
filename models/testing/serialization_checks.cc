#include "models/testing/serialization_checks.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_matchers.h"
#include "models/majority_vote.h"

namespace verity::models::testing {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

void ExpectSerializeRestoreContract(const TruthModel& fitted, TruthModel& restored,
                                    TruthModel& other_classes, const AnnotationMatrix& data,
                                    int32_t max_annotator) {
  const std::string blob = fitted.Serialize();
  ASSERT_THAT(restored.Restore(blob), IsOk());
  EXPECT_EQ(AllPosteriors(restored, data, {}), AllPosteriors(fitted, data, {}));
  for (int32_t a = -1; a <= max_annotator; ++a) {
    EXPECT_EQ(restored.AnnotatorConfusion(a), fitted.AnnotatorConfusion(a));
  }
  EXPECT_EQ(restored.Serialize(), blob);
  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 0x10;
  EXPECT_THAT(restored.Restore(flipped), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(restored.Restore(blob.substr(0, blob.size() - 9)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto mv = MajorityVoteModel::Create(fitted.num_classes(), {});
  ASSERT_THAT(mv, IsOk());
  absl::Status s = restored.Restore((*mv)->Serialize());
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("method"));
  s = other_classes.Restore(blob);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("classes"));
  EXPECT_FALSE(other_classes.has_parameters());
}

}  // namespace verity::models::testing
