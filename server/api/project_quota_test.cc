#include "server/api/project_quota.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
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
  EXPECT_THAT(CheckProjectQuota(quota, {95, 10, 0}, {5, 0, 1000}, 4), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {95, 10, 0}, {6, 0, 0}, 4),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_items (100, settings.limits.max_items or "
                                 "--max_items_per_project) would be passed: the project has "
                                 "95 items and this call adds 6")));
  EXPECT_THAT(CheckProjectQuota(quota, {0, 10, 0}, {0, 1, 0}, 4),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_annotators")));
  EXPECT_THAT(CheckProjectQuota(quota, {0, 0, 1000}, {0, 0, 1}, 4),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_labels")));
  // Dense confusion cells: annotators × K². 3 annotators at K = 16 (256 cells each) are 768
  // cells; a fourth makes 1,024 > 1,000.
  EXPECT_THAT(CheckProjectQuota(quota, {0, 3, 0}, {0, 0, 5}, 256), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {0, 3, 0}, {0, 1, 0}, 256),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_confusion_cells (1000, settings.limits.max_confusion_cells "
                                 "or --max_confusion_cells_per_project) would be passed: the "
                                 "project has 768 dense confusion cells")));
  // A model without dense confusions (0 cells per annotator) is not bounded by them.
  EXPECT_THAT(CheckProjectQuota(quota, {0, 3, 0}, {0, 7, 0}, 0), IsOk());
  // A project already over a lowered limit may still do what adds nothing.
  EXPECT_THAT(CheckProjectQuota(quota, {500, 50, 5000}, {0, 0, 0}, 4), IsOk());
}

// Feature values: items × item_feature_dim + annotators × annotator_feature_dim. 9 items of
// 100 values and 2 annotators of 50 are 1,000; one more item makes 1,100 > 1,000, and so does
// one more annotator (1,050); a project without features is not bounded by it.
TEST(ProjectQuotaTest, FeatureValuesCountEveryItemAndAnnotatorOfAProjectWithFeatures) {
  ProjectQuota quota;
  quota.max_feature_values = 1000;
  EXPECT_THAT(CheckProjectQuota(quota, {8, 2, 0}, {1, 0, 0}, 0, 100, 50), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {9, 2, 0}, {1, 0, 0}, 0, 100, 50),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_feature_values (1000, settings.limits.max_feature_values "
                                 "or --max_feature_values_per_project) would be passed: the "
                                 "project has 1000 feature values")));
  EXPECT_THAT(CheckProjectQuota(quota, {9, 2, 0}, {0, 1, 0}, 0, 100, 50),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_feature_values")));
  EXPECT_THAT(CheckProjectQuota(quota, {9, 2, 0}, {0, 1, 0}, 0, 100, 0), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {9, 2, 0}, {5, 5, 0}, 0), IsOk());
  v1::ProjectSettings settings;
  settings.mutable_limits()->set_max_feature_values(7);
  EXPECT_EQ(EffectiveQuota(settings, quota).max_feature_values, 7);
  EXPECT_EQ(EffectiveQuota(v1::ProjectSettings(), quota).max_feature_values, 1000);
}

TEST(ProjectQuotaTest, OnlyTheNeuralMethodsKeepDenseConfusions) {
  // Written from the models' documentation: the classical models keep per annotator only the
  // columns of the labels it gave; the neural ones a K x K matrix (or its parameters).
  for (v1::TruthMethod classical :
       {v1::TRUTH_METHOD_UNSPECIFIED, v1::TRUTH_METHOD_MAJORITY_VOTE,
        v1::TRUTH_METHOD_DAWID_SKENE, v1::TRUTH_METHOD_ONE_COIN, v1::TRUTH_METHOD_GLAD,
        v1::TRUTH_METHOD_WAWA, v1::TRUTH_METHOD_ZERO_BASED_SKILL, v1::TRUTH_METHOD_KOS,
        v1::TRUTH_METHOD_MACE, v1::TRUTH_METHOD_BWA,
        v1::TRUTH_METHOD_MMSR, v1::TRUTH_METHOD_AUTO}) {
    EXPECT_EQ(DenseConfusionCellsPerAnnotator(classical, 256), 0) << classical;
  }
  for (v1::TruthMethod neural :
       {v1::TRUTH_METHOD_LIA, v1::TRUTH_METHOD_CROWDLAYER, v1::TRUTH_METHOD_TRACE_REG,
        v1::TRUTH_METHOD_CONAL, v1::TRUTH_METHOD_CMM}) {
    EXPECT_EQ(DenseConfusionCellsPerAnnotator(neural, 256), 65536) << neural;
  }
  // ibcc (models/ibcc.h) keeps a dense K x K Dirichlet per annotator.
  EXPECT_EQ(DenseConfusionCellsPerAnnotator(v1::TRUTH_METHOD_IBCC, 256), 65536);
  // ebcc (models/ebcc.h) one per subtype, 10 subtypes.
  EXPECT_EQ(DenseConfusionCellsPerAnnotator(v1::TRUTH_METHOD_EBCC, 256), 655360);
}

