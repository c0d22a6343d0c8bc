#include "server/assignment/item_assigner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "models/annotation_matrix.h"
#include "models/calibrated_truth_model.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"
#include "server/state/information_gain.h"
#include "models/truth_model_factory.h"

namespace verity::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Contains;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// Items 0..4, annotators 0..2 of a binary project under majority vote (version 0):
//   item 0: 3 agreeing labels (a0, a1, a2)  — confident
//   item 1: 1 label by a0                   — fairly sure
//   item 2: 2 disagreeing labels (a0, a1)   — uncertain
//   item 3: no labels                       — uniform
//   item 4: no labels, gold class 1
std::unique_ptr<LiveProject> MakeProject() {
  LiveProject::Identity id;
  id.project_id = 1;
  id.name = "p";
  id.classes = {"no", "yes"};
  LiveProject::StoredState stored;
  for (int i = 0; i < 5; ++i) stored.item_ids.push_back(absl::StrCat("i", i));
  stored.gold = {-1, -1, -1, -1, 1};
  for (int a = 0; a < 3; ++a) stored.annotator_ids.push_back(absl::StrCat("a", a));
  stored.labels = {{0, 0, 1, 1}, {0, 1, 1, 2}, {0, 2, 1, 3}, {1, 0, 0, 4}, {2, 0, 0, 5}, {2, 1, 1, 6}};
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  auto project = LiveProject::Create(id, settings, std::move(stored));
  EXPECT_TRUE(project.ok()) << project.status();
  return std::move(*project);
}

std::vector<int32_t> Items(const std::vector<ItemSuggestion>& s) {
  std::vector<int32_t> items;
  for (const auto& x : s) items.push_back(x.item);
  return items;
}

TEST(ItemAssignerTest, NeverSuggestsLabelledGoldOrResolvedItems) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.confidence_target = 0.9;
  rules.min_labels = 2;
  // a0 labelled 0, 1, 2; 4 is gold; so only 3 remains for a0.
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 0, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(3));
  // For a2 (labelled only item 0): item 0 is resolved anyway (3 labels, confident).
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), Not(Contains(0)));
  EXPECT_THAT(Items(ranked), Not(Contains(4)));
  EXPECT_EQ(ranked.size(), 3u);
}

TEST(ItemAssignerTest, InformationGainPrefersTheMostUncertainItemsAndReportsGain) {
  auto project = MakeProject();
  AssignmentRules rules;  // information gain, no resolution rule
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, /*new annotator*/ -1,
                                      2, std::nullopt, kNow, 7);
  ASSERT_EQ(ranked.size(), 2u);
  // Items 2 (1 vs 1) and 3 (no labels) are both at 50/50 under majority vote, so their gains
  // are equal; the ranking divides the gain by 1 + the labels on the item, so 3 comes first.
  EXPECT_THAT(Items(ranked), ElementsAre(3, 2));
  EXPECT_GT(ranked[0].gain, 0.0);
  EXPECT_DOUBLE_EQ(ranked[0].gain, ranked[1].gain);  // the reported gain is not discounted
  EXPECT_GT(ranked[0].p_correct, 0.0);
}

TEST(ItemAssignerTest, LeasesCountTowardTheMaximumAndBlockTheLastSlot) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.max_labels = 2;
  // Item 1 has one label; a lease by a1 fills its last slot, so a2 is not sent there.
  project->leases().Add(1, 1, kNow + absl::Minutes(5));
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt, kNow, 3);
  EXPECT_THAT(Items(ranked), Not(Contains(1)));
  EXPECT_THAT(Items(ranked), Not(Contains(2)));  // two labels: full
  // Once the lease expires, the slot is free again.
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt,
                                 kNow + absl::Minutes(6), 3);
  EXPECT_THAT(Items(ranked), Contains(1));
  // A committed label from the leased annotator releases the lease at once.
  project->leases().Add(1, 1, kNow + absl::Minutes(5));
  project->ApplyCommitted({{1, "i1", 1, "a1", 1, 7, true}});
  EXPECT_FALSE(project->leases().Has(1, 1, kNow));
}

TEST(ItemAssignerTest, HigherPriorityComesFirstAndCandidatesRestrictTheChoice) {
  auto project = MakeProject();
  project->ApplyItems({{1, "i1", std::nullopt, 5.0}});
  AssignmentRules rules;
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 1, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(1));
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 5,
                                 std::vector<int32_t>{0, 3}, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(3, 0));  // 0 is confident, so last
}

TEST(ItemAssignerTest, NewAnnotatorsAreSentGoldItemsFirst) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 1;
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 2, std::nullopt, kNow, 1);
  ASSERT_EQ(ranked.size(), 2u);
  EXPECT_EQ(ranked[0].item, 4);
  EXPECT_NE(ranked[1].item, 4);
  // An annotator with enough labels is not.
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 0, 2, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), Not(Contains(4)));
}

TEST(ItemAssignerTest, UniformPolicyPicksTheFewestLabelledItems) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.policy = v1::ASSIGNMENT_POLICY_UNIFORM;
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 2, std::nullopt, kNow, 9);
  EXPECT_THAT(Items(ranked), ElementsAre(3, 1));  // 0 labels, then 1 label
}

// projects.proto: UNCERTAINTY sends the items of highest posterior entropy first, whoever
// asks (the entropies are computed here from the served posteriors). The asker's own items
// are still left out.
TEST(ItemAssignerTest, UncertaintyPolicyRanksByPosteriorEntropyWhoeverAsks) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.policy = v1::ASSIGNMENT_POLICY_UNCERTAINTY;
  const auto snapshot = project->snapshot();
  auto entropy = [&](int32_t item) {
    double h = 0;
    for (double p : snapshot->posteriors.probabilities(item)) h -= p > 0 ? p * std::log(p) : 0;
    return h;
  };
  for (int32_t annotator : {-1, 2}) {
    auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, annotator, 10, std::nullopt,
                                        kNow, 5);
    // Every item but the gold one (4), and but the asker's own (a2 labelled item 0).
    const std::vector<int32_t> open = annotator == 2 ? std::vector<int32_t>{1, 2, 3}
                                                     : std::vector<int32_t>{0, 1, 2, 3};
    std::vector<int32_t> items = Items(ranked);
    std::vector<int32_t> sorted = items;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, open) << annotator;
    for (size_t r = 1; r < items.size(); ++r) {
      EXPECT_GE(entropy(items[r - 1]), entropy(items[r]) - 1e-12)
          << "annotator " << annotator << ": item " << items[r - 1] << " before " << items[r];
    }
    // Items 2 (one label each way) and 3 (none) are at 50/50: first, in either order.
    ASSERT_GE(items.size(), 2u);
    EXPECT_THAT(std::vector<int32_t>(items.begin(), items.begin() + 2),
                ::testing::UnorderedElementsAre(2, 3));
  }
}

// projects.proto: RANDOM picks an open item uniformly at random (by the request's seed). Over
// 400 seeds, spread over 64 bits (consecutive ones would cycle through the 4 items whatever
// the mixing), each of the 4 open items comes first about 100 times (a binomial's standard
// deviation is 8.7; the bounds are 4.6 of them), and the gold item never.
TEST(ItemAssignerTest, RandomPolicyPicksEachOpenItemAboutEquallyOften) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.policy = v1::ASSIGNMENT_POLICY_RANDOM;
  std::map<int32_t, int> first;
  for (uint64_t s = 1; s <= 400; ++s) {
    auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 1,
                                        std::nullopt, kNow, s * 0x9E3779B97F4A7C15ull);
    ASSERT_EQ(ranked.size(), 1u);
    ++first[ranked[0].item];
  }
  EXPECT_EQ(first.count(4), 0u);
  for (int32_t item = 0; item < 4; ++item) {
    EXPECT_GE(first[item], 60) << item;
    EXPECT_LE(first[item], 140) << item;
  }
}

TEST(ItemAssignerTest, SuggestAnnotatorsSkipsThoseWhoLabelledTheItem) {
  auto project = MakeProject();
  const std::vector<int32_t> all = {0, 1, 2, -1};
  auto ranked = RankAnnotatorsForItem(*project, *project->snapshot(), 2, 10, all, kNow);
  std::vector<int32_t> chosen;
  for (const auto& s : ranked) chosen.push_back(all[s.candidate]);
  EXPECT_THAT(chosen, testing::UnorderedElementsAre(2, -1));
}

// A binary majority-vote project (version 0, no fit) with the given items' gold classes (-1 =
// none), annotators a0..a<annotators-1> and stored labels {item, annotator, label, seq}.
std::unique_ptr<LiveProject> MakeProjectWith(std::vector<int32_t> gold, int32_t annotators,
                                             std::vector<LiveProject::StoredState::Label> labels) {
  LiveProject::Identity id;
  id.project_id = 1;
  id.name = "p";
  id.classes = {"no", "yes"};
  LiveProject::StoredState stored;
  for (size_t i = 0; i < gold.size(); ++i) stored.item_ids.push_back(absl::StrCat("i", i));
  stored.gold = std::move(gold);
  for (int a = 0; a < annotators; ++a) stored.annotator_ids.push_back(absl::StrCat("a", a));
  stored.labels = std::move(labels);
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  auto project = LiveProject::Create(id, settings, std::move(stored));
  EXPECT_TRUE(project.ok()) << project.status();
  return std::move(*project);
}

