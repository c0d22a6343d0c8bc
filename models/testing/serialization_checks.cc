#include "models/testing/serialization_checks.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_matchers.h"
#include "models/binary_codec.h"
#include "models/majority_vote.h"

namespace verity::models::testing {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

std::string WithTrailingBytes(std::string_view blob) {
  std::string payload(blob.substr(0, blob.size() - 8));
  payload.append(8, '\0');
  uint64_t checksum = Fnv1a64(payload);
  for (int b = 0; b < 8; ++b, checksum >>= 8) payload.push_back(static_cast<char>(checksum & 0xff));
  return payload;
}

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
  const std::unique_ptr<TruthModel> clone = fitted.Clone();
  EXPECT_TRUE(clone->has_parameters());
  EXPECT_EQ(clone->Serialize(), blob);
  EXPECT_EQ(AllPosteriors(*clone, data, {}), AllPosteriors(fitted, data, {}));
  EXPECT_THAT(restored.Restore(WithTrailingBytes(blob)),
              StatusIs(absl::StatusCode::kInvalidArgument));
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
