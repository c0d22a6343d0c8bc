#include "models/auto_truth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/calibrated_truth_model.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

using ::testing::HasSubstr;
using ::verity::testing::IsOk;
using testing::GenerateSyntheticCrowd;
using testing::SymmetricConfusion;
using testing::SyntheticCrowd;
using testing::SyntheticCrowdSpec;

// A binary crowd whose annotators are good on class 0 and poor on class 1 (class-dependent
// confusions, which one_coin, glad and mv cannot represent), with a skewed class prior.
SyntheticCrowd ClassDependentCrowd(int32_t num_items, uint64_t seed) {
  SyntheticCrowdSpec spec;
  spec.num_items = num_items;
  spec.num_classes = 2;
  spec.labels_per_item = 5;
  spec.class_prior = {0.3, 0.7};
  for (int a = 0; a < 10; ++a) {
    // p(label | truth): class 0 labelled 0 with 0.95; class 1 labelled 1 with 0.6.
    spec.confusions.push_back({0.95, 0.05, 0.4, 0.6});
  }
  spec.seed = seed;
  return GenerateSyntheticCrowd(spec);
}

// Forwards to `inner` but serves the posteriors with the classes swapped (K = 2): a
// deliberately wrong model standing in for one candidate.
class SwappedModel final : public TruthModel {
 public:
  explicit SwappedModel(std::unique_ptr<TruthModel> inner) : inner_(std::move(inner)) {}
  std::string_view method() const override { return inner_->method(); }
  int32_t num_classes() const override { return inner_->num_classes(); }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<SwappedModel>(inner_->Clone());
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override {
    return inner_->Fit(data, gold, warm_start);
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    inner_->ItemPosterior(labels, gold_label, out);
    std::swap(out[0], out[1]);
  }
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override {
    return inner_->AnnotatorConfusion(annotator);
  }
  std::string Serialize() const override { return inner_->Serialize(); }
  absl::Status Restore(std::string_view serialized) override {
    return inner_->Restore(serialized);
  }

 private:
  std::unique_ptr<TruthModel> inner_;
};

// Forwards to `inner`, but an item whose gold it was given in Fit gets that gold one-hot
// even when asked for its unclamped posterior: a model that scores perfectly on any gold it
// saw, so a selection that leaked the scored fold's gold into the fit would choose it.
class GoldMemorizingModel final : public TruthModel {
 public:
  explicit GoldMemorizingModel(std::unique_ptr<TruthModel> inner) : inner_(std::move(inner)) {}
  std::string_view method() const override { return inner_->method(); }
  int32_t num_classes() const override { return inner_->num_classes(); }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override {
    auto copy = std::make_unique<GoldMemorizingModel>(inner_->Clone());
    copy->gold_ = gold_;
    return copy;
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override {
    gold_.assign(gold.begin(), gold.end());
    return inner_->Fit(data, gold, warm_start);
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    inner_->ItemPosterior(labels, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override {
    if (item >= 0 && item < static_cast<int32_t>(gold_.size()) && gold_[item] >= 0) {
      std::fill(out.begin(), out.end(), 0.0);
      out[gold_[item]] = 1.0;
      return;
    }
    inner_->ItemPosteriorForItem(item, labels, gold_label, out);
  }
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override {
    return inner_->AnnotatorConfusion(annotator);
  }
  std::string Serialize() const override { return inner_->Serialize(); }
  absl::Status Restore(std::string_view serialized) override {
    return inner_->Restore(serialized);
  }

 private:
  std::unique_ptr<TruthModel> inner_;
  std::vector<int32_t> gold_;
};

struct FitCall {
  std::string method;
  bool warm_start;
  std::vector<int32_t> gold;
};

// Records every Fit of every model it creates.
class RecordingModel final : public TruthModel {
 public:
  RecordingModel(std::unique_ptr<TruthModel> inner, std::shared_ptr<std::vector<FitCall>> calls)
      : inner_(std::move(inner)), calls_(std::move(calls)) {}
  std::string_view method() const override { return inner_->method(); }
  int32_t num_classes() const override { return inner_->num_classes(); }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<RecordingModel>(inner_->Clone(), calls_);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override {
    calls_->push_back({std::string(inner_->method()), warm_start,
                       std::vector<int32_t>(gold.begin(), gold.end())});
    return inner_->Fit(data, gold, warm_start);
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    inner_->ItemPosterior(labels, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry> labels,
                            int32_t gold_label, absl::Span<double> out) const override {
    inner_->ItemPosteriorForItem(item, labels, gold_label, out);
  }
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override {
    return inner_->AnnotatorConfusion(annotator);
  }
  std::vector<double> ItemAnnotatorConfusion(int32_t item, int32_t annotator) const override {
    return inner_->ItemAnnotatorConfusion(item, annotator);
  }
  std::string Serialize() const override { return inner_->Serialize(); }
  absl::Status Restore(std::string_view serialized) override {
    return inner_->Restore(serialized);
  }

 private:
  std::unique_ptr<TruthModel> inner_;
  std::shared_ptr<std::vector<FitCall>> calls_;
};

std::unique_ptr<AutoTruthModel> MakeAuto(int32_t num_classes,
                                         AutoTruthModel::CandidateFactory factory) {
  absl::StatusOr<std::unique_ptr<AutoTruthModel>> model =
      AutoTruthModel::Create(num_classes, {}, std::move(factory));
  EXPECT_THAT(model, IsOk());
  return *std::move(model);
}

const AutoCandidateScore& ScoreOf(const AutoChoice& choice, std::string_view method) {
  for (const AutoCandidateScore& s : choice.scores) {
    if (s.method == method) return s;
  }
  ADD_FAILURE() << "no score for " << method;
  return choice.scores.front();
}

TEST(AutoTruthModelTest, ClassDependentConfusionsWithoutGoldChooseDsByHeldOutLabels) {
  SyntheticCrowd crowd = ClassDependentCrowd(2000, 3);
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, &CreateUncalibratedTruthModel);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  const AutoChoice& choice = model->choice();
  EXPECT_EQ(choice.criterion, "held_out_labels");
  EXPECT_EQ(choice.method, "ds");
  EXPECT_EQ(model->served().method(), "ds");
  // ds models the class-dependent errors: it predicts held-out labels better than the
  // symmetric-error models and the vote.
  for (std::string_view other : {"one_coin", "mv"}) {
    EXPECT_GT(ScoreOf(choice, "ds").held_out_log_likelihood,
              ScoreOf(choice, other).held_out_log_likelihood)
        << other;
  }
  EXPECT_THAT(choice.reason, HasSubstr("held_out_labels"));
  EXPECT_THAT(choice.reason, HasSubstr("one_coin"));
}

// Candidates as usual, but "ds" serves the swapped classes: every other candidate is right.
AutoTruthModel::CandidateFactory FactoryWithDsSwapped() {
  return [](std::string_view method, int32_t k,
            const TruthModelOptions& options) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateUncalibratedTruthModel(method, k, options);
    if (!model.ok() || method != "ds") return model;
    return std::unique_ptr<TruthModel>(std::make_unique<SwappedModel>(*std::move(model)));
  };
}

// `items` binary items, 3 labels each from 6 annotators right 80 % of the time.
SyntheticCrowd ThreeVotesAtEightyPercent(int32_t items) {
  SyntheticCrowdSpec spec;
  spec.num_items = items;
  spec.labels_per_item = 3;
  for (int a = 0; a < 6; ++a) spec.confusions.push_back(SymmetricConfusion(2, 0.8));
  return GenerateSyntheticCrowd(spec);
}

TEST(AutoTruthModelTest, AWrongDsIsReplacedWithAndWithoutGold) {
  // "ds" is replaced by a model serving the swapped classes; every other candidate is right.
  AutoTruthModel::CandidateFactory factory = FactoryWithDsSwapped();
  SyntheticCrowd crowd = ThreeVotesAtEightyPercent(600);

  std::unique_ptr<AutoTruthModel> no_gold = MakeAuto(2, factory);
  ASSERT_THAT(no_gold->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(no_gold->choice().criterion, "held_out_labels");
  EXPECT_NE(no_gold->choice().method, "ds");

  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 6) gold[i] = crowd.truth[i];  // 100 gold items
  std::unique_ptr<AutoTruthModel> with_gold = MakeAuto(2, factory);
  ASSERT_THAT(with_gold->Fit(crowd.matrix, gold, false), IsOk());
  EXPECT_EQ(with_gold->choice().criterion, "gold_cv");
  EXPECT_NE(with_gold->choice().method, "ds");
  EXPECT_LT(ScoreOf(with_gold->choice(), "ds").accuracy, 0.5);
  EXPECT_GT(ScoreOf(with_gold->choice(), with_gold->choice().method).accuracy, 0.75);  // 3 votes at 0.8: 0.896 expected
}

// Above kMaxSelectionLabels labels selection runs on every n-th item, renumbered, with the gold
// of those items (auto_truth_model.h). The case above at 210,000 labels (70,000 items, so every
// 2nd item): the gold cross-validation still scores the wrong ds below 0.5 and the others near
// 3 votes' 0.896, which it could not if an item's gold were paired with another item's labels;
// the served model, fitted on every item, gets them right as often.
TEST(AutoTruthModelTest, SelectionOnASubsampleOfALargeProjectKeepsEachItemsGold) {
  AutoTruthModel::CandidateFactory factory = FactoryWithDsSwapped();
  SyntheticCrowd crowd = ThreeVotesAtEightyPercent(70'000);
  ASSERT_GT(crowd.matrix.num_labels(), AutoTruthModel::kMaxSelectionLabels);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 6) gold[i] = crowd.truth[i];
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, factory);
  ASSERT_THAT(model->Fit(crowd.matrix, gold, false), IsOk());
  EXPECT_EQ(model->choice().criterion, "gold_cv");
  // 210,000 labels, above kMaxSelectionLabels (200,000): every ceil(210,000 / 200,000) = 2nd
  // item is selected.
  EXPECT_THAT(model->choice().reason, HasSubstr("(selection on 35000 of 70000 items)"));
  EXPECT_NE(model->choice().method, "ds");
  EXPECT_LT(ScoreOf(model->choice(), "ds").accuracy, 0.5);
  EXPECT_GT(ScoreOf(model->choice(), model->choice().method).accuracy, 0.85);
  // Served: every item, the gold ones clamped; count the others against the truth.
  const std::vector<double> posteriors = AllPosteriors(*model, crowd.matrix, gold);
  int64_t right = 0, scored = 0;
  for (int32_t i = 0; i < crowd.matrix.num_items(); ++i) {
    if (gold[i] >= 0) continue;
    ++scored;
    right += (posteriors[2 * i + 1] > posteriors[2 * i]) == (crowd.truth[i] == 1) ? 1 : 0;
  }
  EXPECT_GT(static_cast<double>(right) / scored, 0.85);
}

// auto_truth_model.h: a candidate replaces ds only when it is better by the margin; when every
// candidate is ds in disguise (the same fits, the same scores), ds is kept, with and without
// gold.
TEST(AutoTruthModelTest, CandidatesThatTieWithDsLeaveDsServed) {
  AutoTruthModel::CandidateFactory every_one_ds =
      [](std::string_view, int32_t k,
         const TruthModelOptions& options) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    return CreateUncalibratedTruthModel("ds", k, options);
  };
  SyntheticCrowd crowd = ThreeVotesAtEightyPercent(600);
  std::unique_ptr<AutoTruthModel> no_gold = MakeAuto(2, every_one_ds);
  ASSERT_THAT(no_gold->Fit(crowd.matrix, {}, false), IsOk());
  EXPECT_EQ(no_gold->choice().criterion, "held_out_labels");
  EXPECT_EQ(no_gold->choice().method, "ds");
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 6) gold[i] = crowd.truth[i];
  std::unique_ptr<AutoTruthModel> with_gold = MakeAuto(2, every_one_ds);
  ASSERT_THAT(with_gold->Fit(crowd.matrix, gold, false), IsOk());
  EXPECT_EQ(with_gold->choice().criterion, "gold_cv");
  EXPECT_EQ(with_gold->choice().method, "ds");
}