// projects.proto, AssignmentSettings: an item is resolved when its confidence reached
// confidence_target "and min_labels_per_item" (docs/ASSIGNMENT.md: "with at least
// min_labels_per_item labels"). Item 0 has 2 agreeing labels (a confident posterior, checked
// below); items 1 and 2 have none. With target 0.9 and a minimum of 2 the item is resolved
// (2 >= 2) and a new annotator is not sent it; with a minimum of 3 (set through
// AssignmentSettings, so FromSettings must carry it) it is still open.
TEST(ItemAssignerTest, AConfidentItemIsResolvedExactlyAtTheMinimumLabels) {
  auto project = MakeProjectWith({-1, -1, -1}, 2, {{0, 0, 1, 1}, {0, 1, 1, 2}});
  const auto snapshot = project->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_labels(0), 2);
  ASSERT_GE(snapshot->posteriors.probabilities(0)[1], 0.9);
  v1::AssignmentSettings settings;
  settings.set_confidence_target(0.9);
  settings.set_min_labels_per_item(2);
  AssignmentRules rules = AssignmentRules::FromSettings(settings);
  EXPECT_TRUE(IsResolved(snapshot->posteriors, 0, 0, rules));
  auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ::testing::UnorderedElementsAre(1, 2));
  settings.set_min_labels_per_item(3);
  rules = AssignmentRules::FromSettings(settings);
  EXPECT_FALSE(IsResolved(snapshot->posteriors, 0, 0, rules));
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ::testing::UnorderedElementsAre(0, 1, 2));
}

// Items 0, 1, 2 are gold with 0, 1 and 2 labels; 3 and 4 are not gold.
//   a0 labelled gold item 1            (1 label)
//   a1 labelled gold item 2 and item 4 (2 labels)
//   a2 labelled gold item 2            (1 label)
std::unique_ptr<LiveProject> MakeGoldProject() {
  return MakeProjectWith({1, 0, 1, -1, -1}, 3,
                         {{1, 0, 0, 1}, {2, 1, 1, 2}, {2, 2, 1, 3}, {4, 1, 0, 4}});
}

// projects.proto: "An annotator with fewer labels than this [gold_items_for_new_annotators =
// N] is first sent gold (control) items" that they have not labelled, fewest labels first
// (item_assigner.h), until they would reach N labels: N - (their labels) gold items, then the
// ordinary ranking (which never includes gold). With N = 2:
//   - a new annotator (0 labels), k = 3: gold 0 (0 labels), gold 1 (1 label), then item 3 or 4;
//   - a0 and a2 (1 label each): exactly one gold item, the least labelled they did not label
//     (a0 labelled gold 1, so gold 0; a2 too: gold 0);
//   - a1 (2 labels = N): no gold item, and a short list as for anyone else (ShortlistItems is
//     empty only "when the annotator is still sent gold items");
//   - with N = 3, a0 (1 label) is sent two gold items: 0, then 2 (never 1, which a0 labelled);
//   - candidates restrict the gold items too.
TEST(ItemAssignerTest, NewAnnotatorsGetTheLeastLabelledGoldItemsUpToTheSetCount) {
  auto project = MakeGoldProject();
  const auto snapshot = project->snapshot();
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 2;
  auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 3, std::nullopt, kNow, 1);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].item, 0);
  EXPECT_EQ(ranked[1].item, 1);
  EXPECT_THAT(ranked[2].item, ::testing::AnyOf(3, 4));

  for (int32_t annotator : {0, 2}) {
    ranked = RankItemsForAnnotator(*project, *snapshot, rules, annotator, 3, std::nullopt, kNow, 1);
    ASSERT_EQ(ranked.size(), 3u) << annotator;
    EXPECT_EQ(ranked[0].item, 0) << annotator;
    EXPECT_THAT(ranked[1].item, ::testing::AnyOf(3, 4)) << annotator;
    EXPECT_THAT(ranked[2].item, ::testing::AnyOf(3, 4)) << annotator;
  }

  ranked = RankItemsForAnnotator(*project, *snapshot, rules, 1, 3, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(3));  // a1 labelled 4; no gold.
  const Shortlist shortlist = ShortlistItems(*project, rules, 1, 3, std::nullopt, kNow, 1);
  EXPECT_EQ(shortlist.size, 3 * 3 + 16);
  EXPECT_THAT(Items(shortlist.items), ElementsAre(3));

  rules.gold_items_for_new_annotators = 3;
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, 0, 3, std::nullopt, kNow, 1);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].item, 0);
  EXPECT_EQ(ranked[1].item, 2);
  EXPECT_THAT(ranked[2].item, ::testing::AnyOf(3, 4));

  rules.gold_items_for_new_annotators = 2;
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 3, std::vector<int32_t>{1, 3},
                                 kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(1, 3));
}

// projects.proto, AssignmentSettings: "Zero values mean 'server default'": policy
// INFORMATION_GAIN (AssignmentPolicy UNSPECIFIED), min_labels_per_item 1, max 0 (unlimited),
// confidence_target 0 (never), lease_seconds 600, gold_items_for_new_annotators 0 (off). Set
// values are taken as they are.
TEST(ItemAssignerTest, AssignmentSettingsMapToRulesWithTheDocumentedDefaults) {
  const AssignmentRules defaults = AssignmentRules::FromSettings(v1::AssignmentSettings());
  EXPECT_EQ(defaults.policy, v1::ASSIGNMENT_POLICY_INFORMATION_GAIN);
  EXPECT_EQ(defaults.min_labels, 1);
  EXPECT_EQ(defaults.max_labels, 0);
  EXPECT_EQ(defaults.confidence_target, 0.0);
  EXPECT_EQ(defaults.lease, absl::Seconds(600));
  EXPECT_EQ(defaults.gold_items_for_new_annotators, 0);

  v1::AssignmentSettings settings;
  settings.set_policy(v1::ASSIGNMENT_POLICY_UNIFORM);
  settings.set_min_labels_per_item(3);
  settings.set_max_labels_per_item(7);
  settings.set_confidence_target(0.95);
  settings.set_lease_seconds(45);
  settings.set_gold_items_for_new_annotators(2);
  const AssignmentRules set = AssignmentRules::FromSettings(settings);
  EXPECT_EQ(set.policy, v1::ASSIGNMENT_POLICY_UNIFORM);
  EXPECT_EQ(set.min_labels, 3);
  EXPECT_EQ(set.max_labels, 7);
  EXPECT_EQ(set.confidence_target, 0.95);
  EXPECT_EQ(set.lease, absl::Seconds(45));
  EXPECT_EQ(set.gold_items_for_new_annotators, 2);
}

// projects.proto: UNIFORM is "fewest labels (live + leased) first". In MakeProject, item 3
// has no label but is leased to a0 and a1 (2), item 1 has 1 label: a2 is sent item 1 before
// item 3.
TEST(ItemAssignerTest, UniformPolicyCountsLeasesAsLabels) {
  auto project = MakeProject();
  project->leases().Add(3, 0, kNow + absl::Minutes(5));
  project->leases().Add(3, 1, kNow + absl::Minutes(5));
  AssignmentRules rules;
  rules.policy = v1::ASSIGNMENT_POLICY_UNIFORM;
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt,
                                      kNow, 9);
  const std::vector<int32_t> items = Items(ranked);
  ASSERT_THAT(items, ::testing::UnorderedElementsAre(1, 2, 3));
  EXPECT_EQ(items[0], 1);  // 1 (1 label) before 2 and 3 (2 each, live + leased).
}

// projects.proto: INFORMATION_GAIN ranks by the gain "divided by 1 + the labels already on the
// item (live + leased)". Items 2 (1 vs 1) and 3 (none) of MakeProject are both at 50/50, so
// their plain gains are equal; unleased, 3 comes first (1/1 > 1/3). Leased to a0, a1 and a2,
// item 3 counts 3 (1/4 < 1/3): a new annotator is sent item 2 first.
TEST(ItemAssignerTest, InformationGainDiscountCountsLeases) {
  auto project = MakeProject();
  for (int32_t a : {0, 1, 2}) project->leases().Add(3, a, kNow + absl::Minutes(5));
  AssignmentRules rules;
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 2, std::nullopt,
                                      kNow, 7);
  EXPECT_THAT(Items(ranked), ElementsAre(2, 3));
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 2,
                                 std::vector<int32_t>{3, 2}, kNow, 7);
  EXPECT_THAT(Items(ranked), ElementsAre(2, 3));
}

