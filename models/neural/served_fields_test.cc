// What the neural models learn beyond posteriors and confusions, as the server serves it
// (proto/verity/v1/truth.proto): lia's item difficulty and the annotator embeddings of lia and
// conal. The expectations follow from the documented definitions (models/truth_model.h), not
// from the code under test.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "models/annotation_matrix.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

constexpr int32_t kItems = 400;
constexpr int32_t kAnnotators = 12;
constexpr int32_t kPerItem = 6;

// Binary labels: on the odd items every annotator is right with probability 0.95 (easy), on
// the even ones with 0.6 (hard). Each item gets kPerItem distinct annotators.
AnnotationMatrix EasyAndHardItems(std::vector<int32_t>& truth) {
  std::mt19937_64 rng(7);
  std::vector<Annotation> labels;
  std::vector<int32_t> pool(kAnnotators);
  for (int32_t a = 0; a < kAnnotators; ++a) pool[a] = a;
  for (int32_t i = 0; i < kItems; ++i) {
    const int32_t y = static_cast<int32_t>(rng() % 2);
    truth.push_back(y);
    const double right = i % 2 == 1 ? 0.95 : 0.6;
    for (int32_t j = 0; j < kPerItem; ++j) {
      std::swap(pool[j], pool[j + rng() % (kAnnotators - j)]);
      const bool correct = std::uniform_real_distribution<double>(0, 1)(rng) < right;
      labels.push_back({i, pool[j], correct ? y : 1 - y});
    }
  }
  return *AnnotationMatrix::Build(kItems, kAnnotators, 2, labels);
}

TruthModelOptions CpuOptions() {
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.seed = 3;
  return options;
}

// lia's difficulty is the chance that an annotator of average competence mislabels the item.
// With a feature saying which half an item is in, the difficulty network must find the hard
// half: its mean difficulty is higher than the easy half's, every value is a probability, and
// an item outside the fit gets a difficulty too (the mean item's).
TEST(ServedFieldsTest, LiaFindsTheHardItems) {
  std::vector<int32_t> truth;
  const AnnotationMatrix data = EasyAndHardItems(truth);
  auto model = CreateTruthModel("lia", 2, CpuOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->ItemDifficulty(0).has_value());  // before a fit
  std::vector<float> features;
  for (int32_t i = 0; i < kItems; ++i) features.push_back(static_cast<float>(i % 2));
  ASSERT_TRUE((*model)->SetItemFeatures(1, features).ok());
  ASSERT_TRUE((*model)->Fit(data, {}, false).ok());
  double easy = 0, hard = 0;
  for (int32_t i = 0; i < kItems; ++i) {
    const std::optional<double> d = (*model)->ItemDifficulty(i);
    ASSERT_TRUE(d.has_value()) << i;
    ASSERT_GE(*d, 0.0);
    ASSERT_LE(*d, 1.0);
    (i % 2 == 1 ? easy : hard) += *d / (kItems / 2);
  }
  std::printf("lia mean difficulty: easy items %.3f, hard items %.3f\n", easy, hard);
  EXPECT_GT(hard, easy + 0.05);
  const std::optional<double> unseen = (*model)->ItemDifficulty(kItems + 5);
  ASSERT_TRUE(unseen.has_value());
  EXPECT_GE(*unseen, 0.0);
  EXPECT_LE(*unseen, 1.0);
}