TEST(AutoTruthModelTest, GoldCrossValidationNeverScoresGoldTheFitSaw) {
  // "mv" memorises the gold it is fitted with: if a fold's gold reached the fit that scores
  // it, mv would score 100 % and be chosen. The crowd (3 labels from annotators of mixed
  // quality) gives mv clearly fewer right answers than ds on unseen items.
  AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t k,
         const TruthModelOptions& options) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateUncalibratedTruthModel(method, k, options);
    if (!model.ok() || method != "mv") return model;
    return std::unique_ptr<TruthModel>(std::make_unique<GoldMemorizingModel>(*std::move(model)));
  };
  SyntheticCrowdSpec spec;
  spec.num_items = 900;
  spec.labels_per_item = 3;
  for (double accuracy : {0.95, 0.95, 0.55, 0.55, 0.55}) {
    spec.confusions.push_back(SymmetricConfusion(2, accuracy));
  }
  SyntheticCrowd crowd = GenerateSyntheticCrowd(spec);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 9) gold[i] = crowd.truth[i];  // 100 gold items

  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(crowd.matrix, gold, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "gold_cv");
  EXPECT_LT(ScoreOf(*choice, "mv").accuracy, 0.95);
  EXPECT_NE(choice->method, "mv");
}

TEST(AutoTruthModelTest, GoldFoldsPartitionTheGoldItems) {
  auto calls = std::make_shared<std::vector<FitCall>>();
  AutoTruthModel::CandidateFactory factory =
      [calls](std::string_view method, int32_t k,
              const TruthModelOptions& options) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateUncalibratedTruthModel(method, k, options);
    if (!model.ok()) return model;
    return std::unique_ptr<TruthModel>(std::make_unique<RecordingModel>(*std::move(model), calls));
  };
  SyntheticCrowd crowd = ClassDependentCrowd(300, 5);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  std::set<int32_t> gold_items;
  for (int32_t i = 0; i < 300; i += 5) {
    gold[i] = crowd.truth[i];
    gold_items.insert(i);
  }
  ASSERT_THAT(ChooseTruthMethod(crowd.matrix, gold, {}, factory), IsOk());
  for (std::string_view method : AutoTruthModel::kCandidateMethods) {
    std::vector<std::set<int32_t>> hidden;
    for (const FitCall& call : *calls) {
      if (call.method != method) continue;
      EXPECT_FALSE(call.warm_start);
      std::set<int32_t> h;
      for (int32_t i : gold_items) {
        if (call.gold[i] < 0) h.insert(i);
        else EXPECT_EQ(call.gold[i], gold[i]);
      }
      hidden.push_back(std::move(h));
    }
    ASSERT_EQ(hidden.size(), static_cast<size_t>(AutoTruthModel::kGoldFolds)) << method;
    std::multiset<int32_t> all;
    for (const std::set<int32_t>& h : hidden) {
      EXPECT_GE(h.size(), gold_items.size() / AutoTruthModel::kGoldFolds) << method;
      all.insert(h.begin(), h.end());
    }
    // Every gold item is held out of exactly one fit.
    EXPECT_EQ(all, std::multiset<int32_t>(gold_items.begin(), gold_items.end())) << method;
  }
}

TEST(AutoTruthModelTest, TooFewGoldItemsUseHeldOutLabels) {
  SyntheticCrowd crowd = ClassDependentCrowd(400, 7);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (int32_t i = 0; i < AutoTruthModel::kMinGoldItems - 1; ++i) gold[i] = crowd.truth[i];
  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(crowd.matrix, gold, {}, &CreateUncalibratedTruthModel);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
}

TEST(AutoTruthModelTest, OneLabelPerItemFallsBackToDs) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 50; ++i) annotations.push_back({i, i % 3, i % 2});
  absl::StatusOr<AnnotationMatrix> data = AnnotationMatrix::Build(50, 3, 2, annotations);
  ASSERT_THAT(data, IsOk());
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, &CreateUncalibratedTruthModel);
  ASSERT_THAT(model->Fit(*data, {}, false), IsOk());
  EXPECT_EQ(model->choice().criterion, "fallback");
  EXPECT_EQ(model->choice().method, "ds");
  EXPECT_TRUE(model->has_parameters());
  EXPECT_TRUE(absl::StartsWith(model->choice().reason, "fallback: ")) << model->choice().reason;
  EXPECT_TRUE(absl::StrContains(model->choice().reason, "; 0 such items"))
      << model->choice().reason;
}

TEST(AutoTruthModelTest, SerializeRestoresTheChosenModelAndChoice) {
  SyntheticCrowd crowd = ClassDependentCrowd(500, 11);
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, &CreateUncalibratedTruthModel);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false), IsOk());
  std::unique_ptr<AutoTruthModel> restored = MakeAuto(2, &CreateUncalibratedTruthModel);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  EXPECT_EQ(restored->choice().method, model->choice().method);
  EXPECT_EQ(restored->choice().criterion, model->choice().criterion);
  EXPECT_EQ(restored->choice().reason, model->choice().reason);
  EXPECT_EQ(restored->served().method(), model->served().method());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}), AllPosteriors(*model, crowd.matrix, {}));
  EXPECT_EQ(restored->Serialize(), model->Serialize());

  std::string corrupt = model->Serialize();
  corrupt[corrupt.size() / 2] ^= 0x5a;
  EXPECT_FALSE(restored->Restore(corrupt).ok());
  std::unique_ptr<AutoTruthModel> three = MakeAuto(3, &CreateUncalibratedTruthModel);
  EXPECT_FALSE(three->Restore(model->Serialize()).ok());
}

TEST(AutoTruthModelTest, SameChoiceWarmStartsTheServedModel) {
  auto calls = std::make_shared<std::vector<FitCall>>();
  AutoTruthModel::CandidateFactory factory =
      [calls](std::string_view method, int32_t k,
              const TruthModelOptions& options) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateUncalibratedTruthModel(method, k, options);
    if (!model.ok()) return model;
    return std::unique_ptr<TruthModel>(std::make_unique<RecordingModel>(*std::move(model), calls));
  };
  SyntheticCrowd crowd = ClassDependentCrowd(800, 13);
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, factory);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, true), IsOk());
  ASSERT_EQ(model->choice().method, "ds");
  ASSERT_FALSE(calls->empty());
  EXPECT_FALSE(calls->back().warm_start);  // no parameters yet: cold
  EXPECT_EQ(calls->back().method, "ds");
  calls->clear();
  ASSERT_THAT(model->Fit(crowd.matrix, {}, true), IsOk());
  ASSERT_EQ(model->choice().method, "ds");
  EXPECT_TRUE(calls->back().warm_start);
  EXPECT_EQ(calls->back().method, "ds");
  // Every selection fit is cold.
  for (size_t c = 0; c + 1 < calls->size(); ++c) EXPECT_FALSE((*calls)[c].warm_start);
}

TEST(AutoTruthModelTest, CalibrationAppliesThroughAuto) {
  // The calibration wrapper's label-only map needs a posterior that is prior x product of
  // confusions; auto forwards ds's, so its map equals the one fitted on ds directly.
  SyntheticCrowd crowd = ClassDependentCrowd(1500, 17);
  absl::StatusOr<std::unique_ptr<TruthModel>> automatic = CreateTruthModel("auto", 2, {});
  absl::StatusOr<std::unique_ptr<TruthModel>> ds = CreateTruthModel("ds", 2, {});
  ASSERT_THAT(automatic, IsOk());
  ASSERT_THAT(ds, IsOk());
  ASSERT_THAT((*automatic)->Fit(crowd.matrix, {}, false), IsOk());
  ASSERT_THAT((*ds)->Fit(crowd.matrix, {}, false), IsOk());
  const auto& a = dynamic_cast<const CalibratedTruthModel&>(**automatic);
  const auto& d = dynamic_cast<const CalibratedTruthModel&>(**ds);
  ASSERT_EQ(dynamic_cast<const AutoTruthModel&>(a.inner()).choice().method, "ds");
  EXPECT_EQ(a.method(), "auto");
  EXPECT_EQ(a.calibration().source, CalibrationSource::kCrowdLabels);
  EXPECT_EQ(a.calibration().source, d.calibration().source);
  EXPECT_DOUBLE_EQ(a.calibration().temperature, d.calibration().temperature);
  EXPECT_EQ(AllPosteriors(a, crowd.matrix, {}), AllPosteriors(d, crowd.matrix, {}));
}