// item_assigner.h, RankAnnotatorsForItem: annotators who "hold a lease on" the item are
// skipped. Item 3 of MakeProject has no label; a0 holds a lease on it.
TEST(ItemAssignerTest, SuggestAnnotatorsSkipsThoseHoldingALease) {
  auto project = MakeProject();
  project->leases().Add(3, 0, kNow + absl::Minutes(5));
  const std::vector<int32_t> all = {0, 1, 2, -1};
  auto ranked = RankAnnotatorsForItem(*project, *project->snapshot(), 3, 10, all, kNow);
  std::vector<int32_t> chosen;
  for (const auto& s : ranked) chosen.push_back(all[s.candidate]);
  EXPECT_THAT(chosen, testing::UnorderedElementsAre(1, 2, -1));
}

// docs/ASSIGNMENT.md: "Before the project's first fit every annotator is assumed to answer
// correctly with probability 0.7". For item 3 of MakeProject (no labels: p = (0.5, 0.5)) and
// confusion [[0.7, 0.3], [0.3, 0.7]], the gain is H(Y) − Σ_z p_z H(C_z) = ln 2 − H(0.7, 0.3)
// = 0.693147 − 0.610864 = 0.082283 nats, and P(correct) = Σ_z p_z C_zz = 0.7.
TEST(ItemAssignerTest, ScoresBeforeTheFirstFitUseThePriorAccuracy) {
  auto project = MakeProject();
  const auto snapshot = project->snapshot();
  ASSERT_EQ(snapshot->model_version, 0);
  ASSERT_DOUBLE_EQ(snapshot->posteriors.probabilities(3)[0], 0.5);
  const double expected_gain = std::log(2.0) + 0.7 * std::log(0.7) + 0.3 * std::log(0.3);
  EXPECT_NEAR(expected_gain, 0.082283, 1e-6);
  AssignmentRules rules;
  for (int32_t annotator : {-1, 1}) {
    auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, annotator, 1,
                                        std::vector<int32_t>{3}, kNow, 1);
    ASSERT_EQ(ranked.size(), 1u);
    EXPECT_NEAR(ranked[0].gain, expected_gain, 1e-9) << annotator;
    EXPECT_NEAR(ranked[0].p_correct, 0.7, 1e-9) << annotator;
  }
  const std::vector<int32_t> who = {1, -1};
  auto annotators = RankAnnotatorsForItem(*project, *snapshot, 3, 2, who, kNow);
  ASSERT_EQ(annotators.size(), 2u);
  for (const auto& s : annotators) {
    EXPECT_NEAR(s.gain, expected_gain, 1e-9);
    EXPECT_NEAR(s.p_correct, 0.7, 1e-9);
  }
}

// Version 1 of `stored`: the ds fit `fitted` over labels up to `watermark`.
void SetDsVersion(const models::TruthModel& fitted, int64_t watermark,
                  LiveProject::StoredState& stored) {
  storage::ModelVersionRecord version;
  version.version = 1;
  version.method = "ds";
  version.parameters = fitted.Serialize();
  version.watermark = watermark;
  stored.latest_version = version;
}

// A Dawid-Skene project over 5 chunks of items: labels 1 to 4 per item, a few gold items, a
// few with a priority, so that chunks differ in their bounds.
std::unique_ptr<LiveProject> MakeLargeProject() {
  constexpr int32_t kItems = 5 * PosteriorTable::kChunkItems - 300, kClasses = 3, kAnnotators = 8;
  models::testing::SyntheticCrowdSpec spec;
  spec.num_items = kItems;
  spec.num_classes = kClasses;
  spec.labels_per_item = 4;
  for (int a = 0; a < kAnnotators; ++a) {
    spec.confusions.push_back(models::testing::SymmetricConfusion(kClasses, 0.45 + 0.06 * a));
  }
  spec.seed = 23;
  const models::testing::SyntheticCrowd crowd = models::testing::GenerateSyntheticCrowd(spec);
  std::unique_ptr<models::TruthModel> fitted = *models::CreateTruthModel("ds", kClasses, {});
  EXPECT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());

  LiveProject::Identity id;
  id.project_id = 1;
  id.name = "large";
  id.classes = {"a", "b", "c"};
  LiveProject::StoredState stored;
  for (int32_t i = 0; i < kItems; ++i) stored.item_ids.push_back(absl::StrCat("i", i));
  stored.gold.assign(kItems, -1);
  stored.priority.assign(kItems, 0.0);
  for (int32_t i = 0; i < kItems; i += 97) stored.gold[i] = i % kClasses;
  for (int32_t i = 5; i < kItems; i += 1013) stored.priority[i] = 1.0 + i % 3;
  for (int a = 0; a < kAnnotators; ++a) stored.annotator_ids.push_back(absl::StrCat("w", a));
  int64_t seq = 0;
  // Items keep 1 + i % 4 of their 4 labels (item-major in the crowd), so that posteriors, and
  // the scores bounds must not cut, differ from item to item.
  for (size_t n = 0; n < crowd.annotations.size(); ++n) {
    const models::Annotation& a = crowd.annotations[n];
    if (static_cast<int32_t>(n % 4) > a.item % 4) continue;
    stored.labels.push_back({a.item, a.annotator, a.label, ++seq});
  }
  SetDsVersion(*fitted, seq, stored);
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  EXPECT_TRUE(project.ok()) << project.status();
  return std::move(*project);
}

TEST(ItemAssignerTest, SuggestAnnotatorsRanksTheMoreAccurateAnnotatorsFirst) {
  // MakeLargeProject's annotators w0..w7 answer correctly with probability 0.45 + 0.06 a, so
  // a better annotator tells more about any item: the ranking must follow a. Item 4 keeps one
  // label of four, so at least seven annotators are ranked.
  auto project = MakeLargeProject();
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  auto ranked = RankAnnotatorsForItem(*project, *project->snapshot(), /*item=*/4, 8, all, kNow);
  ASSERT_GE(ranked.size(), 7u);
  std::vector<int32_t> order;
  for (const auto& s : ranked) order.push_back(all[s.candidate]);
  EXPECT_TRUE(std::is_sorted(order.rbegin(), order.rend())) << testing::PrintToString(order);
  EXPECT_GT(ranked.front().gain, ranked.back().gain);
  EXPECT_GT(ranked.front().p_correct, ranked.back().p_correct);
}

TEST(ItemAssignerTest, SkippingChunksRanksAsConsideringEveryItem) {
  auto project = MakeLargeProject();
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_chunks(), 5);
  // The same items in the same order through the candidate path, which skips nothing.
  std::vector<int32_t> every_item(snapshot->posteriors.num_items());
  for (size_t i = 0; i < every_item.size(); ++i) every_item[i] = static_cast<int32_t>(i);
  for (v1::AssignmentPolicy policy :
       {v1::ASSIGNMENT_POLICY_INFORMATION_GAIN, v1::ASSIGNMENT_POLICY_UNCERTAINTY,
        v1::ASSIGNMENT_POLICY_UNIFORM, v1::ASSIGNMENT_POLICY_RANDOM}) {
    for (int32_t annotator : {0, 3, 7}) {
      for (int32_t k : {1, 10, 200}) {
        SCOPED_TRACE(absl::StrCat("policy ", policy, " annotator ", annotator, " k ", k));
        AssignmentRules rules;
        rules.policy = policy;
        const std::vector<ItemSuggestion> scanned = RankItemsForAnnotator(
            *project, *snapshot, rules, annotator, k, std::nullopt, kNow, 5);
        const std::vector<ItemSuggestion> listed = RankItemsForAnnotator(
            *project, *snapshot, rules, annotator, k, every_item, kNow, 5);
        ASSERT_EQ(scanned.size(), static_cast<size_t>(k));
        EXPECT_EQ(Items(scanned), Items(listed));
      }
    }
  }
}

// Concurrent suggestions between the two halves of RankAndLeaseItems, simulated by leases
// added in between: the result must be what a full ranking under the lock returns then.
TEST(ItemAssignerTest, AShortlistRanksAsAFullRankingAfterOtherLeases) {
  auto project = MakeLargeProject();
  constexpr int32_t kAnnotator = 2, kK = 10;
  for (int32_t leased_by_others : {0, 5, 30, 45}) {
    for (v1::AssignmentPolicy policy :
         {v1::ASSIGNMENT_POLICY_INFORMATION_GAIN, v1::ASSIGNMENT_POLICY_UNIFORM}) {
      SCOPED_TRACE(absl::StrCat("policy ", policy, ", ", leased_by_others, " items leased"));
      AssignmentRules rules;
      rules.policy = policy;
      rules.max_labels = 5;  // A lease can resolve an item.
      const absl::Time now = kNow + absl::Minutes(leased_by_others + 100 * policy);
      const Shortlist shortlist =
          ShortlistItems(*project, rules, kAnnotator, kK, std::nullopt, now, 3);
      ASSERT_EQ(shortlist.size, 3 * kK + 16);
      ASSERT_EQ(shortlist.items.size(), static_cast<size_t>(shortlist.size));
      // Other annotators (and this one, once) lease the best of the list meanwhile.
      for (int32_t i = 0; i < leased_by_others; ++i) {
        const int32_t annotator = i == 3 ? kAnnotator : 4 + i % 4;
        project->leases().Add(shortlist.items[i].item, annotator, now + absl::Seconds(30));
      }
      const std::vector<ItemSuggestion> from_shortlist =
          RankFromShortlist(*project, shortlist, rules, kAnnotator, kK, std::nullopt, now, 3);
      const std::vector<ItemSuggestion> full = RankItemsForAnnotator(
          *project, *shortlist.snapshot, rules, kAnnotator, kK, std::nullopt, now, 3);
      ASSERT_EQ(from_shortlist.size(), static_cast<size_t>(kK));
      EXPECT_EQ(Items(from_shortlist), Items(full));
    }
  }
}