TEST(ProjectQuotaTest, SwitchingToADenseMethodIsRefusedWhenTheProjectIsTooLarge) {
  ProjectQuota quota;
  quota.max_confusion_cells = 1'000'000;
  // 15 annotators at K = 256: 983,040 cells fit; 16 make 1,048,576.
  EXPECT_THAT(CheckMethodFitsQuota(quota, v1::TRUTH_METHOD_CROWDLAYER, 256, 15), IsOk());
  EXPECT_THAT(CheckMethodFitsQuota(quota, v1::TRUTH_METHOD_CROWDLAYER, 256, 16),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_confusion_cells (1000000")));
  EXPECT_THAT(CheckMethodFitsQuota(quota, v1::TRUTH_METHOD_DAWID_SKENE, 256, 2'000'000), IsOk());
}

// Promise (projects.proto ProjectLimits: "0 = the server's default"; project_quota.h
// EffectiveQuota: "its settings' non-zero overrides, else `defaults`"): each of the four limits
// is overridden by its own setting, and only by it.
TEST(ProjectQuotaTest, EachLimitIsOverriddenByItsOwnSetting) {
  const ProjectQuota defaults{100, 10, 1000, 5000};
  v1::ProjectSettings settings;
  settings.mutable_limits()->set_max_items(7);
  settings.mutable_limits()->set_max_annotators(8);
  settings.mutable_limits()->set_max_labels(9);
  settings.mutable_limits()->set_max_confusion_cells(11);
  ProjectQuota quota = EffectiveQuota(settings, defaults);
  EXPECT_EQ(quota.max_items, 7);
  EXPECT_EQ(quota.max_annotators, 8);
  EXPECT_EQ(quota.max_labels, 9);
  EXPECT_EQ(quota.max_confusion_cells, 11);
  // Zero (unset) keeps every default.
  quota = EffectiveQuota(v1::ProjectSettings(), defaults);
  EXPECT_EQ(quota.max_items, 100);
  EXPECT_EQ(quota.max_annotators, 10);
  EXPECT_EQ(quota.max_labels, 1000);
  EXPECT_EQ(quota.max_confusion_cells, 5000);
}

// Promise (project_quota.h CheckProjectQuota; docs/SECURITY.md "RESOURCE_EXHAUSTED naming the
// limit, its value and the project's size"): each refusal names its own limit, the setting and
// the flag that set it, its value, the current size and what the call adds.
TEST(ProjectQuotaTest, EachRefusalNamesItsOwnLimitFlagValueAndSizes) {
  const ProjectQuota quota{100, 10, 1000, 1000};
  EXPECT_THAT(CheckProjectQuota(quota, {0, 10, 0}, {0, 2, 0}, 0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_annotators (10, settings.limits.max_annotators or "
                                 "--max_annotators_per_project) would be passed: the project has "
                                 "10 annotators and this call adds 2")));
  EXPECT_THAT(CheckProjectQuota(quota, {0, 0, 999}, {0, 0, 3}, 0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_labels (1000, settings.limits.max_labels or "
                                 "--max_labels_per_project) would be passed: the project has "
                                 "999 labels and this call adds 3")));
  // Adding items alone never passes an annotator-based limit, and the other way round.
  EXPECT_THAT(CheckProjectQuota(quota, {0, 10, 0}, {50, 0, 0}, 100), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {100, 0, 0}, {0, 5, 0}, 0), IsOk());
}

// Promise (project_quota.h: a limit is what a project may hold — "OK when `current` plus
// `added` stays within `quota`", as CheckProjectQuota's test above checks at the boundary):
// switching to a dense method that keeps exactly max_confusion_cells cells is allowed, one
// annotator's worth more is not, so the two checks agree on what fits.
TEST(ProjectQuotaTest, SwitchingToADenseMethodExactlyAtTheLimitIsAllowed) {
  ProjectQuota quota;
  quota.max_confusion_cells = 15 * 65536;
  EXPECT_THAT(CheckMethodFitsQuota(quota, v1::TRUTH_METHOD_CROWDLAYER, 256, 15), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {0, 14, 0}, {0, 1, 0}, 65536), IsOk());
  EXPECT_THAT(CheckMethodFitsQuota(quota, v1::TRUTH_METHOD_CROWDLAYER, 256, 16),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_confusion_cells")));
  // docs/SECURITY.md: the default 16,000,000 allows 244 annotators at 256 classes.
  EXPECT_THAT(CheckMethodFitsQuota(ProjectQuota(), v1::TRUTH_METHOD_CROWDLAYER, 256, 244), IsOk());
  EXPECT_THAT(CheckMethodFitsQuota(ProjectQuota(), v1::TRUTH_METHOD_CROWDLAYER, 256, 245),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// Promise (project_quota.h, ProjectQuota::max_revisions): revised and stale labels are held to
// their own limit, at the boundary like the others, and an override replaces the default.
TEST(ProjectQuotaTest, RevisionsKeptInHistoryHaveTheirOwnLimit) {
  ProjectQuota quota;
  quota.max_revisions = 10;
  EXPECT_THAT(CheckProjectQuota(quota, {0, 0, 0, 8}, {0, 0, 0, 2}, 0), IsOk());
  EXPECT_THAT(CheckProjectQuota(quota, {0, 0, 0, 8}, {0, 0, 0, 3}, 0),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("max_revisions (10, settings.limits.max_revisions or "
                                 "--max_revisions_per_project) would be passed: the project "
                                 "has 8 revised or stale labels kept in history and this call "
                                 "adds 3")));
  v1::ProjectSettings settings;
  EXPECT_EQ(EffectiveQuota(settings, quota).max_revisions, 10);
  settings.mutable_limits()->set_max_revisions(4);
  EXPECT_EQ(EffectiveQuota(settings, quota).max_revisions, 4);
  EXPECT_EQ(ProjectQuota().max_revisions, 100'000'000);
}

// Promise (project_quota.h, CheckLimitsNotRaised): a limit may be kept or lowered, never
// raised, and the refusal names the first raised limit with both values.
TEST(ProjectQuotaTest, ALimitMayBeKeptOrLoweredButNotRaised) {
  const ProjectQuota allowed{100, 10, 1000, 1000, 5000, 100};
  EXPECT_THAT(CheckLimitsNotRaised(allowed, allowed), IsOk());
  EXPECT_THAT(CheckLimitsNotRaised({1, 1, 1, 1, 1, 1}, allowed), IsOk());
  const struct {
    ProjectQuota requested;
    const char* message;
  } raised[] = {
      {{101, 10, 1000, 1000, 5000, 100}, "settings.limits.max_items: 101 is above this project's limit 100"},
      {{100, 11, 1000, 1000, 5000, 100}, "settings.limits.max_annotators: 11 is above"},
      {{100, 10, 1001, 1000, 5000, 100}, "settings.limits.max_labels: 1001 is above"},
      {{100, 10, 1000, 1001, 5000, 100}, "settings.limits.max_confusion_cells: 1001 is above"},
      {{100, 10, 1000, 1000, 5001, 100}, "settings.limits.max_feature_values: 5001 is above"},
      {{100, 10, 1000, 1000, 5000, 101}, "settings.limits.max_revisions: 101 is above"},
      // The first raised limit is named, even when another is lowered.
      {{1, 10, 2000, 1, 5000, 100}, "settings.limits.max_labels: 2000"},
  };
  // A 0 the caller sent is the default it stands for.
  v1::ProjectLimits sent;
  sent.set_max_items(50);
  EXPECT_THAT(CheckLimitsNotRaised({100, 11, 1000, 1000, 5000, 100}, allowed, &sent),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("settings.limits.max_annotators: 0 (the server's default, 11) "
                                 "is above this project's limit 10")));
  for (const auto& r : raised) {
    EXPECT_THAT(CheckLimitsNotRaised(r.requested, allowed),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(r.message)))
        << r.message;
  }
}