TEST(AutoTruthModelTest, GoldCalibrationOfAutoIsTheServedMethods) {
  // With gold, the calibration wrapper cross-fits copies of the served method; when auto serves
  // ds, its map is the one fitted on ds directly.
  SyntheticCrowd crowd = ClassDependentCrowd(1200, 19);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 8) gold[i] = crowd.truth[i];  // 150 gold items
  absl::StatusOr<std::unique_ptr<TruthModel>> automatic = CreateTruthModel("auto", 2, {});
  absl::StatusOr<std::unique_ptr<TruthModel>> ds = CreateTruthModel("ds", 2, {});
  ASSERT_THAT(automatic, IsOk());
  ASSERT_THAT(ds, IsOk());
  ASSERT_THAT((*automatic)->Fit(crowd.matrix, gold, false), IsOk());
  ASSERT_THAT((*ds)->Fit(crowd.matrix, gold, false), IsOk());
  const auto& a = dynamic_cast<const CalibratedTruthModel&>(**automatic);
  const auto& d = dynamic_cast<const CalibratedTruthModel&>(**ds);
  const AutoChoice& choice = dynamic_cast<const AutoTruthModel&>(a.inner()).choice();
  ASSERT_EQ(choice.method, "ds") << choice.reason;
  EXPECT_EQ(choice.criterion, "gold_cv");
  EXPECT_EQ(a.calibration().source, CalibrationSource::kGold);
  EXPECT_EQ(a.calibration().gold_items, d.calibration().gold_items);
  EXPECT_DOUBLE_EQ(a.calibration().temperature, d.calibration().temperature);
}

// A stand-in candidate with fixed outputs: the posterior of item i is right(i) ? (0.9, 0.1) :
// (0.1, 0.9) (K = 2; class 0 is "right"), or (0.5, 0.5) without `right`; every annotator's
// confusion is `confusion` (2 x 2, row-major). Fit does nothing. If `held` is set, every
// ItemAnnotatorConfusion(item, annotator) call is recorded there (held-out scoring asks for one
// per held-out label).
class FixedModel final : public TruthModel {
 public:
  FixedModel(std::string method, std::function<bool(int32_t)> right,
             std::vector<double> confusion,
             std::shared_ptr<std::vector<std::pair<int32_t, int32_t>>> held)
      : method_(std::move(method)),
        right_(std::move(right)),
        confusion_(std::move(confusion)),
        held_(std::move(held)) {}
  std::string_view method() const override { return method_; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return fitted_; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<FixedModel>(*this);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    fitted_ = true;
    return FitReport();
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t gold_label,
                     absl::Span<double> out) const override {
    ItemPosteriorForItem(-1, {}, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry>,
                            int32_t gold_label, absl::Span<double> out) const override {
    if (gold_label >= 0) {
      out[0] = gold_label == 0 ? 1.0 : 0.0;
      out[1] = 1.0 - out[0];
    } else if (!right_) {
      out[0] = out[1] = 0.5;
    } else {
      out[0] = right_(item) ? 0.9 : 0.1;
      out[1] = 1.0 - out[0];
    }
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return confusion_; }
  std::vector<double> ItemAnnotatorConfusion(int32_t item, int32_t annotator) const override {
    if (held_ != nullptr) held_->push_back({item, annotator});
    return confusion_;
  }
  std::string Serialize() const override { return method_; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  std::string method_;
  std::function<bool(int32_t)> right_;
  std::vector<double> confusion_;
  std::shared_ptr<std::vector<std::pair<int32_t, int32_t>>> held_;
  bool fitted_ = false;
};

// Only "ds" and "mv" exist (the other candidates fail to be created and are skipped).
AutoTruthModel::CandidateFactory DsAndMv(std::function<bool(int32_t)> ds_right,
                                         std::function<bool(int32_t)> mv_right,
                                         std::vector<double> mv_confusion = {0.5, 0.5, 0.5, 0.5},
                                         std::shared_ptr<std::vector<std::pair<int32_t, int32_t>>>
                                             ds_held = nullptr) {
  return [=](std::string_view method, int32_t,
             const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") {
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          "ds", ds_right, std::vector<double>{0.5, 0.5, 0.5, 0.5}, ds_held));
    }
    if (method == "mv") {
      return std::unique_ptr<TruthModel>(
          std::make_unique<FixedModel>("mv", mv_right, mv_confusion, nullptr));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
}

// Promise (auto_truth_model.h): with gold, a candidate replaces ds only if it gets at least
// kGoldMarginItems (2) more gold items right than ds AND its accuracy gain is at least
// kGoldStandardErrors (2) standard errors of the paired per-item difference d_i =
// right_candidate(i) - right_ds(i), SE = sqrt(sum (d_i - mean)^2 / (n - 1) / n).
// 30 gold items, all of class 0, one label each (annotator 0 says 0):
//   - ds wrong on items 0..7, mv wrong on items 8..11: mv gets 4 more right (margin passes);
//     d = +1 on 8 items, -1 on 4, 0 on 18; mean = 4/30 = 0.133333;
//     sum (d - mean)^2 = 12 - 30 (4/30)^2 = 11.466667; SE = sqrt(11.466667 / 29 / 30)
//     = 0.1148045; 2 SE = 0.229609 > 0.133333: ds is kept.
//   - control, ds wrong on items 0..3 and mv never: again 4 more right, but
//     sum (d - mean)^2 = 4 - 0.533333 = 3.466667, SE = 0.0631243, 2 SE = 0.126249 < 0.133333:
//     mv replaces ds.
TEST(AutoTruthModelTest, GoldCvKeepsDsWhenTheMarginPassesButTwoStandardErrorsDoNot) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 30; ++i) annotations.push_back({i, 0, 0});
  const AnnotationMatrix data = *AnnotationMatrix::Build(30, 1, 2, annotations);
  const std::vector<int32_t> gold(30, 0);

  absl::StatusOr<AutoChoice> noisy = ChooseTruthMethod(
      data, gold, {}, DsAndMv([](int32_t i) { return i >= 8; },
                              [](int32_t i) { return i < 8 || i >= 12; }));
  ASSERT_THAT(noisy, IsOk());
  EXPECT_EQ(noisy->criterion, "gold_cv");
  EXPECT_NEAR(ScoreOf(*noisy, "ds").accuracy, 22.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*noisy, "mv").accuracy, 26.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*noisy, "mv").accuracy_standard_error, 0.1148045148, 1e-9);
  EXPECT_EQ(noisy->method, "ds") << noisy->reason;

  absl::StatusOr<AutoChoice> clear = ChooseTruthMethod(
      data, gold, {}, DsAndMv([](int32_t i) { return i >= 4; }, [](int32_t) { return true; }));
  ASSERT_THAT(clear, IsOk());
  EXPECT_NEAR(ScoreOf(*clear, "ds").accuracy, 26.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*clear, "mv").accuracy, 1.0, 1e-12);
  EXPECT_NEAR(ScoreOf(*clear, "mv").accuracy_standard_error, 0.0631242769, 1e-9);
  EXPECT_EQ(clear->method, "mv") << clear->reason;
}