// Models that learn an annotator encoder (lia, conal) serve its output, of embedding_dim
// values per fitted annotator; the others, and annotators outside the fit, serve none; no model
// without a difficulty network serves a difficulty.
TEST(ServedFieldsTest, EmbeddingsOfTheModelsThatLearnThem) {
  std::vector<int32_t> truth;
  const AnnotationMatrix data = EasyAndHardItems(truth);
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 200;
  options.neural.em_iterations = 2;
  for (const char* method : {"lia", "conal", "crowdlayer", "ds"}) {
    auto model = CreateTruthModel(method, 2, options);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE((*model)->Fit(data, {}, false).ok()) << method;
    const bool learns_one = std::string(method) == "lia" || std::string(method) == "conal";
    for (int32_t a = 0; a < kAnnotators; ++a) {
      EXPECT_EQ((*model)->AnnotatorEmbedding(a).size(),
                learns_one ? static_cast<size_t>(options.neural.embedding_dim) : 0u)
          << method << " annotator " << a;
    }
    EXPECT_TRUE((*model)->AnnotatorEmbedding(kAnnotators).empty()) << method;
    EXPECT_TRUE((*model)->AnnotatorEmbedding(-1).empty()) << method;
    if (learns_one) {
      EXPECT_NE((*model)->AnnotatorEmbedding(0), (*model)->AnnotatorEmbedding(1)) << method;
      // A restored model serves the same embeddings.
      auto restored = CreateTruthModel(method, 2, options);
      ASSERT_TRUE(restored.ok());
      ASSERT_TRUE((*restored)->Restore((*model)->Serialize()).ok()) << method;
      EXPECT_EQ((*restored)->AnnotatorEmbedding(3), (*model)->AnnotatorEmbedding(3)) << method;
    }
    if (std::string(method) != "lia") {
      EXPECT_FALSE((*model)->ItemDifficulty(0).has_value()) << method;
    }
  }
}

// Three classes; 60 annotators with two features: the first says whether the annotator is
// skilled (+1: right with probability 0.9) or a guesser (-1: right with probability 0.4, else a
// uniformly wrong class), the second is noise. Each of the 500 items gets 5 annotators.
struct FeatureCrowd {
  static constexpr int32_t kItems = 500, kAnnotators = 60, kClasses = 3, kDim = 2;
  AnnotationMatrix data;
  std::vector<float> features;  // kAnnotators x kDim, raw
};

FeatureCrowd SkilledAndGuessingAnnotators() {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0, 1);
  FeatureCrowd crowd;
  std::vector<bool> skilled(FeatureCrowd::kAnnotators);
  for (int32_t a = 0; a < FeatureCrowd::kAnnotators; ++a) {
    skilled[a] = a % 2 == 0;
    crowd.features.push_back(skilled[a] ? 1.0f : -1.0f);
    crowd.features.push_back(static_cast<float>(unit(rng) - 0.5));
  }
  std::vector<Annotation> labels;
  std::vector<int32_t> pool(FeatureCrowd::kAnnotators);
  for (int32_t a = 0; a < FeatureCrowd::kAnnotators; ++a) pool[a] = a;
  for (int32_t i = 0; i < FeatureCrowd::kItems; ++i) {
    const int32_t y = static_cast<int32_t>(rng() % FeatureCrowd::kClasses);
    for (int32_t j = 0; j < 5; ++j) {
      std::swap(pool[j], pool[j + rng() % (FeatureCrowd::kAnnotators - j)]);
      const int32_t a = pool[j];
      int32_t label = y;
      if (unit(rng) >= (skilled[a] ? 0.9 : 0.4)) {
        label = (y + 1 + static_cast<int32_t>(rng() % (FeatureCrowd::kClasses - 1))) % FeatureCrowd::kClasses;
      }
      labels.push_back({i, a, label});
    }
  }
  crowd.data = *AnnotationMatrix::Build(FeatureCrowd::kItems, FeatureCrowd::kAnnotators,
                                        FeatureCrowd::kClasses, labels);
  return crowd;
}

double MeanDiagonal(const std::vector<double>& confusion, int32_t k) {
  double sum = 0;
  for (int32_t c = 0; c < k; ++c) sum += confusion[static_cast<size_t>(c) * k + c] / k;
  return sum;
}