// Promise (project_quota.h CheckLimitsNotRaised: "a refusal of a 0 says so"): whichever limit
// the caller sent as 0, the refusal says it stands for the server's default and gives that
// default, not only the number.
TEST(ProjectQuotaTest, ARefusedZeroOfAnyLimitIsNamedAsTheServersDefault) {
  const ProjectQuota allowed{100, 10, 1000, 1000, 5000, 100};
  const struct {
    const char* limit;
    void (*zero)(v1::ProjectLimits&);
    ProjectQuota requested;
    const char* value;
  } cases[] = {
      {"max_items",
       [](v1::ProjectLimits& l) { l.set_max_items(0); },
       {101, 10, 1000, 1000, 5000, 100},
       "101"},
      {"max_annotators",
       [](v1::ProjectLimits& l) { l.set_max_annotators(0); },
       {100, 11, 1000, 1000, 5000, 100},
       "11"},
      {"max_labels",
       [](v1::ProjectLimits& l) { l.set_max_labels(0); },
       {100, 10, 1001, 1000, 5000, 100},
       "1001"},
      {"max_confusion_cells",
       [](v1::ProjectLimits& l) { l.set_max_confusion_cells(0); },
       {100, 10, 1000, 1001, 5000, 100},
       "1001"},
      {"max_feature_values",
       [](v1::ProjectLimits& l) { l.set_max_feature_values(0); },
       {100, 10, 1000, 1000, 5001, 100},
       "5001"},
      {"max_revisions",
       [](v1::ProjectLimits& l) { l.set_max_revisions(0); },
       {100, 10, 1000, 1000, 5000, 101},
       "101"},
  };
  for (const auto& c : cases) {
    // Every other limit sent as its allowed value; this one as 0.
    v1::ProjectLimits sent;
    sent.set_max_items(100);
    sent.set_max_annotators(10);
    sent.set_max_labels(1000);
    sent.set_max_confusion_cells(1000);
    sent.set_max_feature_values(5000);
    sent.set_max_revisions(100);
    c.zero(sent);
    EXPECT_THAT(CheckLimitsNotRaised(c.requested, allowed, &sent),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         HasSubstr(absl::StrCat("settings.limits.", c.limit,
                                                ": 0 (the server's default, ", c.value, ")"))))
        << c.limit;
  }
}

}  // namespace
}  // namespace verity::server