// Promise (auto_truth_model.h): without gold, a candidate replaces ds only if its mean
// held-out log-likelihood beats ds's by kHeldOutMarginNats (0.05) per label AND by
// kHeldOutStandardErrors (2) standard errors of the paired per-label difference.
// Both stand-ins give every item q = (1/2, 1/2); ds's annotators are uniform, so every held-out
// label scores log(1/2); mv's say 0 with probability 0.8 whatever the truth, so a held-out label
// scores log 0.8 if it is 0 and log 0.2 if it is 1: d = log 1.6 = +0.4700036 for a 0 and
// log 0.4 = -0.9162907 for a 1. With n0 zeros and n1 ones among the n held-out labels (read
// from the labels ds was asked to predict; which labels are held out is a seeded draw),
// f = n0 / n, mean = f log 1.6 + (1 - f) log 0.4 and, d taking two values,
// sum (d - mean)^2 = n f (1 - f) (log 1.6 - log 0.4)^2, SE = log 4 sqrt(f (1 - f) / (n - 1)).
// A quarter of the labels are 1, so mean ~ 0.75 * 0.470 - 0.25 * 0.916 = 0.123 and the
// standard deviation of d ~ log 4 * sqrt(3/16) = 0.60: on 160 items (~48 held-out labels,
// SE ~ 0.087) the gain is more than the margin and more than one SE but less than 2 SE, and ds
// is kept (the draw of this seed holds out 42 labels, 10 of them 1: mean 0.140, 2 SE 0.184);
// on 3000 items (~900 held-out labels, 2 SE ~ 0.04) mv replaces ds.
TEST(AutoTruthModelTest, HeldOutLabelsKeepDsWhenTheMarginPassesButTwoStandardErrorsDoNot) {
  const auto label_of = [](int32_t item, int32_t annotator) {
    const int32_t j = (annotator - item % 6 + 6) % 6;  // 0, 1 or 2: the label's slot
    return (3 * item + j) % 4 == 0 ? 1 : 0;
  };
  const auto crowd = [&](int32_t items) {
    std::vector<Annotation> annotations;
    for (int32_t i = 0; i < items; ++i) {
      for (int32_t j = 0; j < 3; ++j) {
        const int32_t annotator = (i + j) % 6;
        annotations.push_back({i, annotator, label_of(i, annotator)});
      }
    }
    return *AnnotationMatrix::Build(items, 6, 2, annotations);
  };
  const double d0 = std::log(1.6), d1 = std::log(0.4);
  struct Expected {
    double mean;
    double se;
  };
  const auto expected = [&](const std::vector<std::pair<int32_t, int32_t>>& held) {
    double n0 = 0, n1 = 0;
    for (const auto& [item, annotator] : held) (label_of(item, annotator) == 0 ? n0 : n1) += 1;
    const double n = n0 + n1, f = n0 / n;
    return Expected{f * d0 + (1 - f) * d1, (d0 - d1) * std::sqrt(f * (1 - f) / (n - 1))};
  };
  const std::vector<double> says_zero = {0.8, 0.2, 0.8, 0.2};

  auto small_held = std::make_shared<std::vector<std::pair<int32_t, int32_t>>>();
  absl::StatusOr<AutoChoice> small = ChooseTruthMethod(
      crowd(160), {}, {}, DsAndMv(nullptr, nullptr, says_zero, small_held));
  ASSERT_THAT(small, IsOk());
  EXPECT_EQ(small->criterion, "held_out_labels");
  ASSERT_GE(small_held->size(), 3u);
  const Expected s = expected(*small_held);
  EXPECT_NEAR(ScoreOf(*small, "ds").held_out_log_likelihood, std::log(0.5), 1e-12);
  EXPECT_NEAR(ScoreOf(*small, "mv").held_out_log_likelihood - std::log(0.5), s.mean, 1e-12);
  EXPECT_NEAR(ScoreOf(*small, "mv").held_out_standard_error, s.se, 1e-12);
  // The case this test is about: the margin passes, two standard errors do not.
  ASSERT_GE(s.mean, AutoTruthModel::kHeldOutMarginNats);
  ASSERT_GT(s.mean, s.se);
  ASSERT_LT(s.mean, 2 * s.se);
  EXPECT_EQ(small->method, "ds") << small->reason;

  auto large_held = std::make_shared<std::vector<std::pair<int32_t, int32_t>>>();
  absl::StatusOr<AutoChoice> large = ChooseTruthMethod(
      crowd(3000), {}, {}, DsAndMv(nullptr, nullptr, says_zero, large_held));
  ASSERT_THAT(large, IsOk());
  const Expected l = expected(*large_held);
  EXPECT_NEAR(ScoreOf(*large, "mv").held_out_standard_error, l.se, 1e-12);
  ASSERT_GE(l.mean, 2 * l.se);
  EXPECT_EQ(large->method, "mv") << large->reason;
}

// A candidate whose posterior is uninformative (1/2, 1/2) and whose confusion is uniform, but
// whose PredictLabel says the item's first label again with probability 0.9: it scores held-out
// labels only through PredictLabel.
class EchoPredictingModel final : public TruthModel {
 public:
  std::string_view method() const override { return "ebcc"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return fitted_; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<EchoPredictingModel>(*this);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    fitted_ = true;
    return FitReport();
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t gold_label,
                     absl::Span<double> out) const override {
    out[0] = gold_label < 0 ? 0.5 : (gold_label == 0 ? 1.0 : 0.0);
    out[1] = 1.0 - out[0];
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.5, 0.5, 0.5, 0.5}; }
  std::vector<double> PredictLabel(int32_t, absl::Span<const AnnotationMatrix::Entry> labels,
                                   int32_t) const override {
    if (labels.empty()) return {0.5, 0.5};
    return labels[0].label == 0 ? std::vector<double>{0.9, 0.1} : std::vector<double>{0.1, 0.9};
  }
  std::string Serialize() const override { return "ebcc"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  bool fitted_ = false;
};

// Promise (auto_truth_model.h): without gold, a held-out label (j, l) on item i scores
// log PredictLabel(i, remaining labels, j)[l], the candidate's own predictive (ebcc's conditions
// on the subtype), not sum_k q_i(k) pi_ij[k, l]. Every annotator gives item i the label i % 2,
// so the echoing candidate scores log 0.9 on every held-out label and ds (uniform) log 0.5;
// scored by posterior times confusion the candidate would tie with ds at log 0.5.
TEST(AutoTruthModelTest, HeldOutLabelsAreScoredByTheCandidatesPredictLabel) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 400; ++i) {
    for (int32_t a = 0; a < 4; ++a) annotations.push_back({i, a, i % 2});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(400, 4, 2, annotations);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") {
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          "ds", nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
    }
    if (method == "ebcc") return std::unique_ptr<TruthModel>(std::make_unique<EchoPredictingModel>());
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, {}, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  EXPECT_NEAR(ScoreOf(*choice, "ds").held_out_log_likelihood, std::log(0.5), 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "ebcc").held_out_log_likelihood, std::log(0.9), 1e-12);
  EXPECT_EQ(choice->method, "ebcc") << choice->reason;
}

// Promise (auto_truth_model.h): the held-out margin is kHeldOutMarginNats = 0.05 nats per label.
// Every label is 0; ds (uniform) scores log 0.5 on each held-out label and mv, whose annotators
// say 0 with probability p whatever the truth, log p, so the gain is log 2p on every label and
// its standard error 0. p = 0.51 (gain log 1.02 = 0.0198 nats) keeps ds; p = 0.54 (log 1.08 =
// 0.0770) chooses mv.
TEST(AutoTruthModelTest, HeldOutGainsBelowFiveHundredthsOfANatKeepDs) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 300; ++i) {
    for (int32_t a = 0; a < 3; ++a) annotations.push_back({i, a, 0});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(300, 3, 2, annotations);
  absl::StatusOr<AutoChoice> small =
      ChooseTruthMethod(data, {}, {}, DsAndMv(nullptr, nullptr, {0.51, 0.49, 0.51, 0.49}));
  ASSERT_THAT(small, IsOk());
  EXPECT_NEAR(ScoreOf(*small, "mv").held_out_log_likelihood - std::log(0.5), std::log(1.02),
              1e-12);
  EXPECT_NEAR(ScoreOf(*small, "mv").held_out_standard_error, 0.0, 1e-12);
  EXPECT_EQ(small->method, "ds") << small->reason;
  absl::StatusOr<AutoChoice> large =
      ChooseTruthMethod(data, {}, {}, DsAndMv(nullptr, nullptr, {0.54, 0.46, 0.54, 0.46}));
  ASSERT_THAT(large, IsOk());
  EXPECT_NEAR(ScoreOf(*large, "mv").held_out_log_likelihood - std::log(0.5), std::log(1.08),
              1e-12);
  EXPECT_EQ(large->method, "mv") << large->reason;
}

// Promise (auto_truth_model.h, kMaxEbccCells): ebcc is a candidate only while its dense state,
// (annotators + 1) * 10 subtypes * K^2 cells, is at most 4,000,000. At K = 100, 39 annotators
// make 40 * 10 * 10^4 = 4,000,000 cells (a candidate) and 40 annotators 4,100,000 (not one).
TEST(AutoTruthModelTest, EbccIsACandidateOnlyWhileItsDenseStateIsBounded) {
  const auto candidates = [](int32_t annotators) {
    std::vector<Annotation> annotations;
    for (int32_t i = 0; i < 50; ++i) {
      // Labels 0 and 1 only: the stand-ins serve 2 classes.
      for (int32_t a = 0; a < annotators; ++a) annotations.push_back({i, a, i % 2});
    }
    const AnnotationMatrix data = *AnnotationMatrix::Build(50, annotators, 100, annotations);
    const AutoTruthModel::CandidateFactory factory =
        [](std::string_view method, int32_t,
           const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
      if (method == "ds" || method == "ebcc") {
        return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
            std::string(method), nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
      }
      return absl::InvalidArgumentError("not a candidate here");
    };
    absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, {}, {}, factory);
    EXPECT_THAT(choice, IsOk());
    std::vector<std::string> methods;
    if (choice.ok()) {
      for (const AutoCandidateScore& s : choice->scores) methods.push_back(s.method);
    }
    return methods;
  };
  EXPECT_THAT(candidates(39), ::testing::UnorderedElementsAre("ds", "ebcc"));
  EXPECT_THAT(candidates(40), ::testing::UnorderedElementsAre("ds"));
}

// Like FixedModel, but an item's posterior is right(i) ? (c, 1 - c) : (1 - c, c) with a chosen
// confidence c (class 0 is "right"), so that log-losses differ.
class ConfidentModel final : public TruthModel {
 public:
  ConfidentModel(std::string method, std::function<bool(int32_t)> right, double confidence)
      : method_(std::move(method)), right_(std::move(right)), confidence_(confidence) {}
  std::string_view method() const override { return method_; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return fitted_; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<ConfidentModel>(*this);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>,
                                bool) override {
    fitted_ = true;
    return FitReport();
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t gold_label,
                     absl::Span<double> out) const override {
    ItemPosteriorForItem(-1, {}, gold_label, out);
  }
  void ItemPosteriorForItem(int32_t item, absl::Span<const AnnotationMatrix::Entry>,
                            int32_t gold_label, absl::Span<double> out) const override {
    if (gold_label >= 0) {
      out[0] = gold_label == 0 ? 1.0 : 0.0;
    } else {
      out[0] = right_(item) ? confidence_ : 1.0 - confidence_;
    }
    out[1] = 1.0 - out[0];
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.5, 0.5, 0.5, 0.5}; }
  std::string Serialize() const override { return method_; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  std::string method_;
  std::function<bool(int32_t)> right_;
  double confidence_;
  bool fitted_ = false;
};

// 30 gold items, all of class 0, one label each (annotator 0 says 0): gold_cv.
AnnotationMatrix ThirtyGoldItems() {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 30; ++i) annotations.push_back({i, 0, 0});
  return *AnnotationMatrix::Build(30, 1, 2, annotations);
}