TEST(ItemAssignerTest, RankAndLeaseLeasesWhatItSuggests) {
  auto project = MakeLargeProject();
  AssignmentRules rules;
  const std::vector<ItemSuggestion> first = RankAndLeaseItems(
      *project, rules, 1, 5, std::nullopt, kNow, kNow + absl::Minutes(10), 8);
  ASSERT_EQ(first.size(), 5u);
  for (const ItemSuggestion& s : first) EXPECT_TRUE(project->leases().Has(s.item, 1, kNow));
  // The same annotator asking again is sent other items.
  const std::vector<ItemSuggestion> second = RankAndLeaseItems(
      *project, rules, 1, 5, std::nullopt, kNow, kNow + absl::Minutes(10), 8);
  for (const ItemSuggestion& s : second) EXPECT_THAT(Items(first), Not(Contains(s.item)));
}

TEST(ItemAssignerTest, ConcurrentSuggestionsNeverOverfillAnItem) {
  auto project = MakeLargeProject();
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  AssignmentRules rules;
  rules.max_labels = 5;  // Items with 4 labels have one slot left.
  constexpr int kThreads = 4, kCalls = 40, kK = 10;
  std::vector<std::vector<int32_t>> suggested(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        // Annotators 0..7 in turn; a pass of each thread asks for each of them.
        const int32_t annotator = (t + c) % 8;
        for (const ItemSuggestion& s : RankAndLeaseItems(*project, rules, annotator, kK,
                                                         std::nullopt, kNow,
                                                         kNow + absl::Hours(1), t * 1000 + c)) {
          suggested[t].push_back(s.item);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::map<int32_t, int32_t> times;
  for (const auto& items : suggested) {
    for (int32_t item : items) ++times[item];
  }
  ASSERT_FALSE(times.empty());
  for (const auto& [item, n] : times) {
    EXPECT_LE(snapshot->posteriors.num_labels(item) + n, rules.max_labels) << "item " << item;
  }
}

// Against a brute-force ranking by the exact gain, without any bound: the k items returned must
// be a top k (up to rounding), so no bound may have dropped a better item.
TEST(ItemAssignerTest, InformationGainReturnsATopKOfTheExactScores) {
  auto project = MakeLargeProject();
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  const PosteriorTable& table = snapshot->posteriors;
  for (int32_t annotator : {0, 4, 7}) {
    const std::vector<double> confusion = ScoringConfusion(*snapshot, annotator);
    // (priority, discounted exact gain) of every eligible item.
    std::vector<std::pair<double, double>> keys;
    std::map<int32_t, std::pair<double, double>> key_of;
    for (int32_t i = 0; i < table.num_items(); ++i) {
      if (table.is_gold(i) || project->HasLabelled(i, annotator)) continue;
      const double gain = ExpectedEntropyReduction(table.probabilities(i), confusion) /
                          (1.0 + table.num_labels(i));
      keys.emplace_back(table.priority(i), gain);
      key_of[i] = keys.back();
    }
    std::sort(keys.rbegin(), keys.rend());
    for (int32_t k : {1, 10, 100}) {
      SCOPED_TRACE(absl::StrCat("annotator ", annotator, " k ", k));
      AssignmentRules rules;
      const std::vector<ItemSuggestion> ranked = RankItemsForAnnotator(
          *project, *snapshot, rules, annotator, k, std::nullopt, kNow, 11);
      ASSERT_EQ(ranked.size(), static_cast<size_t>(k));
      const std::pair<double, double> kth = keys[k - 1];
      for (const ItemSuggestion& s : ranked) {
        const std::pair<double, double> key = key_of.at(s.item);
        EXPECT_TRUE(key.first > kth.first ||
                    (key.first == kth.first && key.second >= kth.second - 1e-12))
            << "item " << s.item << " (" << key.first << ", " << key.second
            << ") is below the k-th best (" << kth.first << ", " << kth.second << ")";
      }
    }
  }
}

// A snapshot published between the two halves (a committed label) makes the second half rank
// everything on the new snapshot.
TEST(ItemAssignerTest, AShortlistOfAnOldSnapshotIsRankedAgainOnTheNewOne) {
  auto project = MakeLargeProject();
  AssignmentRules rules;
  rules.max_labels = 5;
  const Shortlist shortlist = ShortlistItems(*project, rules, 2, 10, std::nullopt, kNow, 3);
  // Labels on the short list's best items: they become resolved or less uncertain.
  std::vector<CommittedLabel> labels;
  int64_t seq = 1'000'000;
  for (int32_t i = 0; i < 10; ++i) {
    const int32_t item = shortlist.items[i].item;
    for (int32_t a = 5; a < 8; ++a) {
      if (!project->HasLabelled(item, a)) {
        labels.push_back({item, absl::StrCat("i", item), a, absl::StrCat("w", a), 0, ++seq, true});
      }
    }
  }
  project->ApplyCommitted(labels);
  ASSERT_NE(project->snapshot(), shortlist.snapshot);
  const std::vector<ItemSuggestion> from_shortlist =
      RankFromShortlist(*project, shortlist, rules, 2, 10, std::nullopt, kNow, 3);
  const std::vector<ItemSuggestion> full = RankItemsForAnnotator(
      *project, *project->snapshot(), rules, 2, 10, std::nullopt, kNow, 3);
  EXPECT_EQ(Items(from_shortlist), Items(full));
}


// A binary project of 400 items labelled by 6 annotators each, whose errors are correlated (30 %
// of the items are hard: each annotator is right with probability 0.4 there, 0.9 elsewhere), and
// its latest version a ds fit of those labels with a calibration map (the default). ds alone is
// overconfident on such labels; the served posteriors are the calibrated ones.
struct CorrelatedProject {
  std::unique_ptr<LiveProject> project;
  std::vector<double> raw;  // The fitted ds's own posteriors, by item.
};

CorrelatedProject MakeCorrelatedDsProject(const std::string& calibration) {
  constexpr int32_t kItems = 400, kAnnotators = 6;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  LiveProject::StoredState stored;
  std::vector<models::Annotation> annotations;
  int64_t seq = 0;
  for (int32_t i = 0; i < kItems; ++i) {
    stored.item_ids.push_back(absl::StrCat("i", i));
    stored.gold.push_back(-1);
    const int32_t truth = u(rng) < 0.5 ? 0 : 1;
    const double right = u(rng) < 0.3 ? 0.4 : 0.9;
    for (int32_t a = 0; a < kAnnotators; ++a) {
      const int32_t label = u(rng) < right ? truth : 1 - truth;
      stored.labels.push_back({i, a, label, ++seq});
      annotations.push_back({i, a, label});
    }
  }
  for (int32_t a = 0; a < kAnnotators; ++a) stored.annotator_ids.push_back(absl::StrCat("a", a));
  auto matrix = models::AnnotationMatrix::Build(kItems, kAnnotators, 2, annotations);
  EXPECT_TRUE(matrix.ok()) << matrix.status();
  auto model = models::CreateTruthModel("ds", 2, {});
  EXPECT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->Fit(*matrix, {}, false).ok());
  const auto& calibrated = dynamic_cast<const models::CalibratedTruthModel&>(**model);
  EXPECT_LT(calibrated.calibration().temperature, 1.0);
  storage::ModelVersionRecord version;
  version.version = 1;
  version.method = "ds";
  version.parameters = (*model)->Serialize();
  version.watermark = seq;
  version.num_labels = seq;
  stored.latest_version = version;
  LiveProject::Identity id;
  id.project_id = 2;
  id.name = "correlated";
  id.classes = {"no", "yes"};
  v1::ProjectSettings settings;
  settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  settings.mutable_model()->set_calibration(calibration);
  auto project = LiveProject::Create(id, settings, std::move(stored));
  EXPECT_TRUE(project.ok()) << project.status();
  return {std::move(*project), models::AllPosteriors(calibrated.inner(), *matrix, {})};
}

TEST(ItemAssignerTest, DynamicOverlapComparesTheCalibratedConfidence) {
  AssignmentRules rules;
  rules.confidence_target = 0.99;
  rules.min_labels = 1;
  CorrelatedProject calibrated = MakeCorrelatedDsProject("");
  CorrelatedProject raw = MakeCorrelatedDsProject("none");
  ASSERT_EQ(calibrated.project->model_version(), 1);
  ASSERT_EQ(raw.project->model_version(), 1);
  // Items that ds alone puts at >= 0.99: resolved under the raw posteriors, and (some of them)
  // still open under the served, calibrated ones, so the assigner keeps buying labels for them.
  int raw_resolved = 0, still_open = 0;
  for (int32_t item = 0; item < 400; ++item) {
    const double raw_confidence = std::max(raw.raw[2 * item], raw.raw[2 * item + 1]);
    const PosteriorTable& served = calibrated.project->snapshot()->posteriors;
    const double served_confidence =
        std::max(served.probabilities(item)[0], served.probabilities(item)[1]);
    EXPECT_LE(served_confidence, raw_confidence + 1e-12) << item;
    const bool resolved_raw = IsResolved(raw.project->snapshot()->posteriors, item, 0, rules);
    EXPECT_EQ(resolved_raw, raw_confidence >= 0.99) << item;
    if (!resolved_raw) continue;
    ++raw_resolved;
    if (!IsResolved(served, item, 0, rules)) ++still_open;
  }
  EXPECT_GT(raw_resolved, 100);
  EXPECT_GT(still_open, 0);
  // The assigner offers such an item to a new annotator; under "none" it would not.
  const std::vector<ItemSuggestion> open = RankItemsForAnnotator(
      *calibrated.project, *calibrated.project->snapshot(), rules, -1, 400, std::nullopt, kNow, 1);
  const std::vector<ItemSuggestion> open_raw = RankItemsForAnnotator(
      *raw.project, *raw.project->snapshot(), rules, -1, 400, std::nullopt, kNow, 1);
  EXPECT_EQ(open.size(), open_raw.size() + static_cast<size_t>(still_open));
}


// projects.proto, AssignmentSettings: an item is resolved when its "posterior confidence
// reached" confidence_target (docs/ASSIGNMENT.md: "confidence reached confidence_target").
// Reaching includes equality: with the target set to exactly item 0's confidence (2 agreeing
// labels, min_labels 1), item 0 is resolved and not suggested; with the next larger double
// it is open again. Item 1 (no labels) is open either way (below min_labels).
TEST(ItemAssignerTest, AnItemWhoseConfidenceEqualsTheTargetIsResolved) {
  auto project = MakeProjectWith({-1, -1}, 2, {{0, 0, 1, 1}, {0, 1, 1, 2}});
  const auto snapshot = project->snapshot();
  const absl::Span<const double> p = snapshot->posteriors.probabilities(0);
  const double confidence = std::max(p[0], p[1]);
  ASSERT_GT(confidence, 0.5);
  ASSERT_LT(confidence, 1.0);
  AssignmentRules rules;
  rules.min_labels = 1;
  rules.confidence_target = confidence;
  EXPECT_TRUE(IsResolved(snapshot->posteriors, 0, 0, rules));
  auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(1));
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::vector<int32_t>{0, 1},
                                 kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(1));
  rules.confidence_target = std::nextafter(confidence, 1.0);
  EXPECT_FALSE(IsResolved(snapshot->posteriors, 0, 0, rules));
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ::testing::UnorderedElementsAre(0, 1));
}

