// What the neural models learn beyond posteriors and confusions, as the server serves it
// (proto/verity/v1/truth.proto): lia's item difficulty and the annotator embeddings of lia and
// conal. The expectations follow from the documented definitions (models/truth_model.h), not
// from the code under test.
#include <cmath>
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

}  // namespace
}  // namespace verity::models