// Promise (auto_truth_model.h): with gold, among the candidates that pass ds's margins the most
// accurate wins; log-loss is the mean of -log p(gold class) over the gold items.
// ds (confidence 0.9) is wrong on items 0..9: 20/30 right, log-loss (20 (-log 0.9) +
// 10 (-log 0.1)) / 30. one_coin is wrong on items 0..1: 8 more right than ds, d = +1 on 8 items,
// SE = sqrt((8 - 64/30) / 29 / 30) = 0.0821, 2 SE = 0.164 < 8/30: it passes. mv is always right:
// 10 more, passes too, and is the more accurate (30/30 against 28/30), so mv is chosen although
// one_coin comes first among the candidates.
TEST(AutoTruthModelTest, GoldCvChoosesTheMostAccurateOfTheCandidatesThatPass) {
  const AnnotationMatrix data = ThirtyGoldItems();
  const std::vector<int32_t> gold(30, 0);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") {
      return std::unique_ptr<TruthModel>(
          std::make_unique<ConfidentModel>("ds", [](int32_t i) { return i >= 10; }, 0.9));
    }
    if (method == "one_coin") {
      return std::unique_ptr<TruthModel>(
          std::make_unique<ConfidentModel>("one_coin", [](int32_t i) { return i >= 2; }, 0.9));
    }
    if (method == "mv") {
      return std::unique_ptr<TruthModel>(
          std::make_unique<ConfidentModel>("mv", [](int32_t) { return true; }, 0.9));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, gold, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "gold_cv");
  EXPECT_NEAR(ScoreOf(*choice, "ds").accuracy, 20.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "ds").log_loss,
              (20 * -std::log(0.9) + 10 * -std::log(0.1)) / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "one_coin").accuracy, 28.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "mv").log_loss, -std::log(0.9), 1e-12);
  EXPECT_EQ(choice->method, "mv") << choice->reason;
}

// Promise (auto_truth_model.h): with gold, accuracy ties between candidates that pass are broken
// by the lower log-loss. one_coin and mv both get all 30 gold items right (ds 20), one_coin with
// confidence 0.9 (log-loss -log 0.9 = 0.105), mv with 0.99 (-log 0.99 = 0.010): mv wins.
TEST(AutoTruthModelTest, GoldCvBreaksAccuracyTiesByLogLoss) {
  const AnnotationMatrix data = ThirtyGoldItems();
  const std::vector<int32_t> gold(30, 0);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") {
      return std::unique_ptr<TruthModel>(
          std::make_unique<ConfidentModel>("ds", [](int32_t i) { return i >= 10; }, 0.9));
    }
    if (method == "one_coin" || method == "mv") {
      return std::unique_ptr<TruthModel>(std::make_unique<ConfidentModel>(
          std::string(method), [](int32_t) { return true; }, method == "mv" ? 0.99 : 0.9));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, gold, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_NEAR(ScoreOf(*choice, "one_coin").log_loss, -std::log(0.9), 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "mv").log_loss, -std::log(0.99), 1e-12);
  EXPECT_EQ(choice->method, "mv") << choice->reason;
}

// Promise (auto_truth_model.h): gold cross-validation scores the gold items *with labels*.
// Items 0..29 carry one label and gold 0; items 30..39 have gold 1 but no label and are not
// scored. ds is right on items 10..29 (20/30), mv on all 30. Scored, the 10 unlabelled items
// (served (0.9, 0.1) against gold 1) would give ds 20/40 and mv 30/40.
TEST(AutoTruthModelTest, GoldCvScoresOnlyGoldItemsWithLabels) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 30; ++i) annotations.push_back({i, 0, 0});
  const AnnotationMatrix data = *AnnotationMatrix::Build(40, 1, 2, annotations);
  std::vector<int32_t> gold(40, 0);
  for (int32_t i = 30; i < 40; ++i) gold[i] = 1;
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(
      data, gold, {}, DsAndMv([](int32_t i) { return i >= 10; }, [](int32_t) { return true; }));
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "gold_cv");
  EXPECT_NEAR(ScoreOf(*choice, "ds").accuracy, 20.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "mv").accuracy, 1.0, 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "mv").log_loss, -std::log(0.9), 1e-12);
}

// Promise (auto_truth_model.h): held-out labels never take an item's last remaining label.
// 2,000 items with two labels each: about 10 % of the labels are held out (~400), and with
// both labels of an item held out on about 1 % of the items were that allowed, no item may have
// both asked for.
TEST(AutoTruthModelTest, HeldOutLabelsLeaveEveryItemALabel) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 2000; ++i) {
    for (int32_t a = 0; a < 2; ++a) annotations.push_back({i, a, 0});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(2000, 2, 2, annotations);
  auto held = std::make_shared<std::vector<std::pair<int32_t, int32_t>>>();
  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(data, {}, {}, DsAndMv(nullptr, nullptr, {0.5, 0.5, 0.5, 0.5}, held));
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  EXPECT_GT(held->size(), 300u);
  EXPECT_LT(held->size(), 500u);
  std::vector<int> per_item(2000, 0);
  for (const auto& [item, annotator] : *held) ++per_item[item];
  for (int32_t i = 0; i < 2000; ++i) EXPECT_LE(per_item[i], 1) << "item " << i;
}

// 300 items, 3 labels each, all of class 0 (the held-out criterion, no gold).
AnnotationMatrix AllZeroLabels() {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 300; ++i) {
    for (int32_t a = 0; a < 3; ++a) annotations.push_back({i, a, 0});
  }
  return *AnnotationMatrix::Build(300, 3, 2, annotations);
}

// Promise (auto_truth_model.h): without gold, of the candidates that beat ds by the margins the
// best (highest mean held-out log-likelihood) wins. Every label is 0; ds (uniform) scores
// log 0.5 per held-out label, one_coin (says 0 with 0.54) log 0.54 and mv (0.6) log 0.6: both
// gain more than 0.05 nats with standard error 0; mv, listed after one_coin, is chosen.
TEST(AutoTruthModelTest, HeldOutLabelsChooseTheBestOfTheCandidatesThatPass) {
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds" || method == "one_coin" || method == "mv") {
      const double p = method == "ds" ? 0.5 : method == "one_coin" ? 0.54 : 0.6;
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          std::string(method), nullptr, std::vector<double>{p, 1 - p, p, 1 - p}, nullptr));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(AllZeroLabels(), {}, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  EXPECT_NEAR(ScoreOf(*choice, "one_coin").held_out_log_likelihood, std::log(0.54), 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "mv").held_out_log_likelihood, std::log(0.6), 1e-12);
  EXPECT_EQ(choice->method, "mv") << choice->reason;
}

// ds (uniform) and mv (says 0 with 0.6) stand-ins whose every Fit is recorded.
AutoTruthModel::CandidateFactory RecordedDsAndMv(std::shared_ptr<std::vector<FitCall>> calls) {
  return [calls](std::string_view method, int32_t,
                 const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method != "ds" && method != "mv") return absl::InvalidArgumentError("not here");
    const double p = method == "ds" ? 0.5 : 0.6;
    return std::unique_ptr<TruthModel>(std::make_unique<RecordingModel>(
        std::make_unique<FixedModel>(std::string(method), nullptr,
                                     std::vector<double>{p, 1 - p, p, 1 - p}, nullptr),
        calls));
  };
}

// Promise (auto_truth_model.h): the served model is warm-started only if it is the method
// chosen again *and* warm_start is true; a new choice is served by a fresh (cold) model of
// that method. One label per item falls back to ds; all-zero labels choose mv.
TEST(AutoTruthModelTest, ServedFitIsWarmOnlyWhenAskedAndTheMethodIsKept) {
  auto calls = std::make_shared<std::vector<FitCall>>();
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, RecordedDsAndMv(calls));
  std::vector<Annotation> single;
  for (int32_t i = 0; i < 50; ++i) single.push_back({i, i % 3, 0});
  const AnnotationMatrix one_label = *AnnotationMatrix::Build(50, 3, 2, single);

  ASSERT_THAT(model->Fit(one_label, {}, false), IsOk());
  ASSERT_EQ(model->choice().method, "ds");
  ASSERT_TRUE(model->has_parameters());
  ASSERT_THAT(model->Fit(one_label, {}, /*warm_start=*/false), IsOk());
  ASSERT_FALSE(calls->empty());
  EXPECT_EQ(calls->back().method, "ds");
  EXPECT_FALSE(calls->back().warm_start);

  ASSERT_THAT(model->Fit(AllZeroLabels(), {}, /*warm_start=*/true), IsOk());
  EXPECT_EQ(model->choice().method, "mv") << model->choice().reason;
  EXPECT_EQ(model->served().method(), "mv");
  EXPECT_EQ(calls->back().method, "mv");
  EXPECT_FALSE(calls->back().warm_start);
}

// Promise (auto_truth_model.h): held-out selection fits each candidate "with whatever gold
// there is" (here 5 gold items, fewer than kMinGoldItems).
TEST(AutoTruthModelTest, HeldOutFitsSeeTheProjectsGold) {
  auto calls = std::make_shared<std::vector<FitCall>>();
  std::vector<int32_t> gold(300, -1);
  for (int32_t i = 0; i < 5; ++i) gold[7 * i] = 0;
  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(AllZeroLabels(), gold, {}, RecordedDsAndMv(calls));
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  ASSERT_EQ(calls->size(), 2u);
  for (const FitCall& call : *calls) EXPECT_EQ(call.gold, gold) << call.method;
}

// TruthModel::Clone is a deep copy: a clone of a fitted auto keeps its choice and serves the same
// method.
TEST(AutoTruthModelTest, CloneKeepsTheChoice) {
  auto calls = std::make_shared<std::vector<FitCall>>();
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, RecordedDsAndMv(calls));
  ASSERT_THAT(model->Fit(AllZeroLabels(), {}, false), IsOk());
  ASSERT_EQ(model->choice().method, "mv");
  std::unique_ptr<TruthModel> clone = model->Clone();
  const auto& copy = dynamic_cast<const AutoTruthModel&>(*clone);
  EXPECT_EQ(copy.choice().method, "mv");
  EXPECT_EQ(copy.choice().criterion, "held_out_labels");
  EXPECT_EQ(copy.choice().reason, model->choice().reason);
  EXPECT_EQ(copy.served().method(), "mv");
  EXPECT_TRUE(copy.has_parameters());
}