// lease_book.h / projects.proto: a lease reserves a slot only "until this time"; an expired
// lease no longer counts toward max_labels_per_item. The candidate-list path counts leases
// separately from the scan of every item, so check it too: item 1 (1 label, max 2) leased
// to a1 is full for a2 while the lease runs, and open (with no lease counted) once it expired.
TEST(ItemAssignerTest, ExpiredLeasesNoLongerCountOnACandidateList) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.max_labels = 2;
  project->leases().Add(1, 1, kNow + absl::Minutes(5));
  const std::vector<int32_t> candidates = {1, 3};
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, candidates,
                                      kNow, 3);
  EXPECT_THAT(Items(ranked), ElementsAre(3));
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, candidates,
                                 kNow + absl::Minutes(6), 3);
  EXPECT_THAT(Items(ranked), Contains(1));
  for (const ItemSuggestion& s : ranked) EXPECT_EQ(s.leases_when_ranked, 0) << s.item;
  // Under UNIFORM, an expired lease does not count as a label either: item 3 (no label, an
  // expired lease) comes before item 1 (1 label).
  project->leases().Add(3, 0, kNow + absl::Minutes(5));
  project->leases().Add(3, 1, kNow + absl::Minutes(5));
  rules.max_labels = 0;
  rules.policy = v1::ASSIGNMENT_POLICY_UNIFORM;
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, candidates,
                                 kNow + absl::Minutes(6), 3);
  EXPECT_THAT(Items(ranked), ElementsAre(3, 1));
}

// item_assigner.h / docs/ASSIGNMENT.md: an item is not suggested to an annotator who "holds a
// lease on it", on the scan of every item, on a candidate list, and for the gold items sent
// to a new annotator; once the lease expired it is suggested again.
TEST(ItemAssignerTest, AnItemIsNotSuggestedAgainToTheAnnotatorHoldingItsLease) {
  auto project = MakeProject();
  project->leases().Add(3, 2, kNow + absl::Minutes(5));
  AssignmentRules rules;
  // a2 labelled item 0, item 4 is gold, a2 holds the lease on 3: items 1 and 2 remain.
  auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt,
                                      kNow, 1);
  EXPECT_THAT(Items(ranked), ::testing::UnorderedElementsAre(1, 2));
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10,
                                 std::vector<int32_t>{3, 1}, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(1));
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt,
                                 kNow + absl::Minutes(6), 1);
  EXPECT_THAT(Items(ranked), Contains(3));
  // a2 has 1 label, fewer than 5: sent gold item 4 first, unless a2 holds a lease on it.
  rules.gold_items_for_new_annotators = 5;
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 1, std::nullopt,
                                 kNow + absl::Minutes(6), 1);
  EXPECT_THAT(Items(ranked), ElementsAre(4));
  project->leases().Add(4, 2, kNow + absl::Minutes(10));
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, std::nullopt,
                                 kNow + absl::Minutes(6), 1);
  EXPECT_THAT(Items(ranked), Not(Contains(4)));
  EXPECT_THAT(Items(ranked), Not(::testing::IsEmpty()));
}

// projects.proto, gold_items_for_new_annotators: gold items "are sent whatever their label
// count (max_labels_per_item does not apply ...)", and assignment.proto: "the resolution rules
// do not apply to them". In MakeGoldProject, gold items 1 (1 label) and 2 (2 agreeing labels)
// are full under max_labels_per_item = 1 and confident under a low confidence_target, yet a
// new annotator owed 3 gold items is sent all three, fewest labels first.
TEST(ItemAssignerTest, GoldItemsForNewAnnotatorsIgnoreTheResolutionRules) {
  auto project = MakeGoldProject();
  const auto snapshot = project->snapshot();
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 3;
  rules.max_labels = 1;
  ASSERT_TRUE(IsResolved(snapshot->posteriors, 1, 0, rules));
  ASSERT_TRUE(IsResolved(snapshot->posteriors, 2, 0, rules));
  auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 3, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0, 1, 2));
  rules.max_labels = 0;
  rules.confidence_target = 0.5;
  rules.min_labels = 1;
  ASSERT_TRUE(IsResolved(snapshot->posteriors, 2, 0, rules));
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 3, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0, 1, 2));
  // a0 (1 label, labelled gold 1) is owed 2: gold 0 and gold 2, though 2 is resolved.
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, 0, 2, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0, 2));
}

