#include "server/api/project_quota.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_matchers.h"

namespace verity::server {
namespace {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

TEST(ProjectQuotaTest, OverridesReplaceOnlyTheirOwnDefaults) {
  ProjectQuota defaults{100, 10, 1000, 1000};
  v1::ProjectSettings settings;
  settings.mutable_limits()->set_max_annotators(3);
  const ProjectQuota quota = EffectiveQuota(settings, defaults);
  EXPECT_EQ(quota.max_items, 100);
  EXPECT_EQ(quota.max_annotators, 3);
  EXPECT_EQ(quota.max_labels, 1000);
}

TEST(ProjectQuotaTest, UpToTheLimitIsAllowedAndPastItIsRefusedWithTheNumbers) {
  const ProjectQuota quota{100, 10, 1000, 1000};
  EXPECT_THAT(CheckProjectQuota(quota, {95, 10, 0}, {5, 0, 1000}, 2), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {95, 10, 0}, {6, 0, 0}, 2),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_items (100, settings.limits.max_items or "
                                 "--max_items_per_project) would be passed: the project has "
                                 "95 items and this call adds 6")));
  EXPECT_THAT(CheckProjectQuota(quota, {0, 10, 0}, {0, 1, 0}, 2),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_annotators")));
  EXPECT_THAT(CheckProjectQuota(quota, {0, 0, 1000}, {0, 0, 1}, 2),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_labels")));
  // Confusion cells: annotators × K². 3 annotators at K = 16 are 768 cells; a fourth makes
  // 1,024 > 1,000.
  EXPECT_THAT(CheckProjectQuota(quota, {0, 3, 0}, {0, 0, 5}, 16), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {0, 3, 0}, {0, 1, 0}, 16),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_confusion_cells (1000, settings.limits.max_confusion_cells "
                                 "or --max_confusion_cells_per_project) would be passed: the "
                                 "project has 768 confusion cells")));
  // A project already over a lowered limit may still do what adds nothing.
  EXPECT_THAT(CheckProjectQuota(quota, {500, 50, 5000}, {0, 0, 0}, 2), IsOk());
}

}  // namespace
}  // namespace verity::server