// Restore refuses a blob without the "VAUT" header and one whose served method is not one of
// kCandidateMethods (even if the factory could create it).
TEST(AutoTruthModelTest, RestoreRefusesAWrongMagicOrANonCandidateMethod) {
  // Every method is a stand-in whose Restore accepts anything.
  const AutoTruthModel::CandidateFactory any =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
        std::string(method), nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
  };
  std::unique_ptr<AutoTruthModel> restored = MakeAuto(2, any);
  std::unique_ptr<AutoTruthModel> good = MakeAuto(2, any);
  const std::string blob = good->Serialize();
  ASSERT_THAT(restored->Restore(blob), IsOk());  // the control
  std::string bad_magic = blob;
  bad_magic[3] = 'X';
  EXPECT_THAT(restored->Restore(bad_magic),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));

  // An auto whose fallback "ds" is served by a model calling itself "bwa" writes "bwa".
  std::unique_ptr<AutoTruthModel> bwa = MakeAuto(
      2, [](std::string_view, int32_t,
            const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
        return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
            "bwa", nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
      });
  absl::Status s = restored->Restore(bwa->Serialize());
  EXPECT_THAT(s, ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), HasSubstr("bwa"));
}

// auto_truth_model.h: selection subsamples only *above* kMaxSelectionLabels labels, every n-th
// item with n the smallest making it fit: exactly 200,000 labels run on every item, 200,001 on
// every ceil(200,001 / 200,000) = 2nd item (one label per item, stand-in candidates).
TEST(AutoTruthModelTest, SelectionSubsamplesOnlyAboveTheLabelBound) {
  const AutoTruthModel::CandidateFactory factory = DsAndMv(nullptr, nullptr);
  for (int32_t items : {200'000, 200'001}) {
    std::vector<Annotation> annotations;
    for (int32_t i = 0; i < items; ++i) annotations.push_back({i, 0, i % 2});
    const AnnotationMatrix data = *AnnotationMatrix::Build(items, 1, 2, annotations);
    absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, {}, {}, factory);
    ASSERT_THAT(choice, IsOk());
    if (items == 200'000) {
      EXPECT_THAT(choice->reason, ::testing::Not(HasSubstr("selection on"))) << choice->reason;
    } else {
      EXPECT_THAT(choice->reason, HasSubstr("(selection on 100001 of 200001 items)"));
    }
  }
}

// A candidate whose PredictLabel gives 0.99 to the label `annotator` gave the item when that
// label is among `labels` (it would see a held-out label), and (1/2, 1/2) otherwise.
class LeakDetectingModel final : public TruthModel {
 public:
  std::string_view method() const override { return "mv"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return fitted_; }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<LeakDetectingModel>(*this);
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>, bool) override {
    fitted_ = true;
    return FitReport();
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t gold_label,
                     absl::Span<double> out) const override {
    out[0] = gold_label < 0 ? 0.5 : (gold_label == 0 ? 1.0 : 0.0);
    out[1] = 1.0 - out[0];
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.5, 0.5, 0.5, 0.5}; }
  std::vector<double> PredictLabel(int32_t, absl::Span<const AnnotationMatrix::Entry> labels,
                                   int32_t annotator) const override {
    for (const AnnotationMatrix::Entry& e : labels) {
      if (e.other != annotator) continue;
      return e.label == 0 ? std::vector<double>{0.99, 0.01} : std::vector<double>{0.01, 0.99};
    }
    return {0.5, 0.5};
  }
  std::string Serialize() const override { return "mv"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }

 private:
  bool fitted_ = false;
};

// auto_truth_model.h: a held-out label (j, l) on item i is scored by PredictLabel(i, the item's
// *remaining* labels, j): the held-out label itself is never among them, so a candidate that
// would echo it back scores log 1/2 on every held-out label, as ds (uniform) does.
TEST(AutoTruthModelTest, HeldOutLabelsArePredictedWithoutThemselves) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 400; ++i) {
    for (int32_t a = 0; a < 4; ++a) annotations.push_back({i, a, (i + a) % 2});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(400, 4, 2, annotations);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") {
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          "ds", nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
    }
    if (method == "mv") return std::unique_ptr<TruthModel>(std::make_unique<LeakDetectingModel>());
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, {}, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  EXPECT_NEAR(ScoreOf(*choice, "mv").held_out_log_likelihood, std::log(0.5), 1e-12);
  EXPECT_EQ(choice->method, "ds") << choice->reason;
}

// auto_truth_model.h: Create refuses fewer than two classes; Restore refuses a blob of another
// format version than 1 and one with bytes after the chosen model's blob (the control, the same
// fields at version 1, restores). Stand-in candidates whose Restore accepts anything.
TEST(AutoTruthModelTest, CreateRefusesOneClassAndRestoreRefusesAnotherVersionOrTrailingBytes) {
  const AutoTruthModel::CandidateFactory any =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
        std::string(method), nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
  };
  EXPECT_THAT(AutoTruthModel::Create(1, {}, any).status(),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  const auto blob = [](uint32_t version, bool trailing) {
    ByteWriter writer;
    writer.WriteU32(version);
    writer.WriteU32(2);  // classes
    writer.WriteString("mv");
    writer.WriteString("fallback");
    writer.WriteString("reason");
    writer.WriteString("inner");
    if (trailing) writer.WriteU32(0);
    return absl::StrCat(std::string(AutoTruthModel::kMagic), writer.Finish());
  };
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, any);
  ASSERT_THAT(model->Restore(blob(1, false)), IsOk());
  EXPECT_EQ(model->choice().method, "mv");
  EXPECT_THAT(model->Restore(blob(2, false)),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->Restore(blob(1, true)),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

// A stand-in "ds" whose every Fit fails.
class FailingFitModel final : public TruthModel {
 public:
  std::string_view method() const override { return "ds"; }
  int32_t num_classes() const override { return 2; }
  bool has_parameters() const override { return false; }
  std::unique_ptr<TruthModel> Clone() const override { return std::make_unique<FailingFitModel>(); }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix&, absl::Span<const int32_t>, bool) override {
    return absl::InternalError("this ds never fits");
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry>, int32_t,
                     absl::Span<double> out) const override {
    out[0] = out[1] = 0.5;
  }
  std::vector<double> AnnotatorConfusion(int32_t) const override { return {0.5, 0.5, 0.5, 0.5}; }
  std::string Serialize() const override { return "ds"; }
  absl::Status Restore(std::string_view) override { return absl::OkStatus(); }
};

// auto_truth_model.h / AutoCandidateScore: a candidate that fails to fit is skipped. When ds
// itself fails there is no ds score to beat, so the margins against ds do not apply and the
// best of the candidates that fitted is chosen (mv, whose confusion says 0 with 0.6, on a crowd
// whose every label is 0).
TEST(AutoTruthModelTest, ADsThatFailsToFitIsSkippedAndTheBestFittedCandidateChosen) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 400; ++i) {
    for (int32_t a = 0; a < 4; ++a) annotations.push_back({i, a, 0});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(400, 4, 2, annotations);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") return std::unique_ptr<TruthModel>(std::make_unique<FailingFitModel>());
    if (method == "mv") {
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          "mv", nullptr, std::vector<double>{0.6, 0.4, 0.6, 0.4}, nullptr));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, {}, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  EXPECT_FALSE(ScoreOf(*choice, "ds").fitted);
  EXPECT_EQ(choice->method, "mv") << choice->reason;
}

// auto_truth_model.h / Create: INVALID_ARGUMENT for invalid options, even with a factory that
// would accept them (the options are validated by auto itself, not left to the candidates).
TEST(AutoTruthModelTest, CreateRefusesInvalidOptionsWhateverTheFactory) {
  const AutoTruthModel::CandidateFactory any =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
        std::string(method), nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
  };
  TruthModelOptions options;
  options.confusion_smoothing = 0.0;
  EXPECT_THAT(AutoTruthModel::Create(2, options, any).status(),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AutoTruthModel::Create(2, {}, any).status(), IsOk());
}

// auto_truth_model.h / Restore: a version written for another number of classes is refused,
// and the model keeps what it served.
TEST(AutoTruthModelTest, RestoreRefusesAnotherClassCountAndKeepsTheModel) {
  const AutoTruthModel::CandidateFactory any =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
        std::string(method), nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr));
  };
  const auto blob = [](uint32_t classes, std::string_view method) {
    ByteWriter writer;
    writer.WriteU32(1);  // version
    writer.WriteU32(classes);
    writer.WriteString(method);
    writer.WriteString("fallback");
    writer.WriteString("reason");
    writer.WriteString("inner");
    return absl::StrCat(std::string(AutoTruthModel::kMagic), writer.Finish());
  };
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, any);
  ASSERT_THAT(model->Restore(blob(2, "mv")), IsOk());
  EXPECT_EQ(model->choice().method, "mv");
  EXPECT_THAT(model->Restore(blob(3, "glad")),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(model->choice().method, "mv");
  EXPECT_EQ(model->served().method(), "mv");
}