// projects.proto, INFORMATION_GAIN: the ranking is by the expected gain "divided by 1 + the
// labels already on the item (live + leased)"; items of higher priority first. Against that
// key computed here (ExpectedEntropyReduction with the scoring confusion), on a candidate list
// of MakeLargeProject items with 1 to 4 labels and a few leases, the whole returned order must
// be non-increasing (up to rounding), and every eligible candidate returned.
TEST(ItemAssignerTest, InformationGainOrdersByGainOverOnePlusLiveAndLeasedLabels) {
  auto project = MakeLargeProject();
  std::shared_ptr<const ProjectSnapshot> snapshot = project->snapshot();
  const PosteriorTable& table = snapshot->posteriors;
  constexpr int32_t kAnnotator = 0;
  std::vector<int32_t> candidates;
  for (int32_t i = 1; i <= 240; ++i) candidates.push_back(i);
  // Leases by other annotators on some items (0 to 2 each).
  for (int32_t i = 1; i <= 240; i += 7) project->leases().Add(i, 5, kNow + absl::Minutes(5));
  for (int32_t i = 1; i <= 240; i += 11) project->leases().Add(i, 6, kNow + absl::Minutes(5));
  const std::vector<double> confusion = ScoringConfusion(*snapshot, kAnnotator);
  const std::vector<int32_t> leases = project->leases().OutstandingOn(candidates, kNow);
  std::map<int32_t, std::pair<double, double>> key_of;
  for (size_t n = 0; n < candidates.size(); ++n) {
    const int32_t i = candidates[n];
    if (table.is_gold(i) || project->HasLabelled(i, kAnnotator)) continue;
    key_of[i] = {table.priority(i), ExpectedEntropyReduction(table.probabilities(i), confusion) /
                                        (1.0 + table.num_labels(i) + leases[n])};
  }
  ASSERT_GT(key_of.size(), 100u);
  AssignmentRules rules;
  const std::vector<ItemSuggestion> ranked = RankItemsForAnnotator(
      *project, *snapshot, rules, kAnnotator, 1000, candidates, kNow, 4);
  ASSERT_EQ(ranked.size(), key_of.size());
  for (size_t r = 1; r < ranked.size(); ++r) {
    const auto& before = key_of.at(ranked[r - 1].item);
    const auto& after = key_of.at(ranked[r].item);
    EXPECT_TRUE(before.first > after.first ||
                (before.first == after.first && before.second >= after.second - 1e-12))
        << "item " << ranked[r - 1].item << " (" << before.first << ", " << before.second
        << ") ranked before item " << ranked[r].item << " (" << after.first << ", "
        << after.second << ")";
  }
}

// item_assigner.h, RankAnnotatorsForItem: "The best k of `annotators` ... by expected gain".
// A ds fit of four good annotators (0.85) and one who is mostly wrong (0.1): the latter's
// labels tell the most about the item (an almost deterministic flip) though they are rarely
// correct, so the ranking by gain puts them first and p_correct does not decide the order.
TEST(ItemAssignerTest, SuggestAnnotatorsRanksByGainNotByProbabilityCorrect) {
  constexpr int32_t kItems = 300, kAnnotators = 5;
  models::testing::SyntheticCrowdSpec spec;
  spec.num_items = kItems;
  spec.num_classes = 2;
  spec.labels_per_item = kAnnotators;
  for (int a = 0; a < 4; ++a) spec.confusions.push_back(models::testing::SymmetricConfusion(2, 0.85));
  spec.confusions.push_back(models::testing::SymmetricConfusion(2, 0.1));
  spec.seed = 7;
  const models::testing::SyntheticCrowd crowd = models::testing::GenerateSyntheticCrowd(spec);
  std::unique_ptr<models::TruthModel> fitted = *models::CreateTruthModel("ds", 2, {});
  ASSERT_TRUE(fitted->Fit(crowd.matrix, {}, false).ok());
  LiveProject::Identity id;
  id.project_id = 3;
  id.name = "flip";
  id.classes = {"no", "yes"};
  LiveProject::StoredState stored;
  for (int32_t i = 0; i < kItems; ++i) stored.item_ids.push_back(absl::StrCat("i", i));
  stored.gold.assign(kItems, -1);
  for (int a = 0; a < kAnnotators; ++a) stored.annotator_ids.push_back(absl::StrCat("a", a));
  int64_t seq = 0;
  for (const models::Annotation& a : crowd.annotations) {
    if (a.item == kItems - 1) continue;  // The last item keeps no label: everyone is eligible.
    stored.labels.push_back({a.item, a.annotator, a.label, ++seq});
  }
  SetDsVersion(*fitted, seq, stored);
  auto project = LiveProject::Create(id, v1::ProjectSettings(), std::move(stored));
  ASSERT_TRUE(project.ok()) << project.status();
  const std::vector<int32_t> all = {0, 1, 2, 3, 4};
  auto ranked = RankAnnotatorsForItem(**project, *(*project)->snapshot(), kItems - 1, 5, all, kNow);
  ASSERT_EQ(ranked.size(), 5u);
  for (size_t r = 1; r < ranked.size(); ++r) {
    EXPECT_GE(ranked[r - 1].gain, ranked[r].gain) << r;
  }
  EXPECT_EQ(all[ranked[0].candidate], 4);
  EXPECT_LT(ranked[0].p_correct, 0.5);
  EXPECT_GT(ranked[1].p_correct, 0.5);
}


