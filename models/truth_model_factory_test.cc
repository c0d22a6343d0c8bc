#include "models/truth_model_factory.h"

#include <memory>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_matchers.h"

namespace verity::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

TEST(TruthModelFactoryTest, CreatesEachKnownMethod) {
  EXPECT_THAT(KnownTruthModelMethods(),
              ElementsAre("mv", "ds", "one_coin", "glad", "lia", "crowdlayer",
                          "trace_reg", "conal", "cmm", "wawa",
                          "zero_based_skill", "kos", "mace", "bwa", "ibcc", "ebcc", "mmsr",
                          "auto"));
  for (std::string_view method : KnownTruthModelMethods()) {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateTruthModel(method, 4, {});
    if (method == "kos") {
      // Karger-Oh-Shah is for binary tasks only.
      EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
      model = CreateTruthModel(method, 2, {});
      ASSERT_THAT(model, IsOk());
      EXPECT_EQ((*model)->num_classes(), 2);
      continue;
    }
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ((*model)->method(), method);
    EXPECT_EQ((*model)->num_classes(), 4);
    EXPECT_FALSE((*model)->has_parameters());
  }
}

TEST(TruthModelFactoryTest, UnknownMethodIsInvalidArgumentListingKnownOnes) {
  absl::StatusOr<std::unique_ptr<TruthModel>> model =
      CreateTruthModel("zencrowd", 2, {});
  EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("\"zencrowd\""));
  EXPECT_THAT(model.status().message(), HasSubstr("mv, ds, one_coin, glad"));
}

TEST(TruthModelFactoryTest, RejectsBadClassCountAndOptions) {
  EXPECT_THAT(CreateTruthModel("ds", 1, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  TruthModelOptions options;
  options.num_threads = 0;
  absl::StatusOr<std::unique_ptr<TruthModel>> model =
      CreateTruthModel("mv", 2, options);
  EXPECT_THAT(model, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.status().message(), HasSubstr("num_threads"));
}

}  // namespace
}  // namespace verity::models