// auto_truth_model.h: gold cross-validation needs kMinGoldItems gold items *with labels*; gold
// items nobody labelled do not count. 29 labelled gold items and 10 unlabelled ones use the
// held-out crowd labels (every item has 2 labels); a 30th labelled gold item switches to gold_cv.
TEST(AutoTruthModelTest, GoldItemsWithoutLabelsDoNotCountTowardsGoldCv) {
  const auto choose = [](int32_t labelled_gold) {
    std::vector<Annotation> annotations;
    for (int32_t i = 0; i < 200; ++i) {
      annotations.push_back({i, 0, 0});
      annotations.push_back({i, 1, 0});
    }
    // Items 200..209 have no label.
    const AnnotationMatrix data = *AnnotationMatrix::Build(210, 2, 2, annotations);
    std::vector<int32_t> gold(210, -1);
    for (int32_t i = 0; i < labelled_gold; ++i) gold[i] = 0;
    for (int32_t i = 200; i < 210; ++i) gold[i] = 0;
    return ChooseTruthMethod(data, gold, {},
                             DsAndMv([](int32_t) { return true; }, [](int32_t) { return true; }));
  };
  absl::StatusOr<AutoChoice> few = choose(AutoTruthModel::kMinGoldItems - 1);
  ASSERT_THAT(few, IsOk());
  EXPECT_EQ(few->criterion, "held_out_labels") << few->reason;
  absl::StatusOr<AutoChoice> enough = choose(AutoTruthModel::kMinGoldItems);
  ASSERT_THAT(enough, IsOk());
  EXPECT_EQ(enough->criterion, "gold_cv") << enough->reason;
}

// Promise (auto_truth_model.h): the log-loss tie-break does not depend on the order of the
// candidates. As GoldCvBreaksAccuracyTiesByLogLoss with the confidences swapped: one_coin (0.99,
// first among the candidates) has the lower log-loss and is chosen over mv (0.9), which comes
// later and ties it on accuracy.
TEST(AutoTruthModelTest, GoldCvAccuracyTieGoesToTheLowerLogLossWhicheverComesFirst) {
  const AnnotationMatrix data = ThirtyGoldItems();
  const std::vector<int32_t> gold(30, 0);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") {
      return std::unique_ptr<TruthModel>(
          std::make_unique<ConfidentModel>("ds", [](int32_t i) { return i >= 10; }, 0.9));
    }
    if (method == "one_coin" || method == "mv") {
      return std::unique_ptr<TruthModel>(std::make_unique<ConfidentModel>(
          std::string(method), [](int32_t) { return true; }, method == "one_coin" ? 0.99 : 0.9));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, gold, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_NEAR(ScoreOf(*choice, "one_coin").accuracy, ScoreOf(*choice, "mv").accuracy, 1e-12);
  EXPECT_EQ(choice->method, "one_coin") << choice->reason;
}

// truth_model.h: on error Fit leaves the model unchanged. One label per item gives no held-out
// label and no gold, so auto falls back to ds, whose fit fails here: the model keeps serving the
// mv it restored, and its choice.
TEST(AutoTruthModelTest, AFailedFitOfTheChosenMethodKeepsTheServedModel) {
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") return std::unique_ptr<TruthModel>(std::make_unique<FailingFitModel>());
    if (method == "mv") {
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          "mv", nullptr, std::vector<double>{0.6, 0.4, 0.4, 0.6}, nullptr));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  ByteWriter writer;
  writer.WriteU32(1);  // version
  writer.WriteU32(2);  // classes
  writer.WriteString("mv");
  writer.WriteString("held_out_labels");
  writer.WriteString("restored");
  writer.WriteString("inner");
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, factory);
  ASSERT_THAT(model->Restore(absl::StrCat(std::string(AutoTruthModel::kMagic), writer.Finish())),
              IsOk());
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 50; ++i) annotations.push_back({i, i % 3, i % 2});
  const AnnotationMatrix data = *AnnotationMatrix::Build(50, 3, 2, annotations);
  EXPECT_FALSE(model->Fit(data, {}, false).ok());
  EXPECT_EQ(model->served().method(), "mv");
  EXPECT_EQ(model->choice().method, "mv");
  EXPECT_EQ(model->choice().reason, "restored");
}

// truth_model.h: on error Restore leaves the model unchanged, also when the header is sound and
// only the chosen method's own blob is refused.
TEST(AutoTruthModelTest, ARefusedInnerBlobKeepsTheServedModel) {
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, &CreateUncalibratedTruthModel);
  ByteWriter writer;
  writer.WriteU32(1);  // version
  writer.WriteU32(2);  // classes
  writer.WriteString("mv");
  writer.WriteString("held_out_labels");
  writer.WriteString("restored");
  writer.WriteString("not a model blob");
  EXPECT_FALSE(
      model->Restore(absl::StrCat(std::string(AutoTruthModel::kMagic), writer.Finish())).ok());
  EXPECT_EQ(model->served().method(), "ds");
  EXPECT_EQ(model->choice().method, "");
}

// calibrated_truth_model.h: with gold, the wrapper around auto cross-fits copies of the method
// auto serves, not of auto (which would run its whole selection again): the calibrated fit makes
// exactly two fits more than auto's own, both warm-started fits of the served method, each
// without one half of the gold.
TEST(AutoTruthModelTest, GoldCalibrationOfAutoRefitsOnlyTheServedMethod) {
  SyntheticCrowd crowd = ClassDependentCrowd(600, 23);
  std::vector<int32_t> gold(crowd.truth.size(), -1);
  for (size_t i = 0; i < gold.size(); i += 6) gold[i] = crowd.truth[i];  // 100 gold items
  auto calls = std::make_shared<std::vector<FitCall>>();
  const AutoTruthModel::CandidateFactory factory =
      [calls](std::string_view method, int32_t k,
              const TruthModelOptions& options) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateUncalibratedTruthModel(method, k, options);
    if (!model.ok()) return model.status();
    return std::unique_ptr<TruthModel>(std::make_unique<RecordingModel>(*std::move(model), calls));
  };
  std::unique_ptr<AutoTruthModel> bare = MakeAuto(2, factory);
  ASSERT_THAT(bare->Fit(crowd.matrix, gold, false), IsOk());
  const size_t auto_fits = calls->size();
  calls->clear();
  CalibratedTruthModel calibrated(MakeAuto(2, factory));
  ASSERT_THAT(calibrated.Fit(crowd.matrix, gold, false), IsOk());
  ASSERT_EQ(calibrated.calibration().source, CalibrationSource::kGold);
  const std::string served = std::string(
      dynamic_cast<const AutoTruthModel&>(calibrated.inner()).served().method());
  ASSERT_EQ(calls->size(), auto_fits + 2);
  for (size_t c = auto_fits; c < calls->size(); ++c) {
    const FitCall& call = (*calls)[c];
    EXPECT_EQ(call.method, served);
    EXPECT_TRUE(call.warm_start);
    int32_t with_gold = 0;
    for (int32_t g : call.gold) with_gold += g >= 0;
    EXPECT_EQ(with_gold, 50);
  }
}

// 30 gold items, one label each (annotator 0 says 0): items 0..19 have gold 0, 20..29 gold 1.
struct SplitGold {
  AnnotationMatrix data;
  std::vector<int32_t> gold;
};
SplitGold ThirtyGoldItemsTwoThirdsClassZero() {
  std::vector<Annotation> annotations;
  std::vector<int32_t> gold(30, 0);
  for (int32_t i = 0; i < 30; ++i) {
    annotations.push_back({i, 0, 0});
    if (i >= 20) gold[i] = 1;
  }
  return {*AnnotationMatrix::Build(30, 1, 2, annotations), gold};
}

// Promise (auto_truth_model.h): gold cross-validation counts an item right by the argmax of its
// posterior, "lowest index on ties". ds's stand-in posterior is (1/2, 1/2) on every item, so it
// is read as class 0: right on the 20 items of gold 0, wrong on the 10 of gold 1 (accuracy 2/3;
// the highest index would give 1/3), with log-loss -log 1/2 on every item. The reason names the
// criterion and the 30 gold items it scored in 3 folds.
TEST(AutoTruthModelTest, GoldCvReadsAnEvenPosteriorAsTheLowestClass) {
  const SplitGold split = ThirtyGoldItemsTwoThirdsClassZero();
  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(split.data, split.gold, {}, DsAndMv(nullptr, nullptr));
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "gold_cv");
  EXPECT_NEAR(ScoreOf(*choice, "ds").accuracy, 20.0 / 30, 1e-12);
  EXPECT_NEAR(ScoreOf(*choice, "ds").log_loss, std::log(2.0), 1e-12);
  EXPECT_TRUE(absl::StartsWith(choice->reason, "gold_cv over 30 gold items in 3 folds: "))
      << choice->reason;
  EXPECT_EQ(choice->method, "ds") << choice->reason;
}

// auto_truth_model.h / AutoCandidateScore: a candidate that fails to fit is skipped under gold
// cross-validation too (fitted false, no accuracy of 0 to compare with): with a ds that never
// fits, mv, right on all 30 gold items, is served.
TEST(AutoTruthModelTest, GoldCvSkipsADsThatFailsToFit) {
  const SplitGold split = ThirtyGoldItemsTwoThirdsClassZero();
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method == "ds") return std::unique_ptr<TruthModel>(std::make_unique<FailingFitModel>());
    if (method == "mv") {
      return std::unique_ptr<TruthModel>(std::make_unique<FixedModel>(
          "mv", [](int32_t i) { return i < 20; }, std::vector<double>{0.5, 0.5, 0.5, 0.5},
          nullptr));
    }
    return absl::InvalidArgumentError("not a candidate here");
  };
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(split.data, split.gold, {}, factory);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "gold_cv");
  EXPECT_FALSE(ScoreOf(*choice, "ds").fitted);
  EXPECT_TRUE(ScoreOf(*choice, "mv").fitted);
  EXPECT_NEAR(ScoreOf(*choice, "mv").accuracy, 1.0, 1e-12);
  EXPECT_EQ(choice->method, "mv") << choice->reason;
}

// ChooseTruthMethod is the choice auto's Fit would make, so it refuses what Fit refuses
// (truth_model.h, ValidateFitInputs): a gold class out of [-1, K) or gold of another size than
// the items, with INVALID_ARGUMENT, even when every candidate's own Fit would accept them.
TEST(AutoTruthModelTest, ChooseTruthMethodRefusesGoldThatFitRefuses) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 40; ++i) {
    annotations.push_back({i, 0, 0});
    annotations.push_back({i, 1, 0});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(40, 2, 2, annotations);
  const AutoTruthModel::CandidateFactory factory = DsAndMv(nullptr, nullptr);
  std::vector<int32_t> out_of_range(40, -1);
  out_of_range[3] = 2;
  EXPECT_THAT(ChooseTruthMethod(data, out_of_range, {}, factory),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ChooseTruthMethod(data, std::vector<int32_t>(41, -1), {}, factory),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ChooseTruthMethod(data, std::vector<int32_t>(40, -1), {}, factory), IsOk());
}