// item_assigner.h, "Concurrency": when "a new snapshot was published meanwhile, it ranks
// everything again under the lock", and items of higher priority "always come first". An item
// outside the short list given the highest priority between the two halves (AddItems
// publishes a new snapshot) must come first, as in a full ranking.
TEST(ItemAssignerTest, AShortlistRanksAgainWhenAnItemOutsideItGainsPriority) {
  auto project = MakeLargeProject();
  AssignmentRules rules;
  constexpr int32_t kAnnotator = 2, kK = 10;
  const Shortlist shortlist = ShortlistItems(*project, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  ASSERT_EQ(shortlist.items.size(), static_cast<size_t>(shortlist.size));
  const std::vector<int32_t> listed = Items(shortlist.items);
  const PosteriorTable& table = shortlist.snapshot->posteriors;
  int32_t outside = -1;
  for (int32_t i = 1; i < table.num_items() && outside < 0; ++i) {
    if (!table.is_gold(i) && !project->HasLabelled(i, kAnnotator) &&
        std::find(listed.begin(), listed.end(), i) == listed.end()) {
      outside = i;
    }
  }
  ASSERT_GE(outside, 0);
  project->ApplyItems({{outside, absl::StrCat("i", outside), std::nullopt, 100.0}});
  ASSERT_NE(project->snapshot(), shortlist.snapshot);
  const std::vector<ItemSuggestion> from_shortlist =
      RankFromShortlist(*project, shortlist, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  ASSERT_EQ(from_shortlist.size(), static_cast<size_t>(kK));
  EXPECT_EQ(from_shortlist[0].item, outside);
  const std::vector<ItemSuggestion> full = RankItemsForAnnotator(
      *project, *project->snapshot(), rules, kAnnotator, kK, std::nullopt, kNow, 3);
  EXPECT_EQ(Items(from_shortlist), Items(full));
}


// item_assigner.h: RankFromShortlist "returns what RankItemsForAnnotator(...) would return at
// that moment", and an item is never suggested to an annotator who labelled it. The
// annotator's own labels on all but 5 of the short list's items are committed meanwhile
// (registered, the snapshot not yet published): the 5 left are fewer than k, so the ranking
// must look past the short list and still return k items, none of them labelled by them.
TEST(ItemAssignerTest, AShortlistRanksAgainWhenTheAnnotatorLabelledItsItemsMeanwhile) {
  auto project = MakeLargeProject();
  AssignmentRules rules;
  constexpr int32_t kAnnotator = 2, kK = 10;
  const Shortlist shortlist = ShortlistItems(*project, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  ASSERT_EQ(shortlist.items.size(), static_cast<size_t>(shortlist.size));
  std::vector<CommittedLabel> labels;
  int64_t seq = 1'000'000;
  for (size_t i = 0; i + 5 < shortlist.items.size(); ++i) {
    const int32_t item = shortlist.items[i].item;
    labels.push_back({item, absl::StrCat("i", item), kAnnotator, absl::StrCat("w", kAnnotator), 0,
                      ++seq, true});
  }
  project->RegisterCommitted(labels);
  ASSERT_EQ(project->snapshot(), shortlist.snapshot);
  ASSERT_TRUE(project->HasLabelled(shortlist.items[0].item, kAnnotator));
  const std::vector<ItemSuggestion> from_shortlist =
      RankFromShortlist(*project, shortlist, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  EXPECT_EQ(from_shortlist.size(), static_cast<size_t>(kK));
  for (const ItemSuggestion& s : from_shortlist) {
    EXPECT_FALSE(project->HasLabelled(s.item, kAnnotator)) << s.item;
  }
  const std::vector<ItemSuggestion> full = RankItemsForAnnotator(
      *project, *shortlist.snapshot, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  EXPECT_EQ(Items(from_shortlist), Items(full));
}

// projects.proto, gold_items_for_new_annotators: "a gold item is always resolved" (its class is
// known), whatever its labels and the rules: IsResolved says so for gold item 4 of MakeProject
// (no labels, no lease) under the defaults (no cap, no target), and for none of the open ones.
TEST(ItemAssignerTest, AGoldItemIsAlwaysResolved) {
  auto project = MakeProject();
  const PosteriorTable& table = project->snapshot()->posteriors;
  ASSERT_TRUE(table.is_gold(4));
  ASSERT_EQ(table.num_labels(4), 0);
  const AssignmentRules defaults;
  EXPECT_TRUE(IsResolved(table, 4, 0, defaults));
  for (int32_t item : {1, 2, 3}) EXPECT_FALSE(IsResolved(table, item, 0, defaults)) << item;
}

// docs/ASSIGNMENT.md: an item is resolved when "confidence reached confidence_target with at
// least min_labels_per_item labels"; only max_labels_per_item counts "labels + outstanding
// leases". Item 0 of MakeProjectWith below has 2 agreeing labels (confident); with a minimum of
// 3, two outstanding leases on it do not make 3 labels: it stays open, and a new annotator is
// still sent it.
TEST(ItemAssignerTest, TheMinimumLabelsCountsLabelsNotLeases) {
  auto project = MakeProjectWith({-1, -1}, 4, {{0, 0, 1, 1}, {0, 1, 1, 2}});
  const auto snapshot = project->snapshot();
  AssignmentRules rules;
  rules.min_labels = 3;
  rules.confidence_target = 0.6;
  ASSERT_GE(snapshot->posteriors.probabilities(0)[1], 0.6);
  EXPECT_FALSE(IsResolved(snapshot->posteriors, 0, 2, rules));
  project->leases().Add(0, 2, kNow + absl::Minutes(5));
  project->leases().Add(0, 3, kNow + absl::Minutes(5));
  auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ::testing::UnorderedElementsAre(0, 1));
  ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 10, std::vector<int32_t>{0, 1},
                                 kNow, 1);
  EXPECT_THAT(Items(ranked), ::testing::UnorderedElementsAre(0, 1));
  // Two labels do reach a minimum of 2.
  rules.min_labels = 2;
  EXPECT_TRUE(IsResolved(snapshot->posteriors, 0, 0, rules));
}

// item_assigner.h, ItemSuggestion::leases_when_ranked: the "outstanding leases on the item that
// the ranking counted", on the scan of every item and on a candidate list alike. Item 3 of
// MakeProject leased to a0 and a1 (running) and item 1 to a1 (expired) are suggested to a2 with
// 2 and 0.
TEST(ItemAssignerTest, ASuggestionReportsTheLeasesItsRankingCounted) {
  auto project = MakeProject();
  project->leases().Add(3, 0, kNow + absl::Minutes(5));
  project->leases().Add(3, 1, kNow + absl::Minutes(5));
  project->leases().Add(1, 1, kNow - absl::Minutes(1));
  AssignmentRules rules;
  for (const auto& candidates :
       {std::optional<std::vector<int32_t>>(), std::optional<std::vector<int32_t>>({1, 3})}) {
    auto ranked =
        RankItemsForAnnotator(*project, *project->snapshot(), rules, 2, 10, candidates, kNow, 1);
    std::map<int32_t, int32_t> leases;
    for (const ItemSuggestion& s : ranked) leases[s.item] = s.leases_when_ranked;
    ASSERT_EQ(leases.count(3), 1u) << candidates.has_value();
    ASSERT_EQ(leases.count(1), 1u) << candidates.has_value();
    EXPECT_EQ(leases[3], 2) << candidates.has_value();
    EXPECT_EQ(leases[1], 0) << candidates.has_value();
  }
}

// docs/ASSIGNMENT.md: a new annotator "gets gold items first, of higher `priority` first and,
// within one priority, the least labelled" (labels + outstanding leases, item_assigner.h). In
// MakeGoldProject gold item 2 has the most labels (2); given priority 1 it comes first. Then,
// with the priorities equal again, two leases on gold 0 (0 labels) put it behind gold 1 (1
// label) and level with gold 2 (2 labels), whom it precedes by index.
TEST(ItemAssignerTest, NewAnnotatorsGetGoldItemsByPriorityThenLabelsAndLeases) {
  auto project = MakeGoldProject();
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 3;
  project->ApplyItems({{2, "i2", std::nullopt, 1.0}});
  auto ranked =
      RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 3, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(2, 0, 1));
  project->ApplyItems({{2, "i2", std::nullopt, 0.0}});
  project->leases().Add(0, 1, kNow + absl::Minutes(5));
  project->leases().Add(0, 2, kNow + absl::Minutes(5));
  ranked =
      RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 3, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(1, 0, 2));
}

// item_assigner.h, Shortlist: "empty with `size` 0 when the annotator is still sent gold items
// (that choice is made under the lock, as a full ranking)". a0 (1 label on item 2) is owed one
// gold item under N = 2: of gold 0 (no label) and gold 1 (1 label), the least labelled. Leases
// by a1 and a2 on gold 0 between the two halves make gold 1 the least labelled: the second half
// must send gold 1, as a full ranking does then.
TEST(ItemAssignerTest, AShortlistLeavesTheGoldItemsOfANewAnnotatorToTheLockedHalf) {
  auto project = MakeProjectWith({0, 1, -1, -1, -1}, 4, {{2, 0, 1, 1}, {1, 3, 1, 2}});
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 2;
  const Shortlist shortlist = ShortlistItems(*project, rules, 0, 1, std::nullopt, kNow, 3);
  EXPECT_EQ(shortlist.size, 0);
  EXPECT_THAT(shortlist.items, IsEmpty());
  project->leases().Add(0, 1, kNow + absl::Minutes(5));
  project->leases().Add(0, 2, kNow + absl::Minutes(5));
  const std::vector<ItemSuggestion> from_shortlist =
      RankFromShortlist(*project, shortlist, rules, 0, 1, std::nullopt, kNow, 3);
  EXPECT_THAT(Items(from_shortlist), ElementsAre(1));
  EXPECT_THAT(Items(from_shortlist),
              ElementsAre(RankItemsForAnnotator(*project, *project->snapshot(), rules, 0, 1,
                                                std::nullopt, kNow, 3)[0]
                              .item));
}

// item_assigner.h, RankAnnotatorsForItem: "-1 = unknown to the project: population
// confusion", which the model gives an annotator its fit did not see (truth_model.h,
// AnnotatorConfusion). In MakeLargeProject the annotators' accuracies differ (0.45 to 0.87),
// so the population's gain on an item differs from each annotator's; the unknown candidate is
// scored with the population's.
TEST(ItemAssignerTest, SuggestAnnotatorsScoresAnUnknownCandidateWithThePopulationConfusion) {
  auto project = MakeLargeProject();
  const auto snapshot = project->snapshot();
  constexpr int32_t kItem = 4;
  const absl::Span<const double> p = snapshot->posteriors.probabilities(kItem);
  const std::vector<double> population = snapshot->model->AnnotatorConfusion(-1);
  const double expected = ExpectedEntropyReduction(p, population);
  const std::vector<int32_t> candidates = {-1, 7, 0};
  auto ranked = RankAnnotatorsForItem(*project, *snapshot, kItem, 3, candidates, kNow);
  bool found = false;
  for (const AnnotatorSuggestion& s : ranked) {
    if (candidates[s.candidate] != -1) {
      EXPECT_GT(std::abs(s.gain - expected), 1e-6) << candidates[s.candidate];
      continue;
    }
    found = true;
    EXPECT_NEAR(s.gain, expected, 1e-12);
    EXPECT_NEAR(s.p_correct, ProbabilityCorrect(p, population), 1e-12);
  }
  EXPECT_TRUE(found);
}

// item_assigner.h, "Concurrency": the short list is ranked from "while at least k of the short
// list kept their lease counts and eligibility"; otherwise everything is ranked again. The
// annotator's own leases (another of their calls between the two halves) on all but k - 1 of
// the short list's items leave k - 1 eligible there: the result must still hold k items, none
// of them leased to the annotator, as a full ranking then.
TEST(ItemAssignerTest, AShortlistWithOneEligibleItemTooFewRanksEverythingAgain) {
  auto project = MakeLargeProject();
  AssignmentRules rules;
  constexpr int32_t kAnnotator = 2, kK = 10;
  const Shortlist shortlist =
      ShortlistItems(*project, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  ASSERT_EQ(shortlist.items.size(), static_cast<size_t>(shortlist.size));
  for (int32_t i = 0; i + (kK - 1) < shortlist.size; ++i) {
    project->leases().Add(shortlist.items[i].item, kAnnotator, kNow + absl::Minutes(5));
  }
  const std::vector<ItemSuggestion> from_shortlist =
      RankFromShortlist(*project, shortlist, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  ASSERT_EQ(from_shortlist.size(), static_cast<size_t>(kK));
  for (const ItemSuggestion& s : from_shortlist) {
    EXPECT_FALSE(project->leases().Has(s.item, kAnnotator, kNow)) << s.item;
  }
  const std::vector<ItemSuggestion> full = RankItemsForAnnotator(
      *project, *shortlist.snapshot, rules, kAnnotator, kK, std::nullopt, kNow, 3);
  EXPECT_EQ(Items(from_shortlist), Items(full));
}

// projects.proto, gold_items_for_new_annotators, and item_assigner.h: RankItemsForAnnotator
// returns "the best k items". A new annotator owed 3 gold items (N = 3, no labels) in
// MakeGoldProject (gold 0, 1, 2 with 0, 1, 2 labels) who asks for 1 or 2 is sent that many,
// the least labelled gold first, and no more.
TEST(ItemAssignerTest, ANewAnnotatorOwedMoreGoldItemsThanAskedForGetsK) {
  auto project = MakeGoldProject();
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 3;
  auto ranked =
      RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 1, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0));
  ranked =
      RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 2, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0, 1));
}

