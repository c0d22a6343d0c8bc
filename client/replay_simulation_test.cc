#include "client/replay_simulation.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/csv_dataset.h"

namespace verity::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

// Classes no, yes. Items a, b, c (gold 1, 0, 1), e (labelled, no gold), d
// (gold 1, no label). Labels:
//   w1: a→yes, b→no, c→no     w2: a→yes, c→yes, e→no     w3: b→yes
models::CsvDataset SmallDataset() {
  models::CsvDataset d;
  d.class_names = {"no", "yes"};
  d.item_ids = {"a", "b", "c", "e", "d"};
  d.annotator_ids = {"w1", "w2", "w3"};
  for (int32_t i = 0; i < d.num_items(); ++i) d.item_index[d.item_ids[i]] = i;
  for (int32_t a = 0; a < d.num_annotators(); ++a) {
    d.annotator_index[d.annotator_ids[a]] = a;
  }
  d.annotations = {{0, 0, 1}, {1, 0, 0}, {2, 0, 0}, {0, 1, 1},
                   {2, 1, 1}, {3, 1, 0}, {1, 2, 1}};
  d.gold = {1, 0, 1, -1, 1};
  return d;
}

v1::Posterior PosteriorOf(const std::string& item, int32_t map_label) {
  v1::Posterior p;
  p.set_item(item);
  p.set_map_label(map_label);
  return p;
}

TEST(ParsePoliciesTest, KeepsTheOrderGiven) {
  absl::StatusOr<std::vector<SimulationPolicy>> policies =
      ParsePolicies("information_gain, random,all_mv");
  ASSERT_THAT(policies, IsOk());
  ASSERT_THAT(*policies, SizeIs(3));
  EXPECT_EQ((*policies)[0].name, "information_gain");
  EXPECT_EQ((*policies)[0].policy, v1::ASSIGNMENT_POLICY_INFORMATION_GAIN);
  EXPECT_FALSE((*policies)[0].is_reference);
  EXPECT_EQ((*policies)[1].policy, v1::ASSIGNMENT_POLICY_RANDOM);
  EXPECT_TRUE((*policies)[2].is_reference);
  EXPECT_EQ((*policies)[2].method, v1::TRUTH_METHOD_MAJORITY_VOTE);
}

TEST(ParsePoliciesTest, MapsEveryName) {
  absl::StatusOr<std::vector<SimulationPolicy>> policies = ParsePolicies(
      "random,uniform,uncertainty,information_gain,all_ds,all_mv");
  ASSERT_THAT(policies, IsOk());
  ASSERT_THAT(*policies, SizeIs(6));
  EXPECT_EQ((*policies)[1].policy, v1::ASSIGNMENT_POLICY_UNIFORM);
  EXPECT_EQ((*policies)[2].policy, v1::ASSIGNMENT_POLICY_UNCERTAINTY);
  EXPECT_EQ((*policies)[4].method, v1::TRUTH_METHOD_DAWID_SKENE);
}

TEST(ParsePoliciesTest, RejectsUnknownRepeatedAndEmpty) {
  EXPECT_THAT(ParsePolicies("random,greedy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown policy \"greedy\"")));
  EXPECT_THAT(ParsePolicies("random,random"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("listed twice")));
  EXPECT_THAT(ParsePolicies(" , "),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no policy")));
}

TEST(ParseBudgetFractionsTest, ParsesAList) {
  EXPECT_THAT(ParseBudgetFractions("0.1, 0.5,1"),
              IsOkAndHolds(ElementsAre(0.1, 0.5, 1.0)));
}