// auto_truth_model.h: the held-out reason names the criterion and how many labels were held out.
// ds's stand-in records one ItemAnnotatorConfusion call per held-out label it is asked to
// predict.
TEST(AutoTruthModelTest, HeldOutReasonCountsTheHeldOutLabels) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 300; ++i) {
    for (int32_t a = 0; a < 3; ++a) annotations.push_back({i, a, 0});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(300, 3, 2, annotations);
  auto held = std::make_shared<std::vector<std::pair<int32_t, int32_t>>>();
  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(data, {}, {}, DsAndMv(nullptr, nullptr, {0.5, 0.5, 0.5, 0.5}, held));
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "held_out_labels");
  ASSERT_FALSE(held->empty());
  EXPECT_TRUE(absl::StartsWith(
      choice->reason,
      absl::StrCat("held_out_labels: mean log-likelihood of ", held->size(), " held-out labels: ")))
      << choice->reason;
}

// auto_truth_model.h: the gold items are split into folds after "a deterministic shuffle", not
// by their order: with items 0..59 all gold, no fold is every 3rd item or a run of 20
// consecutive ones, and the same data gives the same folds again.
TEST(AutoTruthModelTest, GoldFoldsAreADeterministicShuffleOfTheGoldItems) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 60; ++i) annotations.push_back({i, 0, 0});
  const AnnotationMatrix data = *AnnotationMatrix::Build(60, 1, 2, annotations);
  const std::vector<int32_t> gold(60, 0);
  const auto folds = [&] {
    auto calls = std::make_shared<std::vector<FitCall>>();
    const AutoTruthModel::CandidateFactory factory =
        [calls](std::string_view method, int32_t,
                const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
      if (method != "ds") return absl::InvalidArgumentError("not a candidate here");
      return std::unique_ptr<TruthModel>(std::make_unique<RecordingModel>(
          std::make_unique<FixedModel>("ds", nullptr, std::vector<double>{0.5, 0.5, 0.5, 0.5},
                                       nullptr),
          calls));
    };
    EXPECT_THAT(ChooseTruthMethod(data, gold, {}, factory), IsOk());
    std::vector<std::set<int32_t>> hidden;
    for (const FitCall& call : *calls) {
      std::set<int32_t> h;
      for (int32_t i = 0; i < 60; ++i) {
        if (call.gold[i] < 0) h.insert(i);
      }
      hidden.push_back(std::move(h));
    }
    return hidden;
  };
  const std::vector<std::set<int32_t>> first = folds();
  ASSERT_EQ(first.size(), 3u);
  for (const std::set<int32_t>& h : first) {
    EXPECT_EQ(h.size(), 20u);
    for (int32_t f = 0; f < 3; ++f) {
      std::set<int32_t> every_third, run;
      for (int32_t i = f; i < 60; i += 3) every_third.insert(i);
      for (int32_t i = 20 * f; i < 20 * f + 20; ++i) run.insert(i);
      EXPECT_NE(h, every_third);
      EXPECT_NE(h, run);
    }
  }
  EXPECT_EQ(folds(), first);
}

// auto_truth_model.h: above kMaxSelectionLabels the selection runs on every n-th item, items
// renumbered but "annotators keep their ids". 100,001 items with two labels each (200,002 labels,
// so every 2nd item): item i is labelled by annotators i % 7 and i % 7 + 1, so selection item j
// (item 2j) by 2j % 7 and 2j % 7 + 1. ds's stand-in records the (item, annotator) of every
// held-out label it is asked to predict.
TEST(AutoTruthModelTest, SelectionOnASubsampleKeepsTheAnnotatorsIds) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 100'001; ++i) {
    annotations.push_back({i, i % 7, 0});
    annotations.push_back({i, i % 7 + 1, 1});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(100'001, 8, 2, annotations);
  auto held = std::make_shared<std::vector<std::pair<int32_t, int32_t>>>();
  absl::StatusOr<AutoChoice> choice =
      ChooseTruthMethod(data, {}, {}, DsAndMv(nullptr, nullptr, {0.5, 0.5, 0.5, 0.5}, held));
  ASSERT_THAT(choice, IsOk());
  EXPECT_THAT(choice->reason, HasSubstr("(selection on 50001 of 100001 items)"));
  ASSERT_GT(held->size(), 1000u);
  std::set<int32_t> seen;
  for (const auto& [item, annotator] : *held) {
    ASSERT_LT(item, 50'001);
    const int32_t first = (2 * item) % 7;
    EXPECT_TRUE(annotator == first || annotator == first + 1) << item << " " << annotator;
    seen.insert(annotator);
  }
  EXPECT_EQ(seen.size(), 8u);
}

// Forwards to `inner`, but every warm-started Fit fails.
class FailsWarmFitModel final : public TruthModel {
 public:
  explicit FailsWarmFitModel(std::unique_ptr<TruthModel> inner) : inner_(std::move(inner)) {}
  std::string_view method() const override { return inner_->method(); }
  int32_t num_classes() const override { return inner_->num_classes(); }
  bool has_parameters() const override { return inner_->has_parameters(); }
  std::unique_ptr<TruthModel> Clone() const override {
    return std::make_unique<FailsWarmFitModel>(inner_->Clone());
  }
  absl::StatusOr<FitReport> Fit(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                                bool warm_start) override {
    if (warm_start) return absl::InternalError("this model never fits warm");
    return inner_->Fit(data, gold, warm_start);
  }
  void ItemPosterior(absl::Span<const AnnotationMatrix::Entry> labels, int32_t gold_label,
                     absl::Span<double> out) const override {
    inner_->ItemPosterior(labels, gold_label, out);
  }
  std::vector<double> AnnotatorConfusion(int32_t annotator) const override {
    return inner_->AnnotatorConfusion(annotator);
  }
  std::string Serialize() const override { return inner_->Serialize(); }
  absl::Status Restore(std::string_view serialized) override { return inner_->Restore(serialized); }

 private:
  std::unique_ptr<TruthModel> inner_;
};

// truth_model.h: on error Fit leaves the model unchanged, also when the kept method's warm fit
// fails. One label per item falls back to ds; the second Fit, warm, refits the served ds warm,
// which fails: auto still serves the fitted ds of the first Fit, with its posteriors.
TEST(AutoTruthModelTest, AFailedWarmFitOfTheServedMethodKeepsIt) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 50; ++i) annotations.push_back({i, i % 3, i % 2});
  const AnnotationMatrix data = *AnnotationMatrix::Build(50, 3, 2, annotations);
  const AutoTruthModel::CandidateFactory factory =
      [](std::string_view method, int32_t,
         const TruthModelOptions&) -> absl::StatusOr<std::unique_ptr<TruthModel>> {
    if (method != "ds") return absl::InvalidArgumentError("not a candidate here");
    return std::unique_ptr<TruthModel>(
        std::make_unique<FailsWarmFitModel>(std::make_unique<FixedModel>(
            "ds", [](int32_t) { return true; }, std::vector<double>{0.5, 0.5, 0.5, 0.5}, nullptr)));
  };
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, factory);
  ASSERT_THAT(model->Fit(data, {}, false), IsOk());
  ASSERT_EQ(model->choice().criterion, "fallback");
  EXPECT_THAT(model->Fit(data, {}, true), ::verity::testing::StatusIs(absl::StatusCode::kInternal));
  EXPECT_TRUE(model->has_parameters());
  EXPECT_EQ(model->served().method(), "ds");
  EXPECT_EQ(model->choice().criterion, "fallback");
  std::vector<double> out(2);
  model->ItemPosteriorForItem(0, data.LabelsOfItem(0), -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0], 0.9, 1e-12);
  EXPECT_NEAR(out[1], 0.1, 1e-12);
}

// auto_truth_model.h: above kMaxSelectionLabels the whole selection, gold cross-validation
// included, runs on every n-th item. 200,001 items with one label each (every 2nd item, 100,001
// of them); items 0..99 have gold 0, so the selection holds the 50 even ones.
TEST(AutoTruthModelTest, GoldCvOnALargeProjectScoresTheSubsamplesGoldOnly) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 200'001; ++i) annotations.push_back({i, 0, 0});
  const AnnotationMatrix data = *AnnotationMatrix::Build(200'001, 1, 2, annotations);
  std::vector<int32_t> gold(200'001, -1);
  for (int32_t i = 0; i < 100; ++i) gold[i] = 0;
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(
      data, gold, {}, DsAndMv([](int32_t) { return true; }, [](int32_t) { return true; }));
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->criterion, "gold_cv");
  EXPECT_TRUE(absl::StartsWith(
      choice->reason,
      "gold_cv over 50 gold items in 3 folds (selection on 100001 of 200001 items): "))
      << choice->reason;
}

// truth_model.h (ValidateFitInputs): Fit refuses data of another number of classes than the
// model's with INVALID_ARGUMENT, auto too, whatever its candidates would accept, and keeps what it
// served (nothing fitted here).
TEST(AutoTruthModelTest, FitRefusesDataOfAnotherClassCountWhateverTheCandidates) {
  std::vector<Annotation> annotations;
  for (int32_t i = 0; i < 40; ++i) {
    annotations.push_back({i, 0, i % 3});
    annotations.push_back({i, 1, i % 3});
  }
  const AnnotationMatrix three = *AnnotationMatrix::Build(40, 2, 3, annotations);
  std::unique_ptr<AutoTruthModel> model = MakeAuto(2, DsAndMv(nullptr, nullptr));
  EXPECT_THAT(model->Fit(three, {}, false),
              ::verity::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(model->has_parameters());
  EXPECT_EQ(model->choice().criterion, "");
}

}  // namespace
}  // namespace verity::models