// item_assigner.h: an item is not suggested to the annotator who "holds a lease on it", whatever
// their index, the first (0) included. In MakeProject a0 labelled items 0, 1 and 2 and item 4
// is gold: item 3 is the only one open to a0, until a0 holds its lease.
TEST(ItemAssignerTest, TheFirstAnnotatorIsNotSentAnItemTheyHoldTheLeaseOn) {
  auto project = MakeProject();
  AssignmentRules rules;
  auto ranked =
      RankItemsForAnnotator(*project, *project->snapshot(), rules, 0, 10, std::nullopt, kNow, 1);
  ASSERT_THAT(Items(ranked), ElementsAre(3));
  const std::vector<ItemSuggestion> leased =
      RankAndLeaseItems(*project, rules, 0, 10, std::nullopt, kNow, kNow + absl::Minutes(5), 1);
  ASSERT_THAT(Items(leased), ElementsAre(3));
  EXPECT_THAT(Items(RankAndLeaseItems(*project, rules, 0, 10, std::nullopt, kNow,
                                      kNow + absl::Minutes(5), 2)),
              IsEmpty());
  ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, 0, 10,
                                 std::vector<int32_t>{3}, kNow, 1);
  EXPECT_THAT(Items(ranked), IsEmpty());
}

// projects.proto: RANDOM picks "uniformly random" open items, and docs/ASSIGNMENT.md: "ties
// are broken at random". Then the first two of the 4 open items of MakeProject are each of
// the 6 pairs about equally often: over 600 seeds spread over 64 bits, 100 times each (a
// binomial's standard deviation is 9.1; the bound is 6.6 of them below).
TEST(ItemAssignerTest, RandomPolicyPicksEveryPairOfOpenItemsAboutEquallyOften) {
  auto project = MakeProject();
  AssignmentRules rules;
  rules.policy = v1::ASSIGNMENT_POLICY_RANDOM;
  std::map<std::pair<int32_t, int32_t>, int> pairs;
  for (uint64_t s = 1; s <= 600; ++s) {
    auto ranked = RankItemsForAnnotator(*project, *project->snapshot(), rules, -1, 2, std::nullopt,
                                        kNow, s * 0x9E3779B97F4A7C15ull);
    ASSERT_EQ(ranked.size(), 2u);
    ++pairs[{std::min(ranked[0].item, ranked[1].item), std::max(ranked[0].item, ranked[1].item)}];
  }
  for (int32_t a = 0; a < 4; ++a) {
    for (int32_t b = a + 1; b < 4; ++b) EXPECT_GE((pairs[{a, b}]), 40) << a << ", " << b;
  }
}

// item_assigner.h: candidates are item indices, and RankAnnotatorsForItem ranks annotators for
// an item of the snapshot it is given. An index that snapshot does not hold (an item added
// after it was taken, or -1) is never suggested and has no annotators to rank.
TEST(ItemAssignerTest, IndicesOutsideTheSnapshotAreNeitherSuggestedNorRanked) {
  auto project = MakeProject();
  const std::shared_ptr<const ProjectSnapshot> old = project->snapshot();
  project->ApplyItems({{5, "i5", std::nullopt, std::nullopt}});
  ASSERT_EQ(old->posteriors.num_items(), 5);
  ASSERT_EQ(project->snapshot()->posteriors.num_items(), 6);
  AssignmentRules rules;
  auto ranked =
      RankItemsForAnnotator(*project, *old, rules, -1, 10, std::vector<int32_t>{-1, 5, 3}, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(3));
  const std::vector<int32_t> all = {0, 1, 2, -1};
  EXPECT_THAT(RankAnnotatorsForItem(*project, *old, 5, 10, all, kNow), IsEmpty());
  EXPECT_THAT(RankAnnotatorsForItem(*project, *old, -1, 10, all, kNow), IsEmpty());
  // On the new snapshot item 5 (no labels) is open to all four.
  EXPECT_EQ(RankAnnotatorsForItem(*project, *project->snapshot(), 5, 10, all, kNow).size(), 4u);
}

// projects.proto: UNCERTAINTY is "highest posterior entropy first, ignoring who asks": unlike
// INFORMATION_GAIN, the labels already on an item do not discount it. Under majority vote item
// 0 (4 labels, 2 to 2) is at 50/50 and item 1 (3 labels, 2 to 1) near 2/3: item 0 comes first,
// though 1 + its labels (5) is larger than item 1's (4).
TEST(ItemAssignerTest, UncertaintyPolicyDoesNotDiscountLabelledItems) {
  auto project = MakeProjectWith({-1, -1}, 4,
                                 {{0, 0, 0, 1},
                                  {0, 1, 0, 2},
                                  {0, 2, 1, 3},
                                  {0, 3, 1, 4},
                                  {1, 0, 0, 5},
                                  {1, 1, 0, 6},
                                  {1, 2, 1, 7}});
  const auto snapshot = project->snapshot();
  ASSERT_EQ(snapshot->posteriors.num_labels(0), 4);
  ASSERT_EQ(snapshot->posteriors.num_labels(1), 3);
  ASSERT_GT(Entropy(snapshot->posteriors.probabilities(0)),
            Entropy(snapshot->posteriors.probabilities(1)) + 0.01);
  AssignmentRules rules;
  rules.policy = v1::ASSIGNMENT_POLICY_UNCERTAINTY;
  auto ranked = RankItemsForAnnotator(*project, *snapshot, rules, -1, 2, std::nullopt, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0, 1));
  ranked =
      RankItemsForAnnotator(*project, *snapshot, rules, -1, 2, std::vector<int32_t>{1, 0}, kNow, 1);
  EXPECT_THAT(Items(ranked), ElementsAre(0, 1));
}

// item_assigner.h: RankItemsForAnnotator ranks on the snapshot it is given, and returns the best
// k items, each once. A ranking on a snapshot taken before AddItems made item 3 gold and added
// gold item 5 (a SuggestItems racing an AddItems) sends a new annotator owed 3 gold items 3
// items: never item 5, which that snapshot does not hold, and item 3 at most once, though the
// project now lists it among its gold items and that snapshot still ranks it as an open one.
TEST(ItemAssignerTest, GoldItemsChangedAfterTheSnapshotAreSentOnceAndOnlyIfItHoldsThem) {
  auto project = MakeProject();
  const std::shared_ptr<const ProjectSnapshot> old = project->snapshot();
  project->ApplyItems({{3, "i3", 0, std::nullopt}, {5, "i5", 1, std::nullopt}});
  ASSERT_EQ(project->GoldItems(), (std::vector<int32_t>{3, 4, 5}));
  ASSERT_EQ(old->posteriors.num_items(), 5);
  ASSERT_FALSE(old->posteriors.is_gold(3));
  AssignmentRules rules;
  rules.gold_items_for_new_annotators = 3;
  const std::vector<int32_t> items =
      Items(RankItemsForAnnotator(*project, *old, rules, -1, 3, std::nullopt, kNow, 1));
  EXPECT_EQ(items.size(), 3u);
  EXPECT_THAT(items, Not(Contains(5)));
  EXPECT_EQ(std::set<int32_t>(items.begin(), items.end()).size(), items.size())
      << ::testing::PrintToString(items);
}

// item_assigner.h, "Concurrency": suggestions "must see each other's leases, so rank-then-lease
// is serialised per project". 8 threads ask at once for 10 items each, 100 times, all with the
// same seed, so that without that every call would rank the same items first; every one of the
// 20000 unlabelled items has one slot (max_labels_per_item = 1). Each of the 8000 items sent is
// sent once.
TEST(ItemAssignerTest, SuggestionsAtOnceWithTheSameSeedNeverShareAnItemsOnlySlot) {
  constexpr int32_t kItems = 20000, kThreads = 8, kCalls = 100, kK = 10;
  auto project = MakeProjectWith(std::vector<int32_t>(kItems, -1), 16, {});
  AssignmentRules rules;
  rules.max_labels = 1;
  std::vector<std::vector<int32_t>> suggested(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        for (const ItemSuggestion& s :
             RankAndLeaseItems(*project, rules, t + 8 * (c % 2), kK, std::nullopt, kNow,
                               kNow + absl::Hours(1), 7)) {
          suggested[t].push_back(s.item);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::map<int32_t, int32_t> times;
  size_t total = 0;
  for (const auto& items : suggested) {
    total += items.size();
    for (int32_t item : items) ++times[item];
  }
  EXPECT_EQ(total, static_cast<size_t>(kThreads * kCalls * kK));
  int32_t sent_twice = 0;
  for (const auto& [item, n] : times) sent_twice += n > 1 ? 1 : 0;
  EXPECT_EQ(sent_twice, 0) << "items sent to more than one annotator";
}

}  // namespace
}  // namespace verity::server