TEST(ParseBudgetFractionsTest, RejectsOutOfRangeAndGarbage) {
  EXPECT_THAT(ParseBudgetFractions("0.1,0"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside (0, 1]")));
  EXPECT_THAT(ParseBudgetFractions("1.5"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside (0, 1]")));
  EXPECT_THAT(ParseBudgetFractions("half"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"half\" is not a number")));
  EXPECT_THAT(ParseBudgetFractions(""),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BudgetCheckpointsTest, RoundsSortsAndDeduplicates) {
  absl::StatusOr<std::vector<BudgetCheckpoint>> checkpoints =
      BudgetCheckpoints({1.0, 0.1, 0.5, 0.1}, 4212);
  ASSERT_THAT(checkpoints, IsOk());
  ASSERT_THAT(*checkpoints, SizeIs(3));
  EXPECT_DOUBLE_EQ((*checkpoints)[0].fraction, 0.1);
  EXPECT_EQ((*checkpoints)[0].labels, 421);  // 421.2
  EXPECT_EQ((*checkpoints)[1].labels, 2106);
  EXPECT_EQ((*checkpoints)[2].labels, 4212);
}

TEST(BudgetCheckpointsTest, EveryCheckpointBuysAtLeastOneLabel) {
  absl::StatusOr<std::vector<BudgetCheckpoint>> checkpoints =
      BudgetCheckpoints({0.1, 0.5}, 3);
  ASSERT_THAT(checkpoints, IsOk());
  EXPECT_EQ((*checkpoints)[0].labels, 1);  // 0.3 → 0 → at least 1
  EXPECT_EQ((*checkpoints)[1].labels, 2);  // 1.5 rounds away from zero
}

TEST(BudgetCheckpointsTest, RejectsAnEmptyDatasetAndBadFractions) {
  EXPECT_THAT(BudgetCheckpoints({0.5}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BudgetCheckpoints({1.2}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// (0, 1] excludes 0 (no budget) and negatives, even beside valid fractions.
TEST(BudgetCheckpointsTest, RejectsAZeroOrNegativeFraction) {
  EXPECT_THAT(BudgetCheckpoints({0.5, 0.0}, 10), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BudgetCheckpoints({-0.1}, 10), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(UniformIndexTest, SameSeedSameSequenceAndInRange) {
  std::mt19937_64 a(7), b(7);
  for (int j = 0; j < 100; ++j) {
    const uint64_t x = UniformIndex(a, 5);
    EXPECT_LT(x, 5u);
    EXPECT_EQ(x, UniformIndex(b, 5));
  }
  std::mt19937_64 c(1);
  EXPECT_EQ(UniformIndex(c, 1), 0u);
}

TEST(UniformIndexTest, IsRoughlyUniform) {
  std::mt19937_64 rng(3);
  std::vector<int> counts(3, 0);
  for (int j = 0; j < 30000; ++j) ++counts[UniformIndex(rng, 3)];
  for (int c : counts) {
    EXPECT_GT(c, 9500);
    EXPECT_LT(c, 10500);
  }
}

TEST(ReplayCrowdTest, RemainingItemsAreTheAnnotatorsLabelsInDatasetOrder) {
  ReplayCrowd crowd(SmallDataset());
  EXPECT_EQ(crowd.total_labels(), 7);
  EXPECT_EQ(crowd.num_present(), 3);
  EXPECT_THAT(crowd.RemainingItems(0), ElementsAre(0, 1, 2));
  EXPECT_THAT(crowd.RemainingItems(1), ElementsAre(0, 2, 3));
  EXPECT_THAT(crowd.RemainingItems(2), ElementsAre(1));
}

TEST(ReplayCrowdTest, AnswerGivesTheDatasetLabelOnce) {
  ReplayCrowd crowd(SmallDataset());
  EXPECT_THAT(crowd.Answer(0, 1), IsOkAndHolds(0));
  EXPECT_THAT(crowd.Answer(1, 2), IsOkAndHolds(1));
  EXPECT_EQ(crowd.answered(), 2);
  EXPECT_THAT(crowd.RemainingItems(0), ElementsAre(0, 2));
  EXPECT_THAT(crowd.Answer(0, 1), StatusIs(absl::StatusCode::kNotFound));
  // w3 never labelled item a.
  EXPECT_THAT(crowd.Answer(2, 0), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(crowd.answered(), 2);
}

TEST(ReplayCrowdTest, AnnotatorLeavesAfterTheirLastAnswer) {
  ReplayCrowd crowd(SmallDataset());
  ASSERT_THAT(crowd.Answer(2, 1), IsOkAndHolds(1));
  EXPECT_FALSE(crowd.is_present(2));
  EXPECT_EQ(crowd.num_present(), 2);
  std::mt19937_64 rng(1);
  for (int j = 0; j < 50; ++j) EXPECT_NE(crowd.DrawAnnotator(rng), 2);
}

TEST(ReplayCrowdTest, LeaveIsIdempotentAndDrawsOnlyPresentAnnotators) {
  ReplayCrowd crowd(SmallDataset());
  crowd.Leave(0);
  crowd.Leave(0);
  EXPECT_EQ(crowd.num_present(), 2);
  EXPECT_TRUE(crowd.is_present(1));
  EXPECT_TRUE(crowd.is_present(2));
  std::mt19937_64 rng(5);
  std::set<int32_t> drawn;
  for (int j = 0; j < 100; ++j) drawn.insert(crowd.DrawAnnotator(rng));
  EXPECT_THAT(drawn, UnorderedElementsAre(1, 2));
}

// An annotator with no label in the dataset has nothing to be asked: never in
// the crowd.
TEST(ReplayCrowdTest, AnAnnotatorWithoutLabelsIsNeverPresent) {
  models::CsvDataset d = SmallDataset();
  d.annotator_ids.push_back("w4");
  d.annotator_index["w4"] = 3;
  ReplayCrowd crowd(d);
  EXPECT_EQ(crowd.num_present(), 3);
  EXPECT_FALSE(crowd.is_present(3));
  std::mt19937_64 rng(5);
  for (int j = 0; j < 50; ++j) EXPECT_NE(crowd.DrawAnnotator(rng), 3);
}

TEST(ScoredItemsTest, GoldItemsWithAtLeastOneLabel) {
  // e has no gold, d has no label.
  EXPECT_THAT(ScoredItems(SmallDataset()), ElementsAre(0, 1, 2));
}

TEST(SplitProjectGoldTest, EveryNthPositionFromTheSeedsOffset) {
  const std::vector<int32_t> scored = {0, 2, 5, 7, 9, 11, 12};
  // n = 3, seed 4: offset 1, positions 1 and 4.
  ProjectGoldSplit split = SplitProjectGold(scored, 3, 4);
  EXPECT_THAT(split.gold, ElementsAre(2, 9));
  EXPECT_THAT(split.scored, ElementsAre(0, 5, 7, 11, 12));
  // seed 3: offset 0, positions 0, 3 and 6.
  split = SplitProjectGold(scored, 3, 3);
  EXPECT_THAT(split.gold, ElementsAre(0, 7, 12));
  EXPECT_THAT(split.scored, ElementsAre(2, 5, 9, 11));
  // n = 0: no gold.
  split = SplitProjectGold(scored, 0, 4);
  EXPECT_THAT(split.gold, ElementsAre());
  EXPECT_EQ(split.scored, scored);
  // n = 1: everything is gold.
  split = SplitProjectGold(scored, 1, 9);
  EXPECT_EQ(split.gold, scored);
  EXPECT_THAT(split.scored, ElementsAre());
}

TEST(AccuracyOnGoldTest, ComparesTheServersMapLabelWithGold) {
  const models::CsvDataset d = SmallDataset();
  const std::vector<int32_t> items = {0, 1, 2};
  const std::vector<v1::Posterior> posteriors = {
      PosteriorOf("a", 1), PosteriorOf("b", 1), PosteriorOf("c", 1)};
  absl::StatusOr<double> accuracy = AccuracyOnGold(posteriors, items, d);
  ASSERT_THAT(accuracy, IsOk());
  EXPECT_DOUBLE_EQ(*accuracy, 2.0 / 3.0);
}

TEST(AccuracyOnGoldTest, RejectsMismatchedAnswers) {
  const models::CsvDataset d = SmallDataset();
  const std::vector<int32_t> items = {0, 1};
  EXPECT_THAT(AccuracyOnGold({PosteriorOf("a", 1), PosteriorOf("c", 1)},
                             items, d),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("\"c\"")));
  EXPECT_THAT(AccuracyOnGold({PosteriorOf("a", 1)}, items, d),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AccuracyOnGold({}, {}, d),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SummaryTest, AveragesOverSeedsPerPolicyAndFraction) {
  const std::vector<SimulationRow> rows = {
      {"birds", "random", 1, 10, 0.5, 0.6},
      {"birds", "random", 1, 20, 1.0, 0.8},
      {"birds", "random", 2, 10, 0.5, 0.7},
      {"birds", "random", 2, 20, 1.0, 0.9},
      {"birds", "all_mv", 0, 20, 1.0, 0.75},
  };
  const std::vector<SummaryCell> cells = Summarize(rows);
  ASSERT_THAT(cells, SizeIs(3));
  EXPECT_EQ(cells[0].policy, "random");
  EXPECT_DOUBLE_EQ(cells[0].fraction, 0.5);
  EXPECT_DOUBLE_EQ(cells[0].mean_accuracy, 0.65);
  EXPECT_EQ(cells[0].runs, 2);
  EXPECT_DOUBLE_EQ(cells[1].mean_accuracy, 0.85);
  EXPECT_EQ(cells[2].policy, "all_mv");

  EXPECT_EQ(FormatSummaryTables(cells),
            "### birds\n\n"
            "| policy | 50% (10) | 100% (20) |\n"
            "|---|---|---|\n"
            "| random | 0.6500 | 0.8500 |\n"
            "| all_mv | | 0.7500 |\n\n");
  EXPECT_EQ(FormatSimulationRow(rows[0]), "birds,random,1,10,0.5,0.600000");
}

// replay_simulation.h: columns by fraction ascending, even when the first policy (a reference)
// has only the last; each header's labels are those of the first cell with its fraction.
TEST(SummaryTest, ColumnsAscendByFractionWithTheFirstCellsLabels) {
  const std::vector<SummaryCell> cells = {
      {"birds", "all_ds", 1.0, 20, 0.8, 1},
      {"birds", "random", 0.5, 10, 0.6, 2},
      {"birds", "random", 1.0, 19, 0.7, 2},
  };
  EXPECT_EQ(FormatSummaryTables(cells),
            "### birds\n\n"
            "| policy | 50% (10) | 100% (20) |\n"
            "|---|---|---|\n"
            "| all_ds | | 0.8000 |\n"
            "| random | 0.6000 | 0.7000 |\n\n");
}

// A scripted ReplayServer: suggests the first candidate (or what `choose`
// says), records every call, and answers posteriors whose MAP label is the
// last label submitted for the item in that project (0 before any).
class FakeReplayServer : public ReplayServer {
 public:
  struct Project {
    v1::Project project;
    std::vector<v1::Item> items;
    std::vector<v1::Annotation> submitted;
    std::map<std::string, int32_t> last_label;
    int status_calls = 0;
  };

  absl::Status CreateProject(const v1::Project& project) override {
    names.push_back(project.name());
    projects[project.name()].project = project;
    return absl::OkStatus();
  }
  absl::Status AddItems(absl::string_view project,
                        absl::Span<const v1::Item> items) override {
    projects[std::string(project)].items.assign(items.begin(), items.end());
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<v1::ItemSuggestion>> SuggestItems(
      absl::string_view, absl::string_view annotator, int32_t k,
      absl::Span<const std::string> candidate_items) override {
    if (!suggest_error.ok()) return suggest_error;
    EXPECT_EQ(k, 1);
    requests.push_back({std::string(annotator),
                        std::vector<std::string>(candidate_items.begin(),
                                                 candidate_items.end())});
    std::vector<v1::ItemSuggestion> out;
    if (suggest_nothing || candidate_items.empty()) return out;
    v1::ItemSuggestion& s = out.emplace_back();
    s.set_item(choose ? choose(candidate_items) : candidate_items[0]);
    if (suggest_twice) out.push_back(s);
    return out;
  }
  absl::Status SubmitLabels(
      absl::string_view project,
      absl::Span<const v1::Annotation> annotations) override {
    Project& p = projects[std::string(project)];
    for (const v1::Annotation& a : annotations) {
      p.submitted.push_back(a);
      p.last_label[a.item()] = a.label();
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<v1::Posterior>> GetPosteriors(
      absl::string_view project, absl::Span<const std::string> items) override {
    ++posterior_reads;
    posterior_items.assign(items.begin(), items.end());
    const Project& p = projects[std::string(project)];
    std::vector<v1::Posterior> out;
    for (const std::string& item : items) {
      auto it = p.last_label.find(item);
      out.push_back(PosteriorOf(item, it == p.last_label.end() ? 0 : it->second));
    }
    return out;
  }
  absl::StatusOr<v1::GetModelStatusResponse> GetModelStatus(
      absl::string_view project) override {
    Project& p = projects[std::string(project)];
    ++p.status_calls;
    v1::GetModelStatusResponse status;
    status.set_training(p.status_calls <= training_polls);
    if (p.status_calls > stale_polls) {
      status.mutable_current_version()->set_num_labels(
          static_cast<int64_t>(p.submitted.size()));
      status.mutable_current_version()->set_method(p.status_calls <= old_method_polls
                                                       ? v1::TRUTH_METHOD_MAJORITY_VOTE
                                                       : p.project.settings().model().method());
      if (p.status_calls <= short_polls) {
        status.mutable_current_version()->set_num_labels(static_cast<int64_t>(p.submitted.size()) -
                                                         1);
      }
    } else {
      status.set_labels_since_version(static_cast<int64_t>(p.submitted.size()));
    }
    if (p.status_calls <= unseen_polls) status.set_labels_since_version(1);
    return status;
  }
  absl::Status UpdateProjectSettings(
      absl::string_view project, const v1::ProjectSettings& settings) override {
    *projects[std::string(project)].project.mutable_settings() = settings;
    updated.push_back(std::string(project));
    return absl::OkStatus();
  }

  // The project created first (the replay's own).
  Project& first() { return projects[names.at(0)]; }

  struct Request {
    std::string annotator;
    std::vector<std::string> candidates;
  };
  std::vector<std::string> names;  // In creation order.
  std::map<std::string, Project> projects;
  std::vector<std::string> updated;
  std::vector<Request> requests;
  std::function<std::string(absl::Span<const std::string>)> choose;
  absl::Status suggest_error;
  bool suggest_nothing = false;
  // Each suggestion comes back twice (two items for k = 1).
  bool suggest_twice = false;
  int posterior_reads = 0;
  std::vector<std::string> posterior_items;  // Of the last GetPosteriors.
  // GetModelStatus of a project says a fit is running on its first
  // training_polls calls, and that no fit saw the labels on its first
  // stale_polls calls.
  int training_polls = 0;
  int stale_polls = 0;
  // On its first unseen_polls calls, GetModelStatus also reports one label
  // that the current version has not seen (labels_since_version 1).
  int unseen_polls = 0;
  // On its first old_method_polls calls, the current version is of majority
  // vote (the fit before a method switch); on its first short_polls calls, it
  // saw one label less than submitted.
  int old_method_polls = 0;
  int short_polls = 0;
};

class RunReplayTest : public ::testing::Test {
 protected:
  RunReplayTest() : dataset_(SmallDataset()) {
    options_.dataset_name = "small";
    options_.project_prefix = "t";
    options_.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    options_.settings.mutable_assignment()->set_confidence_target(0.9);
  }
  void SetFractions(std::vector<double> fractions) {
    options_.checkpoints = *BudgetCheckpoints(fractions, 7);
  }
  SimulationPolicy Policy(absl::string_view name) {
    return (*ParsePolicies(name))[0];
  }

  models::CsvDataset dataset_;
  ReplayOptions options_;
  FakeReplayServer server_;
  std::vector<absl::Duration> sleeps_;
};

TEST_F(RunReplayTest, CreatesAProjectWithThePolicyAndItemsWithoutGold) {
  SetFractions({1.0});
  ASSERT_THAT(RunReplay(server_, dataset_, options_, Policy("uncertainty"), 4),
              IsOk());
  ASSERT_THAT(server_.names, ElementsAre("t-small-uncertainty-s4"));
  const v1::Project& project = server_.first().project;
  EXPECT_THAT(project.classes(), ElementsAre("no", "yes"));
  EXPECT_EQ(project.settings().assignment().policy(),
            v1::ASSIGNMENT_POLICY_UNCERTAINTY);
  EXPECT_DOUBLE_EQ(project.settings().assignment().confidence_target(), 0.9);
  // The labelled items, never the gold-only one, and no gold at all.
  std::vector<std::string> ids;
  for (const v1::Item& item : server_.first().items) {
    ids.push_back(item.id());
    EXPECT_FALSE(item.has_gold_label());
  }
  EXPECT_THAT(ids, ElementsAre("a", "b", "c", "e"));
}

TEST_F(RunReplayTest, GoldEveryNAddsThoseItemsAsGoldAndScoresTheOthers) {
  SetFractions({1.0});
  // Scored items a, b, c; n = 2 and seed 4: positions 0 and 2 (a, c) are gold.
  options_.gold_every = 2;
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("uniform"), 4);
  ASSERT_THAT(result, IsOk());
  std::map<std::string, int32_t> gold;
  std::vector<std::string> ids;
  for (const v1::Item& item : server_.first().items) {
    ids.push_back(item.id());
    if (item.has_gold_label()) gold[item.id()] = item.gold_label();
  }
  EXPECT_THAT(ids, ElementsAre("a", "b", "c", "e"));
  EXPECT_EQ(gold, (std::map<std::string, int32_t>{{"a", 1}, {"c", 1}}));
  // Only b is read and scored: its gold is "no" (0), and the fake serves the
  // last label bought for it.
  EXPECT_THAT(server_.posterior_items, ElementsAre("b"));
  ASSERT_THAT(result->rows, SizeIs(1));
  const int32_t last_b = server_.first().last_label.at("b");
  EXPECT_DOUBLE_EQ(result->rows[0].accuracy, last_b == 0 ? 1.0 : 0.0);
  // The crowd still labels the gold items: every label is bought.
  EXPECT_EQ(result->stats.bought, 7);
}

TEST_F(RunReplayTest, GoldEveryNThatLeavesNothingScoredOrIsNegativeIsRefused) {
  SetFractions({1.0});
  options_.gold_every = 1;
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("uniform"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("leaves no item of small to score")));
  options_.gold_every = -1;
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("uniform"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gold_every is -1")));
  EXPECT_THAT(
      RunFullDataReference(server_, dataset_, options_, Policy("all_mv")),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(server_.names, ElementsAre());
}

TEST_F(RunReplayTest, ReferenceWithGoldEveryNUsesSeedZerosSplit) {
  options_.gold_every = 2;  // Seed 0: positions 0 and 2 (a, c) are gold.
  ASSERT_THAT(
      RunFullDataReference(server_, dataset_, options_, Policy("all_mv")),
      IsOk());
  int gold_items = 0;
  for (const v1::Item& item : server_.first().items) {
    if (item.has_gold_label()) {
      ++gold_items;
      EXPECT_TRUE(item.id() == "a" || item.id() == "c") << item.id();
    }
  }
  EXPECT_EQ(gold_items, 2);
  EXPECT_THAT(server_.posterior_items, ElementsAre("b"));
}

TEST_F(RunReplayTest, BuysEveryLabelOnceWithTheDatasetsAnswers) {
  SetFractions({0.5, 1.0});
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("random"), 1);
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->stats.bought, 7);
  EXPECT_EQ(result->stats.steps, 7);
  EXPECT_EQ(result->stats.empty_answers, 0);
  std::set<std::tuple<std::string, std::string, int32_t>> got;
  for (const v1::Annotation& a : server_.first().submitted) {
    got.insert({a.item(), a.annotator(), a.label()});
  }
  std::set<std::tuple<std::string, std::string, int32_t>> want;
  for (const models::Annotation& a : dataset_.annotations) {
    want.insert({dataset_.item_ids[a.item], dataset_.annotator_ids[a.annotator],
                 a.label});
  }
  EXPECT_EQ(server_.first().submitted.size(), 7u);
  EXPECT_EQ(got, want);

  // Rows at 4 (round(3.5)) and 7 labels. At 7 the last label of a, b, c is
  // the one of whoever answered last; accuracy is read from the fake.
  ASSERT_THAT(result->rows, SizeIs(2));
  EXPECT_EQ(result->rows[0].labels, 4);
  EXPECT_DOUBLE_EQ(result->rows[0].fraction, 0.5);
  EXPECT_EQ(result->rows[1].labels, 7);
  EXPECT_EQ(result->rows[1].policy, "random");
  EXPECT_EQ(result->rows[1].seed, 1);
  EXPECT_EQ(result->rows[1].dataset, "small");
  EXPECT_EQ(server_.posterior_reads, 2);
}

TEST_F(RunReplayTest, CandidatesAreWhatTheAnnotatorCanStillAnswer) {
  SetFractions({1.0});
  ASSERT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 9),
              IsOk());
  std::map<std::string, std::set<std::string>> left = {
      {"w1", {"a", "b", "c"}}, {"w2", {"a", "c", "e"}}, {"w3", {"b"}}};
  const std::vector<v1::Annotation>& submitted = server_.first().submitted;
  ASSERT_EQ(server_.requests.size(), submitted.size());
  for (size_t j = 0; j < server_.requests.size(); ++j) {
    const FakeReplayServer::Request& r = server_.requests[j];
    EXPECT_EQ(std::set<std::string>(r.candidates.begin(), r.candidates.end()),
              left[r.annotator])
        << "step " << j;
    EXPECT_EQ(submitted[j].annotator(), r.annotator);
    left[r.annotator].erase(submitted[j].item());
  }
}

TEST_F(RunReplayTest, StopsAtTheBudget) {
  SetFractions({0.3});  // round(2.1) = 2 labels
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("information_gain"), 1);
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(server_.first().submitted.size(), 2u);
  ASSERT_THAT(result->rows, SizeIs(1));
  EXPECT_EQ(result->rows[0].labels, 2);
}

// ReplayOptions::on_progress: called every progress_every labels bought and at
// the end. 7 labels, every 3: after 3 and 6 labels, then at the end (7).
TEST_F(RunReplayTest, ReportsProgressEveryNLabelsAndAtTheEnd) {
  SetFractions({1.0});
  options_.progress_every = 3;
  std::vector<int64_t> bought;
  options_.on_progress = [&](const ReplayProgress& progress) {
    EXPECT_EQ(progress.project, "t-small-random-s5");
    EXPECT_EQ(progress.budget, 7);
    bought.push_back(progress.bought);
  };
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("random"), 5);
  ASSERT_THAT(result, IsOk());
  ASSERT_EQ(result->stats.bought, 7);
  EXPECT_THAT(bought, ElementsAre(3, 6, 7));
}

TEST_F(RunReplayTest, SameSeedSameArrivalsOtherSeedOthers) {
  SetFractions({1.0});
  auto arrivals = [&](uint64_t seed) {
    FakeReplayServer server;
    EXPECT_THAT(RunReplay(server, dataset_, options_, Policy("random"), seed),
                IsOk());
    std::vector<std::string> who;
    for (const auto& r : server.requests) who.push_back(r.annotator);
    return who;
  };
  EXPECT_EQ(arrivals(11), arrivals(11));
  bool some_differ = false;
  for (uint64_t seed = 12; seed < 20; ++seed) {
    some_differ = some_differ || arrivals(seed) != arrivals(11);
  }
  EXPECT_TRUE(some_differ);
}

TEST_F(RunReplayTest, AnEmptySuggestionSendsTheAnnotatorAway) {
  SetFractions({0.5, 1.0});
  server_.suggest_nothing = true;
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("uniform"), 1);
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(result->stats.steps, 3);  // each annotator asks once
  EXPECT_EQ(result->stats.left_unserved, 3);
  EXPECT_EQ(result->stats.bought, 0);
  // Unreached checkpoints record the final state: nothing bought, every
  // scored item at class 0, so only b (gold no) is right.
  ASSERT_THAT(result->rows, SizeIs(2));
  EXPECT_EQ(result->rows[0].labels, 0);
  EXPECT_EQ(result->rows[1].labels, 0);
  EXPECT_DOUBLE_EQ(result->rows[0].accuracy, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(result->rows[1].fraction, 1.0);
  EXPECT_EQ(server_.posterior_reads, 1);
}

TEST_F(RunReplayTest, ASuggestionOutsideTheCandidatesIsAnError) {
  SetFractions({1.0});
  // "e" is a dataset item, but only w2 labelled it.
  server_.choose = [](absl::Span<const std::string>) { return "e"; };
  options_.checkpoints = *BudgetCheckpoints({1.0}, 7);
  absl::Status status =
      RunReplay(server_, dataset_, options_, Policy("random"), 2).status();
  // Whoever arrives first: w2 may answer e once, then any request fails.
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal,
                               HasSubstr("outside the candidate items")));
}

TEST_F(RunReplayTest, SeveralSuggestionsForKOneAreAnError) {
  SetFractions({1.0});
  server_.suggest_twice = true;
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("k = 1")));
}

TEST_F(RunReplayTest, AnItemTheDatasetLacksIsAnError) {
  SetFractions({1.0});
  server_.choose = [](absl::Span<const std::string>) { return "zzz"; };
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 2),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("\"zzz\", which the dataset lacks")));
}

TEST_F(RunReplayTest, ServerErrorsKeepTheirCode) {
  SetFractions({1.0});
  server_.suggest_error = absl::UnimplementedError("not built yet");
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 2),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("SuggestItems t-small-random-s2")));
}