// An annotator added after the fit but given features gets the confusion lia's competence
// network predicts from them (truth_model.h, lia.h):
//  - for features equal to a fitted annotator's, exactly that annotator's served confusion
//    (the same encoder and competence network on the same standardised features);
//  - for a skilled annotator's features, an accurate confusion, and for a guesser's, one far
//    less accurate than the population confusion an annotator without features gets;
//  - the same after Serialize/Restore and Clone;
//  - nothing for annotators in the fit, features of the wrong size, or models without a
//    competence network (ds, crowdlayer).
TEST(ServedFieldsTest, LiaPredictsANewAnnotatorsConfusionFromItsFeatures) {
  const FeatureCrowd crowd = SkilledAndGuessingAnnotators();
  const int32_t k = FeatureCrowd::kClasses, unseen = FeatureCrowd::kAnnotators;
  auto model = CreateTruthModel("lia", k, CpuOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->AnnotatorConfusionFromFeatures(unseen, {1.0f, 0.0f}).empty());  // no fit
  ASSERT_TRUE((*model)->SetAnnotatorFeatures(FeatureCrowd::kDim, crowd.features).ok());
  ASSERT_TRUE((*model)->Fit(crowd.data, {}, false).ok());

  for (int32_t a : {0, 1, 7}) {
    const absl::Span<const float> own(crowd.features.data() + a * FeatureCrowd::kDim, FeatureCrowd::kDim);
    const std::vector<double> predicted = (*model)->AnnotatorConfusionFromFeatures(unseen, own);
    const std::vector<double> fitted = (*model)->AnnotatorConfusion(a);
    ASSERT_EQ(predicted.size(), fitted.size()) << a;
    for (size_t c = 0; c < fitted.size(); ++c) EXPECT_NEAR(predicted[c], fitted[c], 1e-5) << a << " cell " << c;
    EXPECT_TRUE((*model)->AnnotatorConfusionFromFeatures(a, own).empty()) << "annotator " << a << " is in the fit";
  }
  EXPECT_TRUE((*model)->AnnotatorConfusionFromFeatures(unseen, {1.0f}).empty());

  const std::vector<double> skilled = (*model)->AnnotatorConfusionFromFeatures(unseen, {1.0f, 0.1f});
  const std::vector<double> guesser = (*model)->AnnotatorConfusionFromFeatures(unseen + 1, {-1.0f, 0.1f});
  ASSERT_EQ(skilled.size(), static_cast<size_t>(k * k));
  ASSERT_EQ(guesser.size(), static_cast<size_t>(k * k));
  for (const std::vector<double>* q : {&skilled, &guesser}) {
    for (int32_t row = 0; row < k; ++row) {
      double sum = 0;
      for (int32_t y = 0; y < k; ++y) sum += (*q)[row * k + y];
      EXPECT_NEAR(sum, 1.0, 1e-9);
    }
  }
  const double population = MeanDiagonal((*model)->AnnotatorConfusion(unseen), k);
  std::printf("lia, predicted mean diagonal: skilled %.3f, guesser %.3f, population %.3f "
              "(true 0.9 and 0.4)\n",
              MeanDiagonal(skilled, k), MeanDiagonal(guesser, k), population);
  // The population confusion (the mean competence, what an annotator without features gets)
  // says nothing about a guesser; the prediction from its features does.
  EXPECT_GT(MeanDiagonal(skilled, k), MeanDiagonal(guesser, k) + 0.3);
  EXPECT_LT(MeanDiagonal(guesser, k), population - 0.1);
  EXPECT_GT(MeanDiagonal(skilled, k), 0.75);
  EXPECT_LT(MeanDiagonal(guesser, k), 0.6);

  auto restored = CreateTruthModel("lia", k, CpuOptions());
  ASSERT_TRUE(restored.ok());
  ASSERT_TRUE((*restored)->Restore((*model)->Serialize()).ok());
  EXPECT_EQ((*restored)->AnnotatorConfusionFromFeatures(unseen, {1.0f, 0.1f}), skilled);
  EXPECT_EQ((*model)->Clone()->AnnotatorConfusionFromFeatures(unseen, {1.0f, 0.1f}), skilled);

  for (const char* method : {"ds", "crowdlayer"}) {
    auto other = CreateTruthModel(method, k, CpuOptions());
    ASSERT_TRUE(other.ok()) << method;
    ASSERT_TRUE((*other)->SetAnnotatorFeatures(FeatureCrowd::kDim, crowd.features).ok()) << method;
    ASSERT_TRUE((*other)->Fit(crowd.data, {}, false).ok()) << method;
    EXPECT_TRUE((*other)->AnnotatorConfusionFromFeatures(unseen, {1.0f, 0.1f}).empty()) << method;
  }
}

}  // namespace
}  // namespace verity::models