TEST_F(RunReplayTest, ACheckpointWaitsForARunningFit) {
  SetFractions({1.0});
  server_.training_polls = 3;
  options_.poll_interval = absl::Milliseconds(5);
  ASSERT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 2),
              IsOk());
  EXPECT_THAT(sleeps_, ElementsAre(absl::Milliseconds(5), absl::Milliseconds(5),
                                   absl::Milliseconds(5)));
}

TEST_F(RunReplayTest, ACheckpointReadsAnywayAfterFitWait) {
  SetFractions({1.0});
  server_.training_polls = 1000;
  options_.poll_interval = absl::Milliseconds(10);
  options_.fit_wait = absl::Milliseconds(30);
  ASSERT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 2),
              IsOk());
  EXPECT_THAT(sleeps_, SizeIs(3));
  EXPECT_EQ(server_.posterior_reads, 1);
}

TEST_F(RunReplayTest, RejectsAReferenceAndNoCheckpoints) {
  SetFractions({1.0});
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("all_ds"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options_.checkpoints.clear();
  EXPECT_THAT(RunReplay(server_, dataset_, options_, Policy("random"), 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RunReplayTest, ColdFitsScoreExactlyTheLabelsBoughtInShadowProjects) {
  SetFractions({0.5, 1.0});
  options_.cold_fit_at_checkpoints = true;
  options_.settings.mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("random"), 3);
  ASSERT_THAT(result, IsOk());
  EXPECT_THAT(server_.names, ElementsAre("t-small-random-s3",
                                         "t-small-random-s3-c4",
                                         "t-small-random-s3-c7"));
  // Each shadow got the first n labels the replay bought, in order, was
  // created with majority vote and switched to Dawid-Skene afterwards.
  const std::vector<v1::Annotation>& live = server_.first().submitted;
  for (const auto& [name, n] :
       std::vector<std::pair<std::string, size_t>>{{"t-small-random-s3-c4", 4},
                                                   {"t-small-random-s3-c7", 7}}) {
    const FakeReplayServer::Project& shadow = server_.projects[name];
    ASSERT_EQ(shadow.submitted.size(), n) << name;
    for (size_t j = 0; j < n; ++j) {
      EXPECT_EQ(shadow.submitted[j].item(), live[j].item());
      EXPECT_EQ(shadow.submitted[j].annotator(), live[j].annotator());
    }
    EXPECT_EQ(shadow.project.settings().model().method(),
              v1::TRUTH_METHOD_DAWID_SKENE);
    EXPECT_THAT(shadow.items, SizeIs(4));
  }
  EXPECT_THAT(server_.updated,
              ElementsAre("t-small-random-s3-c4", "t-small-random-s3-c7"));
  ASSERT_THAT(result->rows, SizeIs(4));
  EXPECT_EQ(result->rows[0].policy, "random");
  EXPECT_EQ(result->rows[1].policy, "random/cold");
  EXPECT_EQ(result->rows[1].labels, 4);
  EXPECT_DOUBLE_EQ(result->rows[1].fraction, 0.5);
  // The fake's posteriors depend only on the labels, so live and cold agree.
  EXPECT_DOUBLE_EQ(result->rows[1].accuracy, result->rows[0].accuracy);
  EXPECT_EQ(result->rows[3].policy, "random/cold");
  EXPECT_EQ(result->rows[3].labels, 7);
}

TEST_F(RunReplayTest, ColdRowsAreRepeatedForCheckpointsNeverReached) {
  SetFractions({0.5, 1.0});
  options_.cold_fit_at_checkpoints = true;
  server_.suggest_nothing = true;
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("random"), 3);
  ASSERT_THAT(result, IsOk());
  ASSERT_THAT(result->rows, SizeIs(4));
  EXPECT_EQ(result->rows[2].policy, "random");
  EXPECT_DOUBLE_EQ(result->rows[2].fraction, 1.0);
  EXPECT_EQ(result->rows[3].policy, "random/cold");
  EXPECT_DOUBLE_EQ(result->rows[3].fraction, 1.0);
  EXPECT_EQ(result->rows[3].labels, 0);
}

// The shadow uses the replay's truth method: majority vote stays majority
// vote, with no settings update.
TEST_F(RunReplayTest, ColdFitsOfAMajorityVoteReplayStayMajorityVote) {
  SetFractions({1.0});
  options_.cold_fit_at_checkpoints = true;
  options_.settings.mutable_model()->set_method(v1::TRUTH_METHOD_MAJORITY_VOTE);
  absl::StatusOr<ReplayResult> result = RunReplay(server_, dataset_, options_, Policy("random"), 3);
  ASSERT_THAT(result, IsOk());
  ASSERT_THAT(server_.names, ElementsAre("t-small-random-s3", "t-small-random-s3-c7"));
  EXPECT_EQ(server_.projects["t-small-random-s3-c7"].project.settings().model().method(),
            v1::TRUTH_METHOD_MAJORITY_VOTE);
  EXPECT_THAT(server_.updated, SizeIs(0));
}

// A replay that leaves the method unset runs the server default, which a
// project created now stores as auto (projects.proto, ModelSettings.method);
// its shadows, "with the replay's truth method" (ReplayOptions), fit auto too.
TEST_F(RunReplayTest, ColdFitsOfAReplayWithTheDefaultMethodFitAuto) {
  SetFractions({1.0});
  options_.cold_fit_at_checkpoints = true;
  absl::StatusOr<ReplayResult> result =
      RunReplay(server_, dataset_, options_, Policy("random"), 3);
  ASSERT_THAT(result, IsOk());
  ASSERT_THAT(server_.names, ElementsAre("t-small-random-s3", "t-small-random-s3-c7"));
  EXPECT_EQ(server_.projects["t-small-random-s3-c7"].project.settings().model().method(),
            v1::TRUTH_METHOD_AUTO);
}

// A cold fit is read only once a fit of the wanted method saw every label:
// two polls show the majority-vote version from before the switch to
// Dawid-Skene; three polls, two sleeps.
TEST_F(RunReplayTest, ReferenceWaitsForAFitOfItsMethod) {
  SetFractions({1.0});
  server_.old_method_polls = 2;
  absl::StatusOr<SimulationRow> row =
      RunFullDataReference(server_, dataset_, options_, Policy("all_ds"));
  ASSERT_THAT(row, IsOk());
  EXPECT_EQ(server_.first().status_calls, 3);
  EXPECT_THAT(sleeps_, SizeIs(2));
}

// Two polls show a Dawid-Skene version that lacks one of the 7 labels.
TEST_F(RunReplayTest, ReferenceWaitsForAFitThatSawEveryLabel) {
  SetFractions({1.0});
  server_.short_polls = 2;
  absl::StatusOr<SimulationRow> row =
      RunFullDataReference(server_, dataset_, options_, Policy("all_ds"));
  ASSERT_THAT(row, IsOk());
  EXPECT_EQ(server_.first().status_calls, 3);
  EXPECT_THAT(sleeps_, SizeIs(2));
}

// A shadow of no label has nothing to fit: it is read without waiting for a
// fit (a server does not fit a project without labels).
TEST_F(RunReplayTest, AColdFitOfNoLabelDoesNotWaitForAFit) {
  SetFractions({1.0});
  options_.cold_fit_at_checkpoints = true;
  server_.suggest_nothing = true;
  server_.stale_polls = 1000;
  options_.reference_fit_timeout = absl::Seconds(1);
  options_.poll_interval = absl::Seconds(1);
  absl::StatusOr<ReplayResult> result = RunReplay(server_, dataset_, options_, Policy("random"), 3);
  ASSERT_THAT(result, IsOk());
  ASSERT_THAT(result->rows, SizeIs(2));
  EXPECT_EQ(result->rows[1].policy, "random/cold");
  EXPECT_EQ(result->rows[1].labels, 0);
  EXPECT_EQ(server_.projects["t-small-random-s3-c0"].status_calls, 0);
}

TEST_F(RunReplayTest, ReferenceSubmitsEverythingAndWaitsForAFitThatSawIt) {
  SetFractions({0.5, 1.0});
  server_.stale_polls = 2;
  absl::StatusOr<SimulationRow> row =
      RunFullDataReference(server_, dataset_, options_, Policy("all_mv"));
  ASSERT_THAT(row, IsOk());
  ASSERT_THAT(server_.names, ElementsAre("t-small-all_mv"));
  EXPECT_EQ(server_.first().project.settings().model().method(),
            v1::TRUTH_METHOD_MAJORITY_VOTE);
  EXPECT_THAT(server_.updated, SizeIs(0));
  EXPECT_EQ(server_.first().submitted.size(), 7u);
  EXPECT_THAT(sleeps_, SizeIs(2));
  EXPECT_EQ(row->policy, "all_mv");
  EXPECT_EQ(row->labels, 7);
  EXPECT_DOUBLE_EQ(row->fraction, 1.0);
  // Submitted in dataset order, so the fake's MAP is the last label in the
  // file: a→yes (w2), b→yes (w3), c→yes (w2); gold yes, no, yes.
  EXPECT_DOUBLE_EQ(row->accuracy, 2.0 / 3.0);
}

// A fit has seen every label only when no label arrived since its version
// (labels_since_version 0), even if its num_labels equals the labels
// submitted (header: "read once a fit of the wanted method has seen every
// label"). Two polls report one unseen label: two sleeps, then the read.
TEST_F(RunReplayTest, ReferenceWaitsWhileLabelsArrivedSinceTheVersion) {
  SetFractions({1.0});
  server_.unseen_polls = 2;
  absl::StatusOr<SimulationRow> row =
      RunFullDataReference(server_, dataset_, options_, Policy("all_mv"));
  ASSERT_THAT(row, IsOk());
  EXPECT_EQ(server_.first().status_calls, 3);
  EXPECT_THAT(sleeps_, SizeIs(2));
}

TEST_F(RunReplayTest, DawidSkeneReferenceSwitchesFromMajorityVoteAfterSubmit) {
  SetFractions({1.0});
  absl::StatusOr<SimulationRow> row =
      RunFullDataReference(server_, dataset_, options_, Policy("all_ds"));
  ASSERT_THAT(row, IsOk());
  EXPECT_THAT(server_.updated, ElementsAre("t-small-all_ds"));
  EXPECT_EQ(server_.first().project.settings().model().method(),
            v1::TRUTH_METHOD_DAWID_SKENE);
  EXPECT_EQ(row->policy, "all_ds");
}

TEST_F(RunReplayTest, ReferenceGivesUpWithDeadlineExceeded) {
  SetFractions({1.0});
  server_.stale_polls = 1000;
  options_.poll_interval = absl::Seconds(1);
  options_.reference_fit_timeout = absl::Seconds(3);
  EXPECT_THAT(
      RunFullDataReference(server_, dataset_, options_, Policy("all_ds")),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("all 7 labels")));
  EXPECT_THAT(sleeps_, SizeIs(3));
}

}  // namespace
}  // namespace verity::client
